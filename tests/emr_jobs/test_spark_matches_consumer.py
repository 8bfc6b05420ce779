"""Spark matches a consumer: the floe DataFrame of a tiered topic holds exactly what a Kafka consumer reads.

A real client (librdkafka, through confluent-kafka) produces to a broker process in every codec,
with keys, null keys and headers; the broker tiers its sealed segments to S3 (moto server). Spark
reads the tiered segments through the manifest, and a Kafka consumer assigned from the earliest
offset reads the same partitions through the broker; within each partition the rows must be equal,
in the same order, field by field. The offset and timestamp options are checked the same way, with
the consumer's own offsets_for_times (ListOffsets by timestamp) deciding where a timestamp range
starts and ends.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import boto3
import pytest
from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from broker_core.local_stack import STACK_FILE, LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.records.header import Compression, iter_headers
from tests.support.stack import running_stack
from tests.support.waiting import wait_until
from tiered_storage.manifest import ManifestStore

pytestmark = [pytest.mark.slow, pytest.mark.faults]  # Spark against a consumer, a minute or more: in `make faults`, outside CI's 20-minute budget

TOPIC = "clicks"
PARTITIONS = 3
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS_PER_CODEC = 300
BASE_TIMESTAMP_MS = int(time.time() * 1000) - 3_600_000
WAIT_S = 120.0


def produce_in_every_codec(stack: LocalStack) -> int:
    """RECORDS_PER_CODEC records per codec, one producer per codec in turn; returns how many were sent.

    Timestamps rise 10 ms per record with jitter of up to +-40 ms, so they are not monotonic.
    """
    number = 0
    for codec in CODECS:
        producer = Producer(
            {
                "bootstrap.servers": stack.bootstrap_servers,
                "acks": "all",
                "compression.type": codec,
                "linger.ms": 5,
                "batch.num.messages": 40,
            }
        )
        for _ in range(RECORDS_PER_CODEC):
            key = None if number % 7 == 0 else f"user-{number % 50}".encode()
            headers = [("codec", codec.encode()), ("seq", str(number).encode()), ("empty", None)] if number % 4 else None
            producer.produce(
                TOPIC,
                key=key,
                value=f"{codec}:{number}:".encode() * (1 + number % 9),
                partition=number % PARTITIONS,
                headers=headers,
                timestamp=BASE_TIMESTAMP_MS + 10 * number + (number * 7919) % 81 - 40,
            )
            number += 1
            producer.poll(0)
        assert producer.flush(60) == 0
    return number


def tiered_end_offsets(stack: LocalStack, topic_id: str) -> dict[int, int]:
    """One past the last tiered offset of each partition (0 when nothing is tiered)."""
    manifest = ManifestStore(stack.aws)
    ends = {}
    for partition in range(PARTITIONS):
        segments = manifest.list_segments(topic_id, partition)
        ends[partition] = segments[-1].end_offset + 1 if segments else 0
    return ends


def tiered_codecs(stack: LocalStack, topic_id: str) -> set[Compression]:
    """The codecs of the batches in the tiered .log objects, read straight from S3."""
    s3 = boto3.client("s3", **stack.aws.boto3_kwargs())
    manifest = ManifestStore(stack.aws)
    codecs = set()
    for partition in range(PARTITIONS):
        for segment in manifest.list_segments(topic_id, partition):
            data = s3.get_object(Bucket=stack.aws.bucket, Key=segment.log_key)["Body"].read()
            codecs |= {header.compression for _, header in iter_headers(data)}
    return codecs


def active_segment_bases(stack: LocalStack) -> dict[int, int]:
    """The base offset of each partition's active (never tiered) segment on the broker's disk."""
    data_dir = stack.processes[1].data_dir
    return {p: max(int(path.stem) for path in (data_dir / f"{TOPIC}-{p}").glob("*.log")) for p in range(PARTITIONS)}


def consume(stack: LocalStack, ends: dict[int, int]) -> dict[int, list[tuple]]:
    """Every record below ``ends`` of each partition, as a consumer assigned from the earliest offset reads it."""
    consumer = Consumer(
        {"bootstrap.servers": stack.bootstrap_servers, "group.id": "spark-check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, partition, OFFSET_BEGINNING) for partition in range(PARTITIONS)])
    rows: dict[int, list[tuple]] = {partition: [] for partition in range(PARTITIONS)}
    deadline = time.monotonic() + WAIT_S
    try:
        while any(len(rows[p]) < ends[p] and (not rows[p] or rows[p][-1][0] < ends[p] - 1) for p in rows):
            assert time.monotonic() < deadline, "consumer did not reach the tiered end offsets"
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            partition, offset = message.partition(), message.offset()
            if offset >= ends[partition]:
                continue
            kind, timestamp = message.timestamp()
            headers = message.headers()
            rows[partition].append(
                (
                    offset,
                    message.key(),
                    message.value(),
                    timestamp,
                    1 if kind == TIMESTAMP_LOG_APPEND_TIME else 0,
                    None if not headers else tuple(headers),
                )
            )
    finally:
        consumer.close()
    return rows


def offsets_for_times(stack: LocalStack, timestamp_ms: int) -> dict[int, int]:
    """The broker's ListOffsets answer for ``timestamp_ms`` per partition (-1: no record reaches it)."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "spark-check-times"})
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(TOPIC, partition, timestamp_ms) for partition in range(PARTITIONS)], timeout=30
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def spark_rows(frame: DataFrame) -> dict[int, list[tuple]]:
    """The DataFrame's rows per partition in the order Spark returns them, shaped like ``consume``'s."""
    rows: dict[int, list[tuple]] = {partition: [] for partition in range(PARTITIONS)}
    selected = frame.select(
        "partition", "offset", "key", "value", F.unix_millis("timestamp").alias("ms"), "timestampType", "headers"
    )
    for row in selected.collect():
        headers = row["headers"]
        rows[row["partition"]].append(
            (
                row["offset"],
                None if row["key"] is None else bytes(row["key"]),
                None if row["value"] is None else bytes(row["value"]),
                row["ms"],
                row["timestampType"],
                None if headers is None else tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in headers),
            )
        )
    return rows


def test_spark_reads_exactly_the_rows_a_consumer_reads_in_the_same_order(spark: SparkSession, tmp_path: Path) -> None:
    overrides = {"remote.log.manager.task.interval.ms": "200"}
    with running_stack(tmp_path, overrides=overrides) as stack:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        configs = {"remote.storage.enable": "true", "segment.bytes": str(16 * 1024)}
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=configs)]).values():
            future.result(timeout=30)
        topic_id = MetadataStore(stack.aws).get_topic(TOPIC).topic_id
        produced = produce_in_every_codec(stack)
        # Only sealed segments are tiered: a last round of records pushes every earlier one out of
        # the active segment, and the test waits until the manifest covers them all.
        last_of_codecs = {p: len(range(p, produced, PARTITIONS)) - 1 for p in range(PARTITIONS)}
        producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all"})
        for number in range(3 * 24):
            producer.produce(TOPIC, value=b"x" * 1024, partition=number % PARTITIONS)
        assert producer.flush(60) == 0
        wait_until(
            lambda: all(end > last_of_codecs[p] for p, end in tiered_end_offsets(stack, topic_id).items()),
            "the manifest to cover every record produced in the five codecs",
            WAIT_S,
        )
        # Then until every sealed segment is tiered, so that nothing changes while the two sides read.
        wait_until(
            lambda: tiered_end_offsets(stack, topic_id) == active_segment_bases(stack),
            "the manifest to reach each partition's active segment",
            WAIT_S,
        )
        ends = tiered_end_offsets(stack, topic_id)
        expected = consume(stack, ends)
        stack_file = str(stack.directory / STACK_FILE)

        def load(**options: str) -> DataFrame:
            return spark.read.format("floe").options(
                topic=TOPIC, stack=stack_file, includeHeaders="true", tieredOnly="true", **options
            ).load()

        everything = spark_rows(load())
        for partition in range(PARTITIONS):
            assert everything[partition] == expected[partition]
            assert [row[0] for row in everything[partition]] == list(range(ends[partition]))
        assert tiered_codecs(stack, topic_id) == set(Compression)

        starting = {"0": 17, "1": -2, "2": 101}
        ending = {"0": 190, "1": 64, "2": -1}
        by_offsets = spark_rows(
            load(startingOffsets=json.dumps({TOPIC: starting}), endingOffsets=json.dumps({TOPIC: ending}))
        )
        for partition in range(PARTITIONS):
            start = max(0, starting[str(partition)])
            end = ends[partition] if ending[str(partition)] == -1 else ending[str(partition)]
            assert by_offsets[partition] == [row for row in expected[partition] if start <= row[0] < end]

        start_ms, end_ms = BASE_TIMESTAMP_MS + 10 * 400, BASE_TIMESTAMP_MS + 10 * 1100
        first, stop = offsets_for_times(stack, start_ms), offsets_for_times(stack, end_ms)
        by_time = spark_rows(load(startingTimestamp=str(start_ms), endingTimestamp=str(end_ms)))
        for partition in range(PARTITIONS):
            wanted = [row for row in expected[partition] if first[partition] <= row[0] < stop[partition]]
            assert by_time[partition] == wanted
            assert 0 < len(wanted) < len(expected[partition])
