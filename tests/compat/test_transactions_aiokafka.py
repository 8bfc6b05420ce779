"""aiokafka's transactional producer and read_committed consumer against Floe brokers.

Committed and aborted transactions over several partitions, with the group's offsets committed in
the transaction: a read_committed consumer reads the committed records only, and the group's
offsets are those of the committed transaction.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from tests.support.stack import running_stack

# Runs in `make faults`, not in `make test`: a second client's pass over the transaction matrix that test_transactions_confluent.py runs in the default suite; the default suite must stay under CI's 20-minute budget.
pytestmark = pytest.mark.faults

PARTITIONS = 3


@pytest.fixture(scope="module")
def aiokafka_txn_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    overrides = {"floe.transaction.marker.retry.backoff.ms": "100"}
    with running_stack(tmp_path_factory.mktemp("aiokafka-txn"), brokers=2, overrides=overrides) as stack:
        yield stack


async def _read_committed(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        values: list[bytes] = []
        async with asyncio.timeout(30):
            while True:
                batches = await consumer.getmany(timeout_ms=500)
                values += [m.value for messages in batches.values() for m in messages]
                ends = await consumer.end_offsets(partitions)  # the LSO under read_committed
                positions = [await consumer.position(tp) for tp in partitions]
                if len(values) >= expected and positions == [ends[tp] for tp in partitions]:
                    return values
    finally:
        await consumer.stop()


def test_aiokafka_transactions_commit_and_abort(aiokafka_txn_stack: LocalStack) -> None:
    topic = f"aiotxn-{uuid.uuid4().hex[:8]}"
    MetadataStore(aiokafka_txn_stack.aws).create_topic(topic, PARTITIONS, 1, {})
    bootstrap = aiokafka_txn_stack.bootstrap_servers
    group = f"aiogroup-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[list[bytes], list[bytes], int]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:8]}")
        await producer.start()
        committed: list[bytes] = []
        try:
            for round_ in range(4):
                values = [f"aio-{round_}-{i}".encode() for i in range(12)]
                commit = round_ % 2 == 0
                async with producer.transaction() if commit else _aborting(producer):
                    for i, value in enumerate(values):
                        await producer.send(topic, value, partition=i % PARTITIONS)
                    await producer.send_offsets_to_transaction({TopicPartition(topic, 0): round_ + 1}, group)
                if commit:
                    committed += values
        finally:
            await producer.stop()
        read = await _read_committed(bootstrap, topic, len(committed))
        checker = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
        await checker.start()
        try:
            offset = await checker.committed(TopicPartition(topic, 0))
        finally:
            await checker.stop()
        return read, committed, offset

    read, committed, offset = asyncio.run(scenario())
    assert sorted(read) == sorted(committed)
    assert offset == 3  # round 2's offsets; round 3 aborted


class _aborting:  # noqa: N801 - used like producer.transaction()
    """A transaction that is aborted at the end of its block."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def __aenter__(self) -> None:
        await self.producer.begin_transaction()

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.abort_transaction()
