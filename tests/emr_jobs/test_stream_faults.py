"""Faults and bad checkpoints with real Spark against a local stack: each gives Spark's Kafka behaviour.

- The leader of a partition is killed while a batch read fetches its tail: the executor's client
  moves to the new leader and the read returns every record once.
- A stream starting past the log's end (a checkpoint from a topic since recreated, here a
  startingOffsets beyond the high watermark) fails with a data-loss message naming the option that
  skips it; with failOnDataLoss=false it skips the lost range with a warning and reads what comes next.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from broker_core.client import FloeClient
from broker_core.local_stack import STACK_FILE
from tests.emr_jobs.test_stream_data_loss import stream_values
from tests.emr_jobs.test_tail_reads import create_tiered_topic, produce
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.faults]  # leader kills under Spark reads, about 45 s: in `make faults`, outside CI's 20-minute budget

WAIT_S = 180.0


def test_a_tail_read_survives_its_leader_being_killed(spark: SparkSession, tmp_path: Path) -> None:
    with running_stack(tmp_path / "stack", brokers=2) as stack:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        configs = {"min.insync.replicas": "1"}
        for future in admin.create_topics([NewTopic("moving", 1, 2, config=configs)]).values():
            future.result(timeout=30)
        producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all", "batch.num.messages": 50})
        for number in range(20_000):
            producer.produce("moving", key=str(number).encode(), value=b"%08d" % number + b"." * 200)
            if number % 1000 == 0:
                producer.poll(0)
        assert producer.flush(120) == 0

        async def leader() -> int:
            async with FloeClient(stack.bootstrap_servers) as client:
                return (await client.describe_topic("moving")).partitions[0].leader

        victim = asyncio.run(leader())
        # Kill the leader shortly after the read starts: the fetches (8 MiB each) are under way.
        killer = threading.Timer(2.0, stack.kill_broker, args=(victim,))
        killer.start()
        try:
            rows = (
                spark.read.format("floe")
                .options(topic="moving", stack=str(stack.directory / STACK_FILE))
                .load()
                .select("offset", "value")
                .collect()
            )
        finally:
            killer.join()
        # The kill happened (joined above); leadership moves once the controller notices it.
        wait_until(lambda: asyncio.run(leader()) != victim, "a new leader after the kill", timeout_s=60)
        assert sorted(row["offset"] for row in rows) == list(range(20_000))
        assert all(bytes(row["value"])[:8] == b"%08d" % row["offset"] for row in rows)


def test_a_stream_starting_past_the_log_end_fails_or_skips_as_failondataloss_says(
    spark: SparkSession, tmp_path: Path
) -> None:
    with running_stack(tmp_path / "stack") as stack:
        create_tiered_topic(stack, "lost", 1)
        produce(stack, "lost", [b"before"] * 50, 1)
        beyond = json.dumps({"lost": {"0": 10_000}})

        def run(checkpoint: Path, **options: str) -> list[bytes]:
            return stream_values(spark, stack, "lost", checkpoint, startingOffsets=beyond, **options)

        with pytest.raises(StreamingQueryException, match="failOnDataLoss=false"):
            run(tmp_path / "strict")
        assert run(tmp_path / "lenient", failOnDataLoss="false") == []
        produce(stack, "lost", [b"after"] * 5, 1)
        started = time.monotonic()
        assert run(tmp_path / "lenient", failOnDataLoss="false") == [b"after"] * 5
        assert time.monotonic() - started < WAIT_S
