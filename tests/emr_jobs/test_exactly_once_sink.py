"""The floe stream sink is exactly-once: a replayed micro-batch is not written twice, a zombie's
transaction is fenced, and a read_committed consumer sees every source record once.

A query copies a topic into another with the floe sink and Trigger.AvailableNow. Then, as a driver
that stopped after its sink committed and before Spark's commit log recorded the batch would leave
it, the checkpoint's last commit entry is deleted: the restarted query replays that micro-batch
into the sink. A transaction is also left open under the id of one of the query's tasks (the
records a task of a killed run wrote and never committed). After more records and another restart,
a read_committed reader of the copy finds each source record exactly once and none of the zombie's.
"""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from broker_core.client import FloeClient
from broker_core.client.transactions import TransactionalProducer
from broker_core.local_stack import STACK_FILE, LocalStack
from broker_core.records import SimpleRecord
from tests.support.stack import running_stack

pytestmark = pytest.mark.faults  # three streaming queries, a restart each: minutes of Spark

PARTITIONS = 2


def produce(stack: LocalStack, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all"})
    for value in values:
        producer.produce(topic, key=value.encode(), value=value.encode())
    assert producer.flush(60) == 0


async def read_committed_values(bootstrap: str, topic: str) -> list[bytes]:
    """Every value of ``topic`` a read_committed consumer gets, read up to the high watermark (so
    waiting until no transaction is open on the partitions)."""
    values: list[bytes] = []
    async with FloeClient(bootstrap) as client:
        for partition in range(PARTITIONS):
            offset = 0
            while True:
                fetched = await client.fetch(topic, partition, offset, read_committed=True, max_wait_ms=100)
                values += [record.value for record in fetched.records]
                offset = fetched.next_offset
                if offset >= fetched.high_watermark:
                    break
    return values


async def leave_a_transaction_open(bootstrap: str, transactional_id: str) -> None:
    async with FloeClient(bootstrap) as client:
        zombie = TransactionalProducer(client, transactional_id)
        await zombie.init()
        await zombie.send("eos-copy", 0, [SimpleRecord(key=b"zombie", value=b"zombie")])


def test_a_restarted_stream_writes_each_record_once_for_read_committed_readers(
    spark: SparkSession, tmp_path: Path
) -> None:
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
    with running_stack(tmp_path / "stack", overrides=overrides) as stack:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in ("eos-source", "eos-copy")]).values():
            future.result(timeout=30)
        stack_file = str(stack.directory / STACK_FILE)
        checkpoint = tmp_path / "checkpoint"

        def run() -> str:
            query = (
                spark.readStream.format("floe").options(subscribe="eos-source", stack=stack_file,
                                                        startingOffsets="earliest")
                .load().select("key", "value")
                .writeStream.format("floe").options(topic="eos-copy", stack=stack_file)
                .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
            )
            query.awaitTermination(180)
            assert query.exception() is None, query.exception()
            return query.id

        first = [f"first-{n}" for n in range(300)]
        produce(stack, "eos-source", first)
        query_id = run()
        commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda path: int(path.name))
        last = commits[-1]
        last.unlink()  # the driver "died" after the sink's commit, before Spark's commit log
        (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
        assert run() == query_id  # replays the last micro-batch
        assert (checkpoint / "commits" / last.name).exists()

        asyncio.run(leave_a_transaction_open(stack.bootstrap_servers, f"floe-spark-{query_id}-0"))
        second = [f"second-{n}" for n in range(200)]
        produce(stack, "eos-source", second)
        run()

        seen = collections.Counter(asyncio.run(read_committed_values(stack.bootstrap_servers, "eos-copy")))
        assert seen == collections.Counter(value.encode() for value in first + second)
