"""aiokafka consumer groups against a Floe broker: join, share partitions, commit, resume, reset policies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import NoOffsetForPartitionError

from broker_core.metadata.store import MetadataStore
from tests.support.stack import running_stack
from tests.support.waiting import wait_until_async

PARTITIONS = 4
GROUP_SETTINGS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500, "enable_auto_commit": False,
                  "max_poll_interval_ms": 30000, "metadata_max_age_ms": 1000}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with running_stack(tmp_path_factory.mktemp("aiokafka-groups"), brokers=1,
                       overrides={"group.initial.rebalance.delay.ms": "0"}) as running:
        yield running


async def create_topic(stack: Any, name: str, partitions: int = PARTITIONS) -> str:
    await asyncio.to_thread(MetadataStore(stack.aws).create_topic, name, partitions, 1)
    producer = AIOKafkaProducer(bootstrap_servers=stack.bootstrap_servers)
    await producer.start()
    try:
        async def visible() -> bool:
            return (await producer.partitions_for(name)) == set(range(partitions))

        await wait_until_async(visible, f"topic {name} visible", 20, interval_s=0.2)
    finally:
        await producer.stop()
    return name


async def produce(stack: Any, topic: str, values: list[bytes], partitions: int = PARTITIONS) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=stack.bootstrap_servers)
    await producer.start()
    try:
        for i, value in enumerate(values):
            await producer.send_and_wait(topic, value=value, partition=i % partitions)
    finally:
        await producer.stop()


async def drain(consumer: AIOKafkaConsumer, count: int, timeout_s: float = 30) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < count and time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=200)).values():
            values += [r.value for r in records]
    return values


def consumer_of(stack: Any, topic: str, group: str, **overrides: Any) -> AIOKafkaConsumer:
    settings = {"auto_offset_reset": "earliest", **GROUP_SETTINGS, **overrides}
    return AIOKafkaConsumer(topic, bootstrap_servers=stack.bootstrap_servers, group_id=group, **settings)


def test_members_share_partitions_and_a_new_member_resumes_from_the_commits(stack) -> None:
    async def scenario() -> None:
        topic = await create_topic(stack, "aio-share")
        await produce(stack, topic, [f"first-{i}".encode() for i in range(20)])
        one = consumer_of(stack, topic, "aio-share-group")
        await one.start()
        assert sorted(await drain(one, 20)) == sorted(f"first-{i}".encode() for i in range(20))
        await one.commit()

        two = consumer_of(stack, topic, "aio-share-group")
        await two.start()
        deadline = time.monotonic() + 30
        while not (one.assignment() and two.assignment() and len(one.assignment() | two.assignment()) == PARTITIONS):
            assert time.monotonic() < deadline, "the second member never got partitions"
            await asyncio.gather(one.getmany(timeout_ms=100), two.getmany(timeout_ms=100))
        assert not one.assignment() & two.assignment()
        await one.stop()
        await two.stop()

        await produce(stack, topic, [f"second-{i}".encode() for i in range(8)])
        three = consumer_of(stack, topic, "aio-share-group")
        await three.start()
        assert sorted(await drain(three, 8)) == sorted(f"second-{i}".encode() for i in range(8))
        await three.commit()
        assert {tp.partition: await three.committed(tp) for tp in three.assignment()} == {
            p: 7 for p in range(PARTITIONS)}
        await three.stop()

    asyncio.run(scenario())


def test_auto_offset_reset_none_raises_for_a_group_without_offsets(stack) -> None:
    async def scenario() -> None:
        topic = await create_topic(stack, "aio-none", partitions=1)
        await produce(stack, topic, [b"x"], partitions=1)
        consumer = consumer_of(stack, topic, "aio-none-group", auto_offset_reset="none")
        await consumer.start()
        try:
            with pytest.raises(NoOffsetForPartitionError):
                await asyncio.wait_for(consumer.getone(), timeout=30)
        finally:
            await consumer.stop()

    asyncio.run(scenario())


def test_auto_offset_reset_latest_skips_what_was_there_before(stack) -> None:
    async def scenario() -> None:
        topic = await create_topic(stack, "aio-latest", partitions=1)
        await produce(stack, topic, [b"old"], partitions=1)
        consumer = consumer_of(stack, topic, "aio-latest-group", auto_offset_reset="latest")
        await consumer.start()
        try:
            deadline = time.monotonic() + 30
            while not consumer.assignment():
                assert time.monotonic() < deadline
                assert await consumer.getmany(timeout_ms=100) == {}
            assert await consumer.position(next(iter(consumer.assignment()))) == 1
            await produce(stack, topic, [b"new"], partitions=1)
            assert await drain(consumer, 1) == [b"new"]
        finally:
            await consumer.stop()

    asyncio.run(scenario())
