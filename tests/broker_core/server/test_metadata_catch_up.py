"""A broker asked about a topic it has not heard of checks DynamoDB before saying the topic is unknown.

The broker here polls the metadata version only every ten minutes, so anything it knows about a
topic created after start-up it learned from the catch-up a request triggered.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
import types
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker_core.client import EARLIEST, BrokerConnection, FloeClient, KafkaError
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.messages import build_entity, request_class
from broker_core.records import SimpleRecord, iter_records
from broker_core.server.broker import Broker
from tests.support.stack import running_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("catch-up"), overrides={"metadata.poll.interval.ms": "600000"}) as running:
        yield running


def test_a_topic_created_behind_the_brokers_back_is_described_produced_to_and_read_at_once(stack: LocalStack) -> None:
    async def run() -> None:
        async with FloeClient(stack.bootstrap_servers, retries=0) as client:
            await client.refresh_metadata([])
            MetadataStore(stack.aws).create_topic("made-elsewhere", 2, 1)
            described = await client.describe_topic("made-elsewhere")
            assert described.num_partitions == 2
            assert all(p.leader >= 0 for p in described.partitions)
            configs = await client.describe_configs("made-elsewhere")
            assert "retention.ms" in configs
            result = await client.produce("made-elsewhere", [SimpleRecord(value=b"first")], partition=1)
            assert result.base_offset == 0
            assert await client.list_offsets("made-elsewhere", 1, EARLIEST) == (0, -1)
            fetched = await client.fetch("made-elsewhere", 1, 0)
            assert [r.value for r in fetched.records] == [b"first"]

    asyncio.run(run())


def test_a_topic_created_behind_the_brokers_back_is_listed_by_a_metadata_request_for_every_topic(
        stack: LocalStack) -> None:
    async def run() -> None:
        MetadataStore(stack.aws).create_topic("listed-at-once", 1, 1)
        connection = BrokerConnection(stack.host, stack.processes[1].port)
        await connection.connect()
        try:
            every_topic = build_entity(request_class(ApiKey.METADATA, 12), {
                "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
            listed = (await connection.send(ApiKey.METADATA, every_topic)).topics
        finally:
            await connection.close()
        (topic,) = [t for t in listed if t.name == "listed-at-once"]
        assert topic.error_code == ErrorCode.none
        assert [p.partition_index for p in topic.partitions] == [0]

    asyncio.run(run())


def test_a_topic_that_does_not_exist_is_still_unknown(stack: LocalStack) -> None:
    async def run() -> None:
        async with FloeClient(stack.bootstrap_servers, retries=0) as client:
            with pytest.raises(KafkaError) as raised:
                await client.describe_topic("never-created")
            assert raised.value.code == ErrorCode.unknown_topic_or_partition
            with pytest.raises(KafkaError) as raised:
                await client.produce("never-created", [SimpleRecord(value=b"x")], partition=0)
            assert raised.value.code == ErrorCode.unknown_topic_or_partition

    asyncio.run(run())


def test_a_caller_arriving_after_a_check_finished_but_before_its_cleanup_ran_waits_for_a_new_check() -> None:
    # The window between a check's completion and its done callback: the caller must not take the
    # finished check for a running one and loop on it without ever yielding to the event loop.
    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        polls: list[float] = []

        async def poll() -> None:
            polls.append(loop.time())

        broker = types.SimpleNamespace(_stopping=False, _checked_poll=poll)
        broker._start_catch_up = lambda: Broker._start_catch_up(broker)
        broker._catch_up_done = lambda check: Broker._catch_up_done(broker, check)
        finished = loop.create_future()
        finished.set_result(None)  # done, its cleanup callback not run yet
        broker._catch_up, broker._catch_up_started = finished, loop.time() - 1.0
        await Broker.catch_up_metadata(broker, min_interval_s=0.01)
        return len(polls)

    outcome: list[int] = []
    # In a thread: a caller spinning without yielding would block any timeout on its own loop.
    thread = threading.Thread(target=lambda: outcome.append(asyncio.run(scenario())), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "catch_up_metadata looped on a finished check without yielding"
    assert outcome == [1]  # one new check, started after the caller asked


def fetch_by_id(topic_id: uuid.UUID, offset: int) -> Any:
    """A consumer's Fetch v16 of partition 0 of the topic with this id (topics by id since v13)."""
    return build_entity(request_class(ApiKey.FETCH, 16), {
        "max_wait": datetime.timedelta(0), "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic_id": topic_id, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
    })


def test_a_fetch_by_topic_id_finds_a_topic_created_behind_the_brokers_back_and_refuses_an_unknown_id(
        stack: LocalStack) -> None:
    async def run() -> None:
        created = MetadataStore(stack.aws).create_topic("made-elsewhere-by-id", 1, 1)
        topic_id = uuid.UUID(created.topic_id)
        connection = BrokerConnection(stack.host, stack.processes[1].port)
        await connection.connect()
        try:
            # The broker has not heard of the topic: the id alone makes it catch up.
            (topic,) = (await connection.send(ApiKey.FETCH, fetch_by_id(topic_id, 0))).responses
            assert topic.topic_id == topic_id
            assert [(p.partition_index, p.error_code, p.high_watermark) for p in topic.partitions] == [
                (0, ErrorCode.none, 0)]
            async with FloeClient(stack.bootstrap_servers, retries=0) as client:
                await client.produce("made-elsewhere-by-id", [SimpleRecord(value=b"by id")], partition=0)
            (topic,) = (await connection.send(ApiKey.FETCH, fetch_by_id(topic_id, 0))).responses
            (partition,) = topic.partitions
            assert (partition.error_code, partition.high_watermark) == (ErrorCode.none, 1)
            assert [r.value for r in iter_records(bytes(partition.records))] == [b"by id"]
            (topic,) = (await connection.send(ApiKey.FETCH, fetch_by_id(uuid.uuid4(), 0))).responses
            assert [p.error_code for p in topic.partitions] == [ErrorCode.unknown_topic_id]
        finally:
            await connection.close()

    asyncio.run(run())
