"""Floe's client against a real local stack: topics, produce and fetch in every codec, offsets, errors."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import pytest
from kio.schema.errors import ErrorCode

from broker_core.client import (
    CLIENT_MAX_VERSIONS,
    EARLIEST,
    LATEST,
    BrokerConnection,
    BrokerConnectionError,
    FloeClient,
    KafkaError,
    NoBrokersError,
    RequestTimeoutError,
    TopicInfo,
)
from broker_core.local_stack import LocalStack
from broker_core.protocol.api_keys import ApiKey
from broker_core.records import Compression, SimpleRecord, build_batch, iter_records
from broker_core.records.header import HEADER_SIZE
from tests.support.stack import running_stack
from tests.support.waiting import wait_until_async

T = TypeVar("T")
_topic_numbers = itertools.count()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("client-stack")) as running:
        yield running


def with_client(stack: LocalStack, body: Callable[[FloeClient], Awaitable[T]], **options: object) -> T:
    async def run() -> T:
        async with FloeClient(stack.bootstrap_servers, **options) as client:
            return await body(client)

    return asyncio.run(run())


def new_topic_name(purpose: str) -> str:
    return f"client-{purpose}-{next(_topic_numbers)}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_a_created_topic_is_listed_described_and_gone_after_delete(stack: LocalStack) -> None:
    name = new_topic_name("admin")

    async def body(client: FloeClient) -> None:
        created = await client.create_topic(name, partitions=3, configs={"retention.ms": "3600000"})
        assert isinstance(created, TopicInfo) and created.topic_id is not None
        assert name in await client.list_topics()
        described = await client.describe_topic(name)
        assert described.topic_id == created.topic_id
        assert [p.partition for p in described.partitions] == [0, 1, 2]
        for partition in described.partitions:
            assert partition.leader == 1
            assert partition.replicas == (1,)
            assert partition.isr == (1,)
            assert partition.leader_epoch >= 0
        configs = await client.describe_configs(name)
        assert configs["retention.ms"] == "3600000"
        assert "cleanup.policy" in configs
        await client.delete_topic(name)
        assert name not in await client.list_topics()
        with pytest.raises(KafkaError) as missing:
            await client.describe_topic(name)
        assert missing.value.code == ErrorCode.unknown_topic_or_partition

    with_client(stack, body)


def test_creating_a_topic_twice_fails_with_topic_already_exists(stack: LocalStack) -> None:
    name = new_topic_name("twice")

    async def body(client: FloeClient) -> None:
        await client.create_topic(name)
        with pytest.raises(KafkaError) as twice:
            await client.create_topic(name)
        assert twice.value.code == ErrorCode.topic_already_exists

    with_client(stack, body)


def test_deleting_an_unknown_topic_fails_with_unknown_topic_or_partition(stack: LocalStack) -> None:
    async def body(client: FloeClient) -> None:
        with pytest.raises(KafkaError) as missing:
            await client.delete_topic(new_topic_name("never-created"))
        assert missing.value.code == ErrorCode.unknown_topic_or_partition

    with_client(stack, body)


def sample_records(start_ms: int, count: int, tag: bytes) -> list[SimpleRecord]:
    records = []
    for i in range(count):
        key = None if i % 5 == 4 else tag + b"-key-%d" % i
        value = b"" if i % 7 == 6 else tag + b"-value-%d-" % i + bytes(range(256)) * (i % 3)
        headers = [("trace", b"t%d" % i), ("empty", b""), ("null", None)] if i % 2 == 0 else []
        records.append(SimpleRecord(key=key, value=value, headers=headers, timestamp=start_ms + i))
    return records


@pytest.mark.parametrize("codec", list(Compression), ids=[c.name.lower() for c in Compression])
def test_records_with_keys_and_headers_come_back_identical_in_every_codec(stack: LocalStack,
                                                                          codec: Compression) -> None:
    name = new_topic_name(f"codec-{codec.name.lower()}")
    start = now_ms()
    first, second = sample_records(start, 20, b"a"), sample_records(start + 100, 13, b"b")

    async def body(client: FloeClient) -> None:
        await client.create_topic(name)
        one = await client.produce(name, first, 0, compression=codec)
        two = await client.produce(name, second, 0, compression=codec)
        assert (one.base_offset, one.last_offset) == (0, 19)
        assert (two.base_offset, two.last_offset) == (20, 32)
        fetched = await client.fetch(name, 0, 0)
        assert fetched.high_watermark == 33
        assert fetched.next_offset == 33
        assert [r.offset for r in fetched.records] == list(range(33))
        sent = first + second
        assert [(r.key, r.value, tuple(r.headers), r.timestamp) for r in fetched.records] == [
            (s.key, s.value, tuple(s.headers), s.timestamp) for s in sent
        ]
        later = await client.fetch(name, 0, 25)
        assert [r.offset for r in later.records] == list(range(25, 33))

    with_client(stack, body)


def test_fetch_raw_returns_the_batches_undecoded(stack: LocalStack) -> None:
    name = new_topic_name("raw")
    records = sample_records(now_ms(), 10, b"raw")

    async def body(client: FloeClient) -> None:
        await client.create_topic(name)
        await client.produce(name, records, 0, compression=Compression.LZ4)
        raw = await client.fetch_raw(name, 0, 0)
        assert raw.next_offset == 10
        assert raw.high_watermark == 10
        decoded = list(iter_records(raw.records))
        assert [(r.key, r.value) for r in decoded] == [(s.key, s.value) for s in records]
        decoded_result = await client.fetch(name, 0, 0)
        assert decoded_result.raw_bytes_len == len(raw.records)

    with_client(stack, body)


def test_produce_many_writes_one_batch_to_each_partition(stack: LocalStack) -> None:
    name = new_topic_name("many")

    async def body(client: FloeClient) -> None:
        await client.create_topic(name, partitions=3)
        batches = {p: [SimpleRecord(key=b"p%d" % p, value=b"v%d-%d" % (p, i)) for i in range(p + 1)] for p in range(3)}
        results = await client.produce_many(name, batches)
        assert {p: (r.base_offset, r.last_offset) for p, r in results.items()} == {0: (0, 0), 1: (0, 1), 2: (0, 2)}
        for partition, sent in batches.items():
            fetched = await client.fetch(name, partition, 0)
            assert [r.value for r in fetched.records] == [s.value for s in sent]

    with_client(stack, body)


def test_list_offsets_finds_earliest_latest_and_the_first_offset_at_a_timestamp(stack: LocalStack) -> None:
    name = new_topic_name("offsets")
    start = now_ms() - 10_000

    async def body(client: FloeClient) -> None:
        await client.create_topic(name)
        assert await client.list_offsets(name, 0, EARLIEST) == (0, -1)
        assert (await client.list_offsets(name, 0, LATEST))[0] == 0
        for second in range(3):
            await client.produce(name, [SimpleRecord(value=b"%d" % i, timestamp=start + second * 1000 + i)
                                        for i in range(4)], 0)
        assert (await client.list_offsets(name, 0, EARLIEST))[0] == 0
        assert (await client.list_offsets(name, 0, LATEST))[0] == 12
        assert await client.list_offsets(name, 0, start + 1000) == (4, start + 1000)
        assert await client.list_offsets(name, 0, start + 1500) == (8, start + 2000)
        assert await client.list_offsets(name, 0, start + 2002) == (10, start + 2002)
        assert await client.list_offsets(name, 0, start + 5000) == (-1, -1)

    with_client(stack, body)


def test_an_unknown_topic_is_reported_as_unknown_topic_or_partition(stack: LocalStack) -> None:
    name = new_topic_name("unknown")

    async def body(client: FloeClient) -> None:
        for attempt in (
            client.produce(name, [SimpleRecord(value=b"x")], 0),
            client.fetch(name, 0, 0),
            client.list_offsets(name, 0, LATEST),
            client.describe_topic(name),
        ):
            with pytest.raises(KafkaError) as unknown:
                await attempt
            assert unknown.value.code == ErrorCode.unknown_topic_or_partition

    with_client(stack, body, retries=1)


def test_a_partition_beyond_the_topic_is_reported_as_unknown_topic_or_partition(stack: LocalStack) -> None:
    name = new_topic_name("partition")

    async def body(client: FloeClient) -> None:
        await client.create_topic(name, partitions=2)
        with pytest.raises(KafkaError) as unknown:
            await client.produce(name, [SimpleRecord(value=b"x")], 2)
        assert unknown.value.code == ErrorCode.unknown_topic_or_partition

    with_client(stack, body, retries=1)


def test_a_batch_above_max_message_bytes_is_refused_and_nothing_is_written(stack: LocalStack) -> None:
    name = new_topic_name("too-large")

    async def body(client: FloeClient) -> None:
        await client.create_topic(name, configs={"max.message.bytes": "1024"})
        await client.produce(name, [SimpleRecord(value=b"small")], 0)
        with pytest.raises(KafkaError) as too_large:
            await client.produce(name, [SimpleRecord(value=b"x" * 4096)], 0)
        assert too_large.value.code == ErrorCode.message_too_large
        assert (await client.list_offsets(name, 0, LATEST))[0] == 1
        assert [r.value for r in (await client.fetch(name, 0, 0)).records] == [b"small"]

    with_client(stack, body)


def test_a_batch_with_a_flipped_byte_is_refused_as_corrupt_and_nothing_is_written(stack: LocalStack) -> None:
    name = new_topic_name("corrupt")

    async def body(client: FloeClient) -> None:
        await client.create_topic(name)
        await client.produce(name, [SimpleRecord(value=b"good")], 0)
        batch = bytearray(build_batch([SimpleRecord(key=b"k", value=b"a value under the crc")]))
        batch[HEADER_SIZE + 5] ^= 0x01  # a byte of the first record, covered by the CRC
        with pytest.raises(KafkaError) as corrupt:
            await client.produce(name, bytes(batch), 0)
        assert corrupt.value.code == ErrorCode.corrupt_message
        assert (await client.list_offsets(name, 0, LATEST))[0] == 1
        assert [r.value for r in (await client.fetch(name, 0, 0)).records] == [b"good"]

    with_client(stack, body)


def test_acks_zero_produces_get_no_offsets_but_are_appended(stack: LocalStack) -> None:
    name = new_topic_name("acks0")

    async def body(client: FloeClient) -> None:
        await client.create_topic(name)
        results = [await client.produce(name, [SimpleRecord(value=b"fire-%d" % i)], 0, acks=0) for i in range(3)]
        assert [r.base_offset for r in results] == [-1, -1, -1]
        # The broker acknowledges nothing, so wait (bounded) for the appends to show in the log.
        async def appended() -> bool:
            return (await client.list_offsets(name, 0, LATEST))[0] >= 3

        await wait_until_async(appended, "the three acks=0 appends in the log", 20, interval_s=0.05)
        fetched = await client.fetch(name, 0, 0)
        assert [r.value for r in fetched.records] == [b"fire-0", b"fire-1", b"fire-2"]
        acked = await client.produce(name, [SimpleRecord(value=b"acked")], 0, acks=1)
        assert acked.base_offset == 3

    with_client(stack, body)


def test_a_long_poll_fetch_returns_records_produced_while_it_waits(stack: LocalStack) -> None:
    name = new_topic_name("long-poll")

    async def body(client: FloeClient) -> None:
        await client.create_topic(name)

        async def produce_later() -> None:
            await asyncio.sleep(0.3)
            await client.produce(name, [SimpleRecord(value=b"arrived")], 0)

        fetched, _ = await asyncio.gather(client.fetch(name, 0, 0, max_wait_ms=5000), produce_later())
        assert [(r.offset, r.value) for r in fetched.records] == [(0, b"arrived")]

    with_client(stack, body)


def test_fetch_past_the_log_end_fails_with_offset_out_of_range(stack: LocalStack) -> None:
    name = new_topic_name("out-of-range")

    async def body(client: FloeClient) -> None:
        await client.create_topic(name)
        await client.produce(name, [SimpleRecord(value=b"only")], 0)
        with pytest.raises(KafkaError) as out_of_range:
            await client.fetch(name, 0, 50)
        assert out_of_range.value.code == ErrorCode.offset_out_of_range
        at_end = await client.fetch(name, 0, 1, max_wait_ms=100)
        assert at_end.records == [] and at_end.next_offset == 1

    with_client(stack, body)


def test_one_connection_negotiates_versions_and_pipelines_concurrent_produces(stack: LocalStack) -> None:
    name = new_topic_name("pipeline")
    host, port = stack.bootstrap_servers.split(",")[0].rsplit(":", 1)

    async def body(client: FloeClient) -> None:
        await client.create_topic(name)
        connection = BrokerConnection(host, int(port))
        await connection.connect()
        try:
            for api_key, ours in CLIENT_MAX_VERSIONS.items():
                assert connection.versions[api_key] == min(ours, connection.broker_versions[api_key][1])

            def request(i: int) -> dict:
                batch = build_batch([SimpleRecord(value=b"%d-%d" % (i, j)) for j in range(3)])
                return {"transactional_id": None, "acks": -1, "timeout": datetime.timedelta(seconds=10),
                        "topic_data": [{"name": name, "partition_data": [{"index": 0, "records": batch}]}]}

            responses = await asyncio.gather(*(connection.send(ApiKey.PRODUCE, request(i)) for i in range(64)))
        finally:
            await connection.close()
        partitions = [r.responses[0].partition_responses[0] for r in responses]
        assert all(p.error_code == ErrorCode.none for p in partitions)
        assert sorted(p.base_offset for p in partitions) == list(range(0, 64 * 3, 3))
        fetched = await client.fetch(name, 0, 0)
        assert [r.offset for r in fetched.records] == list(range(64 * 3))
        by_offset = {p.base_offset: i for i, p in enumerate(partitions)}
        for record in fetched.records:
            request_number = by_offset[record.offset - record.offset % 3]
            assert record.value == b"%d-%d" % (request_number, record.offset % 3)

    with_client(stack, body)


def test_concurrent_client_produces_all_succeed_with_contiguous_offsets(stack: LocalStack) -> None:
    name = new_topic_name("concurrent")

    async def body(client: FloeClient) -> None:
        await client.create_topic(name)
        results = await asyncio.gather(*(
            client.produce(name, [SimpleRecord(value=b"%d" % i), SimpleRecord(value=b"%d" % i)], 0)
            for i in range(40)
        ))
        assert sorted(r.base_offset for r in results) == list(range(0, 80, 2))
        assert all(r.last_offset == r.base_offset + 1 for r in results)

    with_client(stack, body)


def test_fetch_many_reads_every_partition_from_its_own_offset(stack: LocalStack) -> None:
    name = new_topic_name("fetch-many")

    async def body(client: FloeClient) -> None:
        await client.create_topic(name, partitions=3)
        await client.produce_many(name, {p: [SimpleRecord(value=b"%d-%d" % (p, i)) for i in range(4)] for p in range(3)})
        results = await client.fetch_many(name, {0: 0, 1: 2, 2: 4}, max_wait_ms=100)
        assert {p: [r.value for r in result.records] for p, result in results.items()} == {
            0: [b"0-0", b"0-1", b"0-2", b"0-3"], 1: [b"1-2", b"1-3"], 2: []}
        assert {p: result.next_offset for p, result in results.items()} == {0: 4, 1: 4, 2: 4}

    with_client(stack, body)


def test_a_broker_that_hangs_up_during_negotiation_is_a_connection_error() -> None:
    async def scenario() -> None:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(4)
            writer.close()

        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            connection = BrokerConnection("127.0.0.1", port)
            with pytest.raises(BrokerConnectionError) as lost:
                await connection.connect()
            assert lost.value.request_sent
            assert not connection.connected
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_a_broker_that_never_answers_times_out_and_the_connection_is_closed() -> None:
    async def scenario() -> None:
        async def stay_silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()
            writer.close()

        server = await asyncio.start_server(stay_silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            connection = BrokerConnection("127.0.0.1", port, request_timeout_s=0.2)
            with pytest.raises(RequestTimeoutError):
                await connection.connect()
            assert not connection.connected
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_no_reachable_bootstrap_server_is_reported_as_no_brokers() -> None:
    async def scenario() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(NoBrokersError):
            async with FloeClient(f"127.0.0.1:{port}"):
                pass

    asyncio.run(scenario())
