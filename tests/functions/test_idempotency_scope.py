"""Idempotency keys belong to the caller: two principals using one key never see each other's answers."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from tests.functions.http_api import HttpApi


def test_two_principals_with_one_idempotency_key_each_append_and_get_their_own_answer(
        callers: dict[str, HttpApi], make_topic: Callable[..., str],
        log_end_offsets: Callable[[str], dict[int, int]]) -> None:
    topic = make_topic(partitions=1)
    key = {"Idempotency-Key": uuid.uuid4().hex}
    body = {"value": {"type": "STRING", "data": "same body"}}
    alice = callers["alice"].post(f"/v1/topics/{topic}/records", body, headers=key)
    bob = callers["bob"].post(f"/v1/topics/{topic}/records", body, headers=key)
    assert alice.status == bob.status == 200
    assert {alice.body["results"][0]["offset"], bob.body["results"][0]["offset"]} == {0, 1}
    assert log_end_offsets(topic) == {0: 2}
    # A retry by each gets its own first answer; another body under bob's key does not reveal alice's.
    assert callers["alice"].post(f"/v1/topics/{topic}/records", body, headers=key).body == alice.body
    assert callers["bob"].post(f"/v1/topics/{topic}/records", body, headers=key).body == bob.body
    other = callers["carol"].post(f"/v1/topics/{topic}/records", {"value": {"type": "STRING", "data": "x"}},
                                  headers=key)
    assert other.status == 200
    assert log_end_offsets(topic) == {0: 3}
