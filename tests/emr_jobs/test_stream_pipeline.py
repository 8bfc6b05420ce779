"""A streaming pipeline in CI: the floe source (tiered segments and the tail) into the floe sink,
exactly-once, stopped and restarted from its checkpoint.

A topic is partly tiered to S3 when a query starts copying it into another topic with the
exactly-once sink (processing-time trigger). Records produced while it runs reach the copy within
its micro-batches (tail reads). The query is stopped, more records are produced, and a second query
on the same checkpoint (Trigger.AvailableNow) catches up. A read_committed reader of the copy then
finds every source record exactly once. The fault cases of each part (replayed micro-batches, zombie
transactions, data loss, leader moves) are in `make faults`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from broker_core.local_stack import STACK_FILE
from tests.emr_jobs.test_exactly_once_sink import read_committed_values
from tests.emr_jobs.test_tail_reads import create_tiered_topic, produce, tiered_end
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

PARTITIONS = 2  # as read_committed_values reads
WAIT_S = 180.0


def test_a_stream_copies_tiered_and_tail_records_once_across_a_restart(spark: SparkSession, tmp_path: Path) -> None:
    with running_stack(tmp_path / "stack", overrides={"remote.log.manager.task.interval.ms": "200"}) as stack:
        topic_id = create_tiered_topic(stack, "events", PARTITIONS)
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        for future in admin.create_topics([NewTopic("copy", PARTITIONS, 1)]).values():
            future.result(timeout=30)
        values = [f"event-{number:04d}-".encode() * 6 for number in range(900)]
        produce(stack, "events", values[:400], PARTITIONS)
        wait_until(lambda: all(tiered_end(stack, topic_id, p) > 0 for p in range(PARTITIONS)),
                   "some segments of every partition to be tiered", WAIT_S)

        stack_file = str(stack.directory / STACK_FILE)

        def start(trigger: dict[str, object]):  # noqa: ANN202 (a StreamingQuery)
            return (spark.readStream.format("floe")
                    .options(subscribe="events", stack=stack_file, startingOffsets="earliest").load()
                    .select("key", "value")
                    .writeStream.format("floe").options(topic="copy", stack=stack_file)
                    .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(**trigger).start())

        def copied() -> list[bytes]:
            return asyncio.run(read_committed_values(stack.bootstrap_servers, "copy"))

        query = start({"processingTime": "1 second"})
        try:
            wait_until(lambda: len(copied()) >= 400, "the first micro-batch's rows in the copy", WAIT_S)
            produce(stack, "events", values[400:600], PARTITIONS)  # written while the query runs: tail reads
            wait_until(lambda: len(copied()) >= 600, "the records produced while the query runs", WAIT_S)
            # Stop between micro-batches. A checkpoint that ends in a batch the sink committed and Spark
            # did not is test_exactly_once_sink's replay case; here, when a stop left one, the
            # AvailableNow restart replayed it and ended there, leaving newer records to the next run.
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None

        produce(stack, "events", values[600:], PARTITIONS)
        started = time.monotonic()
        restarted = start({"availableNow": True})
        restarted.awaitTermination(WAIT_S)
        assert time.monotonic() - started < WAIT_S, "the restarted query did not finish"
        assert restarted.exception() is None
        assert sorted(copied()) == sorted(values)
