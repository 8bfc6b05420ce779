"""Data loss under a stream, as Spark's Kafka source handles it: fail, or skip with failOnDataLoss=false.

- Offsets below the log start: records a stream's starting offsets (or checkpoint) need were deleted
  (DeleteRecords, as retention would). The query fails naming the option that skips; with
  failOnDataLoss=false it reads from the log start on.
- A segment object missing from S3 while its manifest row remains: the task reading it fails the
  query with a data-loss message; with failOnDataLoss=false the segment's range is skipped and every
  other record is read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from broker_core.client import FloeClient
from broker_core.local_stack import STACK_FILE, LocalStack
from emr_jobs import FloeReader
from emr_jobs.options import parse_options
from emr_jobs.remote import s3_client
from tests.emr_jobs.test_tail_reads import create_tiered_topic, produce, tiered_end
from tests.support.stack import running_stack
from tests.support.waiting import wait_until
from tiered_storage.manifest import ManifestStore, SegmentState

pytestmark = [pytest.mark.slow, pytest.mark.faults]  # Spark streams over deleted data, about 30 s: in `make faults`, outside CI's 20-minute budget

WAIT_S = 180.0


def stream_values(spark: SparkSession, stack: LocalStack, topic: str, checkpoint: Path, **options: str) -> list[bytes]:
    """Every value an AvailableNow stream of ``topic`` hands to foreachBatch."""
    rows: list[bytes] = []
    query = (
        spark.readStream.format("floe")
        .options(subscribe=topic, stack=str(stack.directory / STACK_FILE), **options)
        .load()
        .writeStream.foreachBatch(lambda frame, _: rows.extend(bytes(r["value"]) for r in frame.collect()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(WAIT_S)
    return rows


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("data-loss"), overrides={"remote.log.manager.task.interval.ms": "200"}
                       ) as stack:
        yield stack


def test_a_stream_starting_below_the_log_start_fails_or_skips_as_failondataloss_says(
    spark: SparkSession, stack: LocalStack, tmp_path: Path
) -> None:
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    for future in admin.create_topics([NewTopic("trimmed", 1, 1)]).values():
        future.result(timeout=30)
    values = [f"record-{n}".encode() for n in range(100)]
    produce(stack, "trimmed", values, 1)

    async def trim() -> int:
        async with FloeClient(stack.bootstrap_servers) as client:
            return await client.delete_records("trimmed", 0, 60)

    assert asyncio.run(trim()) == 60
    below = json.dumps({"trimmed": {"0": 10}})
    with pytest.raises(StreamingQueryException, match=r"offset 10 is needed but the log now starts at 60.*failOnDataLoss=false"):
        stream_values(spark, stack, "trimmed", tmp_path / "strict", startingOffsets=below)
    lenient = stream_values(spark, stack, "trimmed", tmp_path / "lenient", startingOffsets=below, failOnDataLoss="false")
    assert lenient == values[60:]


@pytest.mark.faults  # waits for two tiered segments and runs two streams: over 30 s
def test_a_segment_missing_from_s3_fails_the_stream_or_is_skipped_as_failondataloss_says(
    spark: SparkSession, stack: LocalStack, tmp_path: Path
) -> None:
    topic_id = create_tiered_topic(stack, "holed", 1)
    values = [f"holed-{n}-".encode() * 8 for n in range(400)]
    produce(stack, "holed", values, 1)
    wait_until(lambda: len(ManifestStore(stack.aws).list_segments(topic_id, 0)) >= 2, "two tiered segments", WAIT_S)
    first = ManifestStore(stack.aws).list_segments(topic_id, 0)[0]
    assert tiered_end(stack, topic_id, 0) > first.end_offset + 1
    s3_client(stack.aws).delete_object(Bucket=stack.aws.bucket, Key=first.log_key)

    with pytest.raises(StreamingQueryException, match="is gone from S3.*failOnDataLoss=false"):
        stream_values(spark, stack, "holed", tmp_path / "strict", startingOffsets="earliest")
    lenient = stream_values(spark, stack, "holed", tmp_path / "lenient", startingOffsets="earliest",
                            failOnDataLoss="false")
    assert sorted(lenient) == sorted(values[first.end_offset + 1:])


def test_a_tiered_topic_trimmed_by_delete_records_is_read_from_its_new_log_start(
    spark: SparkSession, stack: LocalStack, tmp_path: Path
) -> None:
    topic_id = create_tiered_topic(stack, "tiered-trimmed", 1)
    values = [f"trimmed-{n}-".encode() * 8 for n in range(400)]
    produce(stack, "tiered-trimmed", values, 1)
    wait_until(lambda: len(ManifestStore(stack.aws).list_segments(topic_id, 0)) >= 3, "three tiered segments", WAIT_S)
    second = ManifestStore(stack.aws).list_segments(topic_id, 0)[1]
    log_start = second.base_offset + 5  # inside the second segment, whose first records are still in S3

    async def trim() -> int:
        async with FloeClient(stack.bootstrap_servers) as client:
            return await client.delete_records("tiered-trimmed", 0, log_start)

    assert asyncio.run(trim()) == log_start
    streamed = stream_values(spark, stack, "tiered-trimmed", tmp_path / "stream", startingOffsets="earliest")
    assert streamed == values[log_start:]
    # The batch source's planning and reads, run in this process (what Spark's workers would run).
    floe = FloeReader(parse_options({"topic": "tiered-trimmed", "stack": str(stack.directory / STACK_FILE)}, {}))
    planned = floe.partitions()
    assert not any(f"/{ManifestStore(stack.aws).list_segments(topic_id, 0, list(SegmentState))[0].base_offset:020d}-"
                   in getattr(read, "log_key", "") for read in planned)
    rows = [row for read in planned for batch in floe.read(read) for row in batch.to_pylist()]
    assert [row["value"] for row in sorted(rows, key=lambda row: row["offset"])] == values[log_start:]
