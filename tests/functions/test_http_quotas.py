"""Byte-rate quotas on the HTTP API, per IAM principal, through the local adapter against moto server
and a real broker: 429 with Retry-After and a JSON body, nothing written, other principals untouched."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable

from broker_core.client import FloeClient
from broker_core.local_stack import LocalStack
from functions.quotas import QUOTAS_TTL_S
from tests.functions.conftest import caller_arn
from tests.functions.http_api import HttpApi

VALUE = base64.b64encode(b"v" * 12_000).decode()
RECORD = {"value": {"type": "BINARY", "data": VALUE}}


def set_user_quota(stack: LocalStack, user: str, key: str, value: float | None) -> None:
    async def alter() -> None:
        async with FloeClient(stack.bootstrap_servers) as client:
            if value is None:
                await client.alter_client_quotas([("user", user)], {}, [key])
            else:
                await client.alter_client_quotas([("user", user)], {key: value})

    asyncio.run(alter())
    time.sleep(QUOTAS_TTL_S + 0.5)  # every container has re-read the quotas


def test_a_producer_over_its_quota_gets_429_with_retry_after_and_nothing_is_appended(
        callers: dict[str, HttpApi], http_stack: LocalStack, make_topic: Callable[..., str],
        log_end_offsets: Callable[[str], dict[int, int]]) -> None:
    topic = make_topic(partitions=1)
    set_user_quota(http_stack, caller_arn("alice"), "producer_byte_rate", 20_000)
    try:
        alice, bob = callers["alice"], callers["bob"]
        statuses = []
        refused = None
        for _ in range(6):  # each request is about 16 kB: the bucket (20 kB) lets one or two through
            answer = alice.post(f"/v1/topics/{topic}/records", RECORD)
            statuses.append(answer.status)
            if answer.status == 429:
                refused = answer
                break
        assert refused is not None, statuses
        accepted = statuses.count(200)
        assert 1 <= accepted <= 3 and set(statuses) == {200, 429}
        assert refused.body["error_code"] == 429
        assert refused.body["quota"] == "producer_byte_rate"
        assert 0 < refused.body["retry_after_ms"] <= 2_000
        assert int(refused.headers["retry-after"]) >= 1
        assert log_end_offsets(topic) == {0: accepted}
        # Another principal is not held to alice's quota.
        assert bob.post(f"/v1/topics/{topic}/records", RECORD).status == 200
        time.sleep(int(refused.headers["retry-after"]))
        assert alice.post(f"/v1/topics/{topic}/records", RECORD).status == 200
        assert log_end_offsets(topic) == {0: accepted + 2}
    finally:
        set_user_quota(http_stack, caller_arn("alice"), "producer_byte_rate", None)


def test_a_consumer_over_its_quota_gets_429_and_reads_no_more_than_its_bucket_allows(
        callers: dict[str, HttpApi], api: HttpApi, http_stack: LocalStack, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1)
    for _ in range(4):
        assert api.post(f"/v1/topics/{topic}/records", {"records": [RECORD] * 5}).status == 200
    set_user_quota(http_stack, caller_arn("carol"), "consumer_byte_rate", 50_000)
    try:
        carol = callers["carol"]
        offset, answers = 0, []
        for _ in range(10):
            answer = carol.get(f"/v1/topics/{topic}/partitions/0/records?offset={offset}&max_bytes=4000000")
            answers.append(answer)
            if answer.status != 200:
                break
            offset = answer.body["next_offset"]
        assert answers[0].status == 200
        # The first answer holds what the 50 kB bucket allows (whole batches, at least one), not 4 MB.
        assert 0 < len(answers[0].body["records"]) <= 10
        refused = answers[-1]
        assert refused.status == 429, [a.status for a in answers]
        assert refused.body["quota"] == "consumer_byte_rate"
        assert int(refused.headers["retry-after"]) >= 1
        # The main caller has no quota and reads everything at once.
        whole = api.get(f"/v1/topics/{topic}/partitions/0/records?offset=0&max_bytes=4000000")
        assert len(whole.body["records"]) == 20
    finally:
        set_user_quota(http_stack, caller_arn("carol"), "consumer_byte_rate", None)
