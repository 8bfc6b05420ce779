"""A partition's leadership moves (a preferred-leader election, no broker killed) while a stream reads it.

Two brokers, one partition replicated on both. Leadership is first moved off the preferred replica
(its broker restarts and rejoins the ISR); then, while a stream with a short processing-time
trigger reads the partition and records are produced, a preferred election moves leadership back.
The old leader stays up and answers NOT_LEADER_OR_FOLLOWER; the driver's ListOffsets and the
executors' fetches move to the new leader, and the stream gets every record exactly once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from broker_core.client import FloeClient
from broker_core.local_stack import STACK_FILE, LocalStack
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

pytestmark = pytest.mark.faults

TOPIC = "moving-stream"
RECORDS = 3000


def partition_state(stack: LocalStack) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(leader, replicas, isr) of the topic's partition."""

    async def ask() -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        async with FloeClient(stack.bootstrap_servers) as client:
            await client.refresh_metadata([TOPIC])
            partition = (await client.describe_topic(TOPIC)).partitions[0]
            return partition.leader, partition.replicas, partition.isr

    return asyncio.run(ask())


def test_a_stream_reads_every_record_once_across_a_leader_move(spark: SparkSession, tmp_path: Path) -> None:
    with running_stack(tmp_path / "stack", brokers=2) as stack:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        for future in admin.create_topics([NewTopic(TOPIC, 1, 2, config={"min.insync.replicas": "1"})]).values():
            future.result(timeout=30)
        wait_until(lambda: len(partition_state(stack)[2]) == 2, "both replicas in the ISR", 60)
        preferred = partition_state(stack)[1][0]
        if partition_state(stack)[0] == preferred:  # move leadership off the preferred replica first
            stack.kill_broker(preferred)
            wait_until(lambda: partition_state(stack)[0] not in (preferred, -1), "the other replica leading", 60)
            stack.restart_broker(preferred)
            wait_until(lambda: len(partition_state(stack)[2]) == 2, "the restarted replica back in the ISR", 60)
        assert partition_state(stack)[0] != preferred

        values = [f"moving-{n:05d}".encode() for n in range(RECORDS)]
        rows: list[bytes] = []
        lock = threading.Lock()

        def collect(frame, _batch_id: int) -> None:  # noqa: ANN001 (a DataFrame)
            batch = [bytes(r["value"]) for r in frame.collect()]
            with lock:
                rows.extend(batch)

        query = (
            spark.readStream.format("floe")
            .options(subscribe=TOPIC, stack=str(stack.directory / STACK_FILE), startingOffsets="earliest")
            .load().writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="500 milliseconds").start()
        )
        try:
            producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all"})
            for number, value in enumerate(values):
                producer.produce(TOPIC, value=value)
                if number == RECORDS // 2:
                    assert producer.flush(60) == 0
                    wait_until(lambda: len(rows) > 0, "the stream's first rows", 120)

                    async def elect() -> None:
                        async with FloeClient(stack.bootstrap_servers) as client:
                            await client.elect_leaders([(TOPIC, 0)])

                    asyncio.run(elect())
                    wait_until(lambda: partition_state(stack)[0] == preferred, "the preferred replica leading", 60)
                producer.poll(0)
            assert producer.flush(60) == 0
            deadline = time.monotonic() + 180
            while len(rows) < RECORDS and time.monotonic() < deadline and query.exception() is None:
                time.sleep(0.2)
        finally:
            query.stop()
        assert query.exception() is None
        assert sorted(rows) == values
