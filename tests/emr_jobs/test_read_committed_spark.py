"""isolationLevel=read_committed in Spark batch reads and streams, tiered data and tail together.

A transactional producer (confluent-kafka) commits and aborts transactions on a tiered topic, with
plain records in between, until segments are on S3; then it leaves one transaction open and plain
records follow it. A read_committed batch read and a read_committed stream (Trigger.AvailableNow)
return exactly the committed and plain records before the open transaction: aborted ones are left
out on both paths, and the reads stop at the last stable offset. read_uncommitted returns everything.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from broker_core.local_stack import STACK_FILE
from tests.emr_jobs.test_tail_reads import create_tiered_topic, tiered_end
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

pytestmark = pytest.mark.faults  # tiering, a batch read each way and a stream: minutes of Spark

TOPIC = "isolated"


def values_of(frame) -> list[bytes]:  # noqa: ANN001 (a DataFrame)
    return sorted(bytes(row["value"]) for row in frame.select("value").collect())


def test_read_committed_reads_leave_out_aborted_and_open_transactions(spark: SparkSession, tmp_path: Path) -> None:
    overrides = {"remote.log.manager.task.interval.ms": "200"}
    with running_stack(tmp_path / "stack", overrides=overrides) as stack:
        topic_id = create_tiered_topic(stack, TOPIC, 1)
        plain = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all"})
        # The open transaction must outlive the Spark reads (the brokers' maximum: 15 minutes).
        producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "transactional.id": "isolated-writer",
                             "transaction.timeout.ms": 900_000})
        producer.init_transactions(30)
        visible: list[bytes] = []
        written: list[bytes] = []
        for number in range(16):
            producer.begin_transaction()
            values = [f"txn-{number}-{n}-".encode() * 6 for n in range(20)]
            for value in values:
                producer.produce(TOPIC, value=value, partition=0)
            assert producer.flush(30) == 0  # in the log before the end (an abort purges unsent records)
            written += values
            if number % 2:
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
                visible += values
            plain.produce(TOPIC, value=f"plain-{number}".encode(), partition=0)
            assert plain.flush(30) == 0
            written.append(f"plain-{number}".encode())
            visible.append(f"plain-{number}".encode())
        wait_until(lambda: tiered_end(stack, topic_id, 0) > 0, "a tiered segment", 120)

        producer.begin_transaction()
        for n in range(5):
            producer.produce(TOPIC, value=f"open-{n}".encode(), partition=0)
        assert producer.flush(30) == 0
        plain.produce(TOPIC, value=b"after-open", partition=0)
        assert plain.flush(30) == 0
        written += [f"open-{n}".encode() for n in range(5)] + [b"after-open"]

        stack_file = str(stack.directory / STACK_FILE)
        try:
            committed = spark.read.format("floe").options(topic=TOPIC, stack=stack_file,
                                                          isolationLevel="read_committed").load()
            assert values_of(committed) == sorted(visible)
            assert values_of(spark.read.format("floe").options(topic=TOPIC, stack=stack_file).load()) == sorted(written)

            query = (
                spark.readStream.format("floe")
                .options(subscribe=TOPIC, stack=stack_file, startingOffsets="earliest", isolationLevel="read_committed")
                .load().writeStream.format("memory").queryName("isolated_stream")
                .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
            )
            query.awaitTermination(180)
            assert query.exception() is None
            assert values_of(spark.table("isolated_stream")) == sorted(visible)
        finally:
            producer.abort_transaction(30)
