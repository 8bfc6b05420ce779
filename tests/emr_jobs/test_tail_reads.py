"""Batch reads to the head: records still on broker disks are read from the leader, tiered ones from S3.

A real broker process tiers sealed segments to S3 (moto server) while its active segment stays on
disk. The floe source with the stack's bootstrap servers returns every acknowledged record, up to
the high watermark, exactly once and in order; with tieredOnly it stops at the tiered end.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from broker_core.local_stack import STACK_FILE, LocalStack
from broker_core.metadata.store import MetadataStore
from tests.support.stack import running_stack
from tests.support.waiting import wait_until
from tiered_storage.manifest import ManifestStore

pytestmark = [pytest.mark.slow, pytest.mark.faults]  # Spark tail reads from brokers, minutes: in `make faults`, outside CI's 20-minute budget

TOPIC = "tail"
PARTITIONS = 2
RECORDS = 600
WAIT_S = 120.0


def create_tiered_topic(stack: LocalStack, topic: str, partitions: int) -> str:
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    configs = {"remote.storage.enable": "true", "segment.bytes": str(8 * 1024)}
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=configs)]).values():
        future.result(timeout=30)
    return MetadataStore(stack.aws).get_topic(topic).topic_id


def produce(stack: LocalStack, topic: str, values: list[bytes], partitions: int) -> None:
    """``values`` round-robin over the partitions, in batches of 20 records (so segments roll)."""
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all", "batch.num.messages": 20})
    for number, value in enumerate(values):
        producer.produce(topic, key=str(number).encode(), value=value, partition=number % partitions)
        producer.poll(0)
    assert producer.flush(60) == 0


def tiered_end(stack: LocalStack, topic_id: str, partition: int) -> int:
    segments = ManifestStore(stack.aws).list_segments(topic_id, partition)
    return segments[-1].end_offset + 1 if segments else 0


def test_a_batch_read_returns_every_acknowledged_record_tiered_or_not(spark: SparkSession, tmp_path: Path) -> None:
    with running_stack(tmp_path, overrides={"remote.log.manager.task.interval.ms": "200"}) as stack:
        topic_id = create_tiered_topic(stack, TOPIC, PARTITIONS)
        values = [f"record-{number}-".encode() * 8 for number in range(RECORDS)]
        produce(stack, TOPIC, values, PARTITIONS)
        wait_until(lambda: all(tiered_end(stack, topic_id, p) > 0 for p in range(PARTITIONS)),
                   "some segments of every partition to be tiered", WAIT_S)
        stack_file = str(stack.directory / STACK_FILE)
        rows = (
            spark.read.format("floe").options(topic=TOPIC, stack=stack_file).load()
            .select("partition", "offset", "key", "value").collect()
        )
        by_partition: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        for row in rows:
            by_partition[row["partition"]].append((row["offset"], bytes(row["value"])))
        for partition in range(PARTITIONS):
            expected = [(index, values[number]) for index, number in enumerate(range(partition, RECORDS, PARTITIONS))]
            assert sorted(by_partition[partition]) == expected
            assert tiered_end(stack, topic_id, partition) < len(expected)  # the tail held records S3 does not

        ends_before = {p: tiered_end(stack, topic_id, p) for p in range(PARTITIONS)}
        tiered_only = spark.read.format("floe").options(topic=TOPIC, stack=stack_file, tieredOnly="true").load()
        counts = {row["partition"]: row["count"] for row in tiered_only.groupBy("partition").count().collect()}
        for partition in range(PARTITIONS):  # the uploader may tier more while Spark reads
            assert ends_before[partition] <= counts[partition] <= tiered_end(stack, topic_id, partition)
