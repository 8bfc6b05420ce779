"""POST /v1/topics/{topic}/records through the local adapter, over real HTTP, against a real broker."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Callable

import pytest

from broker_core.client import FloeClient
from broker_core.local_stack import LocalStack
from broker_core.partitioner import partition_for_key
from functions.models import MAX_RECORDS_PER_REQUEST
from tests.functions.http_api import HttpApi


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def read_partition(stack: LocalStack, topic: str, partition: int) -> list:
    async def fetch() -> list:
        async with FloeClient(stack.bootstrap_servers) as client:
            return (await client.fetch(topic, partition, 0, max_wait_ms=0)).records

    return asyncio.run(fetch())


def test_keyed_records_land_where_kafkas_partitioner_puts_them_and_answers_follow_request_order(
        api: HttpApi, make_topic: Callable[..., str], http_stack: LocalStack) -> None:
    topic = make_topic(partitions=6)
    keys = [f"customer-{n}" for n in range(40)]
    answer = api.post(f"/v1/topics/{topic}/records", {"records": [
        {"key": {"type": "STRING", "data": key}, "value": {"type": "JSON", "data": {"n": n}}}
        for n, key in enumerate(keys)
    ]})
    assert answer.status == 200, answer.body
    results = answer.body["results"]
    assert [r["partition_id"] for r in results] == [partition_for_key(k.encode(), 6) for k in keys]
    for partition in range(6):
        stored = read_partition(http_stack, topic, partition)
        mine = [(n, r) for n, r in enumerate(results) if r["partition_id"] == partition]
        assert [r["offset"] for _, r in mine] == [record.offset for record in stored]
        assert [json.loads(record.value) for record in stored] == [{"n": n} for n, _ in mine]
        assert [record.key for record in stored] == [keys[n].encode() for n, _ in mine]


def test_one_record_with_every_field_round_trips_through_fetch(api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=2)
    record = {
        "partition_id": 1,
        "key": {"type": "BINARY", "data": b64(b"\x00\xffkey")},
        "value": {"type": "STRING", "data": "héllo"},
        "headers": [{"name": "trace", "value": b64(b"abc")}, {"name": "empty", "value": None}],
        "timestamp": "2024-05-01T12:00:00Z",
    }
    answer = api.post(f"/v1/topics/{topic}/records", record)
    assert answer.status == 200, answer.body
    assert answer.body == {"results": [{"partition_id": 1, "offset": 0, "timestamp": 1714564800000}]}
    fetched = api.get(f"/v1/topics/{topic}/partitions/1/records?offset=0&format=string").body["records"]
    assert fetched == [{
        "offset": 0, "timestamp": 1714564800000,
        "key": {"type": "BINARY", "data": b64(b"\x00\xffkey")},
        "value": {"type": "STRING", "data": "héllo"},
        "headers": [{"name": "trace", "value": b64(b"abc")}, {"name": "empty", "value": None}],
    }]


def test_unkeyed_records_of_one_request_share_one_partition(api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=4)
    answer = api.post(f"/v1/topics/{topic}/records",
                      {"records": [{"value": {"type": "STRING", "data": str(n)}} for n in range(10)]})
    partitions = {r["partition_id"] for r in answer.body["results"]}
    offsets = [r["offset"] for r in answer.body["results"]]
    assert len(partitions) == 1
    assert offsets == list(range(10))


def test_a_retry_with_the_same_idempotency_key_appends_once_and_gets_the_first_answer(
        api: HttpApi, make_topic: Callable[..., str], log_end_offsets: Callable[[str], dict[int, int]]) -> None:
    topic = make_topic(partitions=1)
    body = {"records": [{"value": {"type": "STRING", "data": f"order-{n}"}} for n in range(5)]}
    key = {"Idempotency-Key": uuid.uuid4().hex}
    first = api.post(f"/v1/topics/{topic}/records", body, headers=key)
    retry = api.post(f"/v1/topics/{topic}/records", body, headers=key)
    assert first.status == retry.status == 200
    assert retry.body == first.body
    assert log_end_offsets(topic) == {0: 5}
    other_key = api.post(f"/v1/topics/{topic}/records", body, headers={"Idempotency-Key": uuid.uuid4().hex})
    assert [r["offset"] for r in other_key.body["results"]] == [5, 6, 7, 8, 9]


def test_an_idempotency_key_reused_with_another_body_is_refused_and_appends_nothing(
        api: HttpApi, make_topic: Callable[..., str], log_end_offsets: Callable[[str], dict[int, int]]) -> None:
    topic = make_topic(partitions=1)
    key = {"Idempotency-Key": uuid.uuid4().hex}
    assert api.post(f"/v1/topics/{topic}/records", {"value": {"type": "STRING", "data": "a"}}, headers=key).status == 200
    changed = api.post(f"/v1/topics/{topic}/records", {"value": {"type": "STRING", "data": "b"}}, headers=key)
    assert changed.status == 422
    assert "Idempotency-Key" in changed.body["message"]
    assert log_end_offsets(topic) == {0: 1}


GOOD = {"value": {"type": "STRING", "data": "fine"}}


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"records": [GOOD, {"value": {"type": "BINARY", "data": "not base64!"}}]}, 422, "body.records.1.value"),
    ({"records": [GOOD, {"value": {"type": "TEXT", "data": "x"}}]}, 422, "body.records.1.value.type"),
    ({"records": [GOOD, {"key": {"type": "STRING", "data": 7}}]}, 422, "body.records.1.key"),
    ({"records": [GOOD, {"value": {"type": "STRING", "data": "x"}, "colour": "red"}]}, 422, "body.records.1.colour"),
    ({"records": [GOOD, {"headers": [{"name": "h", "value": "%%%"}]}]}, 422, "body.records.1.headers.0.value"),
    ({"records": [GOOD, {"timestamp": -5}]}, 422, "body.records.1.timestamp"),
    ({"records": [GOOD, {"partition_id": 3}]}, 422, "body.records.1.partition_id"),
    ({"records": []}, 422, "body.records"),
    ({"value": {"type": "JSON"}, "partition_id": "zero"}, 422, "body.partition_id"),
])
def test_a_malformed_body_names_the_field_and_appends_nothing(
        api: HttpApi, make_topic: Callable[..., str], log_end_offsets: Callable[[str], dict[int, int]],
        body: dict, status: int, field: str) -> None:
    topic = make_topic(partitions=2)
    before = log_end_offsets(topic)
    answer = api.post(f"/v1/topics/{topic}/records", body)
    assert answer.status == status, answer.body
    assert answer.body["error_code"] == status
    assert field in [error["field"] for error in answer.body["errors"]]
    assert log_end_offsets(topic) == before == {0: 0, 1: 0}


def test_a_body_that_is_not_json_gets_400_and_appends_nothing(
        api: HttpApi, make_topic: Callable[..., str], log_end_offsets: Callable[[str], dict[int, int]]) -> None:
    topic = make_topic(partitions=1)
    answer = api.post(f"/v1/topics/{topic}/records", raw=b'{"records": [')
    assert answer.status == 400
    assert answer.body["message"] == "the body is not valid JSON"
    assert log_end_offsets(topic) == {0: 0}


def test_a_body_over_six_megabytes_gets_413_and_appends_nothing(
        api: HttpApi, make_topic: Callable[..., str], log_end_offsets: Callable[[str], dict[int, int]]) -> None:
    topic = make_topic(partitions=1)
    value = b64(b"x" * 700_000)
    body = {"records": [{"value": {"type": "BINARY", "data": value}} for _ in range(7)]}
    answer = api.post(f"/v1/topics/{topic}/records", body)
    assert answer.status == 413
    assert answer.body["error_code"] == 413
    assert log_end_offsets(topic) == {0: 0}


def test_more_records_than_the_request_limit_get_413_and_append_nothing(
        api: HttpApi, make_topic: Callable[..., str], log_end_offsets: Callable[[str], dict[int, int]]) -> None:
    topic = make_topic(partitions=1)
    record = {"value": {"type": "STRING", "data": "x"}}
    answer = api.post(f"/v1/topics/{topic}/records", {"records": [record] * (MAX_RECORDS_PER_REQUEST + 1)})
    assert answer.status == 413
    assert answer.body["error_code"] == 413
    assert answer.body["limit"] == MAX_RECORDS_PER_REQUEST
    assert answer.body["count"] == MAX_RECORDS_PER_REQUEST + 1
    assert str(MAX_RECORDS_PER_REQUEST) in answer.body["message"]
    assert log_end_offsets(topic) == {0: 0}
    answer = api.post(f"/v1/topics/{topic}/records", {"records": [record] * MAX_RECORDS_PER_REQUEST})
    assert answer.status == 200, answer.body
    assert log_end_offsets(topic) == {0: MAX_RECORDS_PER_REQUEST}


def test_a_batch_over_max_message_bytes_gets_413_and_no_partition_is_appended(
        api: HttpApi, make_topic: Callable[..., str], log_end_offsets: Callable[[str], dict[int, int]]) -> None:
    topic = make_topic(partitions=2, configs={"max.message.bytes": "10000"})
    body = {"records": [
        {"partition_id": 0, "value": {"type": "STRING", "data": "small"}},
        {"partition_id": 1, "value": {"type": "STRING", "data": "y" * 20_000}},
    ]}
    answer = api.post(f"/v1/topics/{topic}/records", body)
    assert answer.status == 413
    assert "max.message.bytes" in answer.body["message"]
    assert log_end_offsets(topic) == {0: 0, 1: 0}


def test_an_unknown_topic_gets_404(api: HttpApi) -> None:
    answer = api.post(f"/v1/topics/no-such-{uuid.uuid4().hex[:8]}/records", GOOD)
    assert answer.status == 404
    assert answer.body["error_code"] == 404
