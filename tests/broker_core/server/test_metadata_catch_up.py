"""A broker asked about a topic it has not heard of checks DynamoDB before saying the topic is unknown.

The broker here polls the metadata version only every ten minutes, so anything it knows about a
topic created after start-up it learned from the catch-up a request triggered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from broker_core.client import EARLIEST, FloeClient, KafkaError
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.records import SimpleRecord
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
