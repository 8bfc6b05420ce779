"""GET /v1/topics/{topic}/partitions/{p}/records: from the broker, and straight from S3 for tiered offsets."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError as BotoClientError
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient

from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.records import Compression
from broker_core.records.compression import DEFAULT_MAX_DECOMPRESSED_BYTES
from tests.emr_jobs.tiered_log import BESIDE_THE_LEADER_EPOCH, tier_segments
from tests.functions.conftest import HTTP_STACK_OVERRIDES
from tests.functions.http_api import HttpApi
from tests.support.bombs import log_holding_a_bomb
from tests.support.waiting import wait_until
from tiered_storage.manifest import ManifestStore

TIERED_CONFIGS = {"remote.storage.enable": "true", "segment.bytes": "4096", "local.retention.bytes": "0"}


def produce(api: HttpApi, topic: str, values: list[str], partition: int = 0, **fields: object) -> list[int]:
    answer = api.post(f"/v1/topics/{topic}/records", {"records": [
        {"partition_id": partition, "value": {"type": "STRING", "data": value}, **fields} for value in values]})
    assert answer.status == 200, answer.body
    return [r["offset"] for r in answer.body["results"]]


def test_values_come_back_in_the_format_asked_for_or_as_binary_when_they_do_not_fit(
        api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1)
    api.post(f"/v1/topics/{topic}/records", {"records": [
        {"value": {"type": "JSON", "data": {"total": 12.5, "items": [1, 2]}}},
        {"value": {"type": "STRING", "data": "not json"}},
        {"value": {"type": "BINARY", "data": base64.b64encode(b"\xff\xfe").decode()}},
        {"value": None, "key": {"type": "STRING", "data": "tombstone"}},
    ]})
    as_json = api.get(f"/v1/topics/{topic}/partitions/0/records?offset=0&format=json").body["records"]
    assert [r["value"] for r in as_json] == [
        {"type": "JSON", "data": {"total": 12.5, "items": [1, 2]}},
        {"type": "BINARY", "data": base64.b64encode(b"not json").decode()},
        {"type": "BINARY", "data": base64.b64encode(b"\xff\xfe").decode()},
        None,
    ]
    as_string = api.get(f"/v1/topics/{topic}/partitions/0/records?offset=0&format=string").body["records"]
    assert [r["value"] for r in as_string][:3] == [
        {"type": "STRING", "data": '{"total":12.5,"items":[1,2]}'},
        {"type": "STRING", "data": "not json"},
        {"type": "BINARY", "data": base64.b64encode(b"\xff\xfe").decode()},
    ]
    assert as_string[3]["key"] == {"type": "STRING", "data": "tombstone"}


def test_a_fetch_starts_at_the_offset_and_says_where_the_next_one_starts(
        api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1)
    for n in range(3):
        produce(api, topic, [f"batch{n}-{i}" for i in range(4)])
    answer = api.get(f"/v1/topics/{topic}/partitions/0/records?offset=5&max_bytes=1&format=string")
    assert answer.status == 200
    body = answer.body
    assert [r["value"]["data"] for r in body["records"]] == ["batch1-1", "batch1-2", "batch1-3"]
    assert body["next_offset"] == 8
    assert body["high_watermark"] == 12
    assert body["source"] == "broker"
    rest = api.get(f"/v1/topics/{topic}/partitions/0/records?offset=8&format=string").body
    assert [r["offset"] for r in rest["records"]] == [8, 9, 10, 11]
    assert rest["next_offset"] == 12
    at_end = api.get(f"/v1/topics/{topic}/partitions/0/records?offset=12").body
    assert at_end["records"] == [] and at_end["next_offset"] == 12


def test_a_timestamp_starts_the_fetch_at_the_first_record_that_late(
        api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1)
    base = time.time_ns() // 1_000_000 - 60_000  # recent: older timestamps would roll segments (segment.ms)
    for step in (1, 2, 3):
        produce(api, topic, [f"at-{step}"], timestamp=base + step * 1000)
    body = api.get(f"/v1/topics/{topic}/partitions/0/records?timestamp={base + 1500}&format=string").body
    assert [(r["offset"], r["value"]["data"]) for r in body["records"]] == [(1, "at-2"), (2, "at-3")]
    later = api.get(f"/v1/topics/{topic}/partitions/0/records?timestamp={base + 9000}").body
    assert later["records"] == [] and later["next_offset"] == 3


def test_without_offset_or_timestamp_the_fetch_starts_at_the_earliest_offset(
        api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1)
    produce(api, topic, ["first", "second"])
    body = api.get(f"/v1/topics/{topic}/partitions/0/records?format=string").body
    assert [r["value"]["data"] for r in body["records"]] == ["first", "second"]


def test_an_offset_past_the_end_gets_416_with_the_partitions_bounds(
        api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1)
    produce(api, topic, ["only"])
    answer = api.get(f"/v1/topics/{topic}/partitions/0/records?offset=50")
    assert answer.status == 416
    assert answer.body["log_start_offset"] == 0 and answer.body["high_watermark"] == 1


def test_unknown_topics_and_partitions_get_404(api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=2)
    assert api.get(f"/v1/topics/{topic}/partitions/2/records").status == 404
    assert api.get("/v1/topics/never-created/partitions/0/records").status == 404


def test_offset_and_timestamp_together_are_refused(api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1)
    assert api.get(f"/v1/topics/{topic}/partitions/0/records?offset=0&timestamp=5").status == 422


def wait_for_s3(api: HttpApi, topic: str, offset: int, timeout_s: float = 60.0) -> dict:
    body: dict = {}

    def from_s3() -> dict | None:
        nonlocal body
        body = api.get(f"/v1/topics/{topic}/partitions/0/records?offset={offset}&format=string").body
        return body if body.get("source") == "s3" else None

    return wait_until(from_s3, lambda: f"offset {offset} of {topic} tiered (last answer {body})", timeout_s,
                      interval_s=0.3)


def tiered_values(api: HttpApi, topic: str, start: int, end: int | None = None) -> list[tuple[int, str]]:
    """Records read from S3 from ``start`` on, following next_offset from call to call.

    With ``end`` (every offset below it already tiered), each step waits for S3: each of the front
    end's worker processes caches the segment list for 10 s, and a worker whose list predates a
    segment sends that read to the broker until its list is renewed. Without it, the walk stops at
    the first answer not from S3 (with the brokers down, stale workers re-read the list instead).
    """
    found = []
    offset = start
    while end is None or offset < end:
        if end is None:
            body = api.get(f"/v1/topics/{topic}/partitions/0/records?offset={offset}&format=string").body
            if body.get("source") != "s3":
                return found
        else:
            body = wait_for_s3(api, topic, offset)
        found += [(r["offset"], r["value"]["data"]) for r in body["records"]]
        offset = body["next_offset"]
    return found


def test_offsets_below_the_local_log_start_are_read_from_s3(api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1, configs=TIERED_CONFIGS)
    values = [f"record-{n:04d}-" + "x" * 100 for n in range(200)]
    for start in range(0, 200, 20):
        produce(api, topic, values[start:start + 20])
    first = wait_for_s3(api, topic, 0)
    assert first["high_watermark"] is None
    assert first["records"][0] == {"offset": 0, "timestamp": first["records"][0]["timestamp"], "key": None,
                                   "value": {"type": "STRING", "data": values[0]}, "headers": []}
    wait_for_s3(api, topic, 40)  # offsets 0-40 are all in S3 by now
    from_s3 = tiered_values(api, topic, 0, 41)
    assert len(from_s3) >= 41
    assert from_s3 == [(n, values[n]) for n in range(len(from_s3))]
    middle = wait_for_s3(api, topic, 25)
    assert [(r["offset"], r["value"]["data"]) for r in middle["records"]][0] == (25, values[25])


# In `make faults`, not `make test`: it stops every broker of a stack of its own (about 17 s).
@pytest.mark.faults
def test_tiered_history_stays_readable_with_every_broker_down(tmp_path: Path) -> None:
    stack = LocalStack(directory=tmp_path, brokers=1, overrides=HTTP_STACK_OVERRIDES, http=True)
    stack.start()
    try:
        info = stack.describe()["http"]
        api = HttpApi(info["url"], info["token"])
        assert api.post("/v1/topics", {"topic_name": "history", "partitions_count": 1, "configs": [
            {"name": k, "value": v} for k, v in TIERED_CONFIGS.items()]}).status == 201
        values = [f"old-{n:03d}-" + "y" * 150 for n in range(100)]
        for start in range(0, 100, 10):
            produce(api, "history", values[start:start + 10])
        wait_for_s3(api, "history", 0)
        stack.kill_broker(1)
        from_s3 = tiered_values(api, "history", 0)
        assert len(from_s3) >= 20
        assert from_s3 == [(n, values[n]) for n in range(len(from_s3))]
        beyond = api.get(f"/v1/topics/history/partitions/0/records?offset={len(from_s3)}")
        assert beyond.status == 503
    finally:
        stack.stop(save_state=False)


def test_a_decompression_bomb_in_s3_gets_502_naming_the_offset_but_not_the_object(
        api: HttpApi, make_topic: Callable[..., str], http_stack: LocalStack, tmp_path: Path) -> None:
    topic = make_topic(partitions=1, configs={"remote.storage.enable": "true", "retention.ms": "-1"})
    description = MetadataStore(http_stack.aws).get_topic(topic)
    log = log_holding_a_bomb(tmp_path / f"{topic}-0", Compression.ZSTD)
    (segment,) = tier_segments(http_stack.aws, log, description, 0, leader_epoch=BESIDE_THE_LEADER_EPOCH)
    answer = api.get(f"/v1/topics/{topic}/partitions/0/records?offset=1")
    assert answer.status == 502
    assert answer.body["error_code"] == 502
    assert segment.log_key not in answer.body["message"]  # S3 keys are the operator's, not the caller's
    assert "base offset 1" in answer.body["message"]
    assert str(DEFAULT_MAX_DECOMPRESSED_BYTES) in answer.body["message"]
    before = api.get(f"/v1/topics/{topic}/partitions/0/records?offset=0&max_bytes=1&format=string")
    assert before.status == 200
    assert [r["value"]["data"] for r in before.body["records"]] == ["before"]


@pytest.mark.faults  # about 10 s (uploads, a DeleteRecords, remote retention): in `make faults`
def test_delete_records_on_a_tiered_topic_hides_the_records_from_every_reader_and_s3_loses_them(
        http_stack: LocalStack, api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1, configs={**TIERED_CONFIGS, "retention.ms": "-1"})
    values = [f"record-{n:04d}-" + "x" * 100 for n in range(200)]
    for start in range(0, 200, 20):
        produce(api, topic, values[start:start + 20])
    wait_for_s3(api, topic, 120)  # most of the partition is only in S3 now
    topic_id = MetadataStore(http_stack.aws).get_topic(topic).topic_id
    manifest = ManifestStore(http_stack.aws)
    rows = manifest.list_segments(topic_id, 0)
    log_start = rows[1].base_offset + 7  # inside the second segment

    admin = KafkaAdminClient(bootstrap_servers=http_stack.bootstrap_servers)
    try:
        result = admin.delete_records({KpTopicPartition(topic, 0): log_start})
    finally:
        admin.close()
    assert result[KpTopicPartition(topic, 0)]["low_watermark"] == log_start

    # HTTP: 416 below the log start (straight away, though S3 still holds the records), records from it on.
    below = api.get(f"/v1/topics/{topic}/partitions/0/records?offset=0&format=string")
    assert below.status == 416, below.body
    assert below.body["log_start_offset"] == log_start
    at_start = wait_for_s3(api, topic, log_start)
    assert at_start["records"][0]["offset"] == log_start
    # Broker: earliest is the log start, and a fetch below it is out of range (the consumer resets).
    consumer = KafkaConsumer(bootstrap_servers=http_stack.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        partition = KpTopicPartition(topic, 0)
        consumer.assign([partition])
        assert consumer.beginning_offsets([partition])[partition] == log_start
        consumer.seek(partition, 3)
        first = next(iter(consumer))
        assert (first.offset, first.value.decode()) == (log_start, values[log_start])
    finally:
        consumer.close()
    # Remote retention deletes the segment wholly below the log start from the manifest and S3.
    wait_until(lambda: manifest.list_segments(topic_id, 0)[0].base_offset == rows[1].base_offset,
               "the first segment leaves the manifest", timeout_s=30, interval_s=0.3)
    s3 = boto3.client("s3", **http_stack.aws.boto3_kwargs())
    with pytest.raises(BotoClientError):
        s3.head_object(Bucket=http_stack.aws.bucket, Key=rows[0].log_key)
    s3.head_object(Bucket=http_stack.aws.bucket, Key=rows[1].log_key)
