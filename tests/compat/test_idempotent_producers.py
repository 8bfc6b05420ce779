"""aiokafka and kafka-python with idempotence on: InitProducerId, sequenced batches, nothing doubled.

(confluent-kafka's idempotent producer is exercised under faults in tests/faults/.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from kafka import KafkaProducer

from broker_core.client import FloeClient
from tests.support.stack import running_stack

RECORDS = 600


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    with running_stack(Path(tmp_path_factory.mktemp("idempotent"))) as stack:
        yield stack


async def create_and_read(bootstrap: str, topic: str, produce) -> list[tuple[int, bytes]]:
    async with FloeClient(bootstrap) as client:
        await client.create_topic(topic, partitions=1)
    await produce()
    async with FloeClient(bootstrap) as client:
        records, offset = [], 0
        while len(records) < RECORDS:
            result = await client.fetch(topic, 0, offset, max_wait_ms=200)
            records += [(r.offset, r.value) for r in result.records if r.offset >= offset]
            if result.next_offset == offset:
                break
            offset = result.next_offset
        return records


def assert_each_value_once_in_order(records: list[tuple[int, bytes]]) -> None:
    assert [offset for offset, _ in records] == list(range(RECORDS))
    assert [value for _, value in records] == [f"v{i}".encode() for i in range(RECORDS)]


def test_aiokafka_idempotent_producer_writes_every_record_once(stack) -> None:
    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=stack.bootstrap_servers, enable_idempotence=True, acks="all")
        await producer.start()
        try:
            await asyncio.gather(*[await producer.send("aio-idem", f"v{i}".encode(), partition=0)
                                   for i in range(RECORDS)])
        finally:
            await producer.stop()

    assert_each_value_once_in_order(asyncio.run(create_and_read(stack.bootstrap_servers, "aio-idem", produce)))


def test_kafka_python_idempotent_producer_writes_every_record_once(stack) -> None:
    async def produce() -> None:
        def send_all() -> None:
            producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, enable_idempotence=True, acks="all")
            futures = [producer.send("kp-idem", f"v{i}".encode(), partition=0) for i in range(RECORDS)]
            producer.flush(timeout=30)
            assert all(f.succeeded() for f in futures)
            producer.close()

        await asyncio.to_thread(send_all)

    assert_each_value_once_in_order(asyncio.run(create_and_read(stack.bootstrap_servers, "kp-idem", produce)))
