"""aiokafka against a Floe broker: admin and metadata, every codec, reading back, offsets by time, errors.

Each test runs its coroutine with asyncio.run, so clients never outlive the event loop that made
them. Records are read with assign(), without a consumer group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import MessageSizeTooLargeError, UnknownTopicOrPartitionError

TOPIC = "aiokafka-records"
TOPIC_PARTITIONS = 3
# Small segments, so reading back from earliest crosses several of them.
TOPIC_CONFIGS = {"segment.bytes": "4096", "retention.ms": "86400000"}
SMALL_TOPIC = "aiokafka-small-messages"
SMALL_MAX_MESSAGE_BYTES = 1024
UNKNOWN_TOPIC = "aiokafka-no-such-topic"
CODEC_SETTING = {"none": None, "gzip": "gzip", "snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}
CONFIG_SOURCE_TOPIC = 1


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 120))


async def with_admin(compat_stack: Any, action: Any) -> Any:
    admin = AIOKafkaAdminClient(bootstrap_servers=compat_stack.bootstrap_servers, client_id="compat-admin")
    await admin.start()
    try:
        return await action(admin)
    finally:
        await admin.close()


async def started_consumer(compat_stack: Any) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(bootstrap_servers=compat_stack.bootstrap_servers, enable_auto_commit=False,
                                client_id="compat-consumer")
    await consumer.start()
    return consumer


@pytest.fixture(scope="module")
def create_errors(compat_stack: Any) -> list[tuple[str, int]]:
    """(topic, error code) for each topic of one CreateTopics call."""
    response = run(with_admin(compat_stack, lambda admin: admin.create_topics([
        NewTopic(TOPIC, TOPIC_PARTITIONS, 1, topic_configs=TOPIC_CONFIGS),
        NewTopic(SMALL_TOPIC, 1, 1, topic_configs={"max.message.bytes": str(SMALL_MAX_MESSAGE_BYTES)}),
    ])))
    return [(topic, code) for topic, code, *_ in response.topic_errors]


@pytest.fixture(scope="module")
def sent_offsets(compat_stack: Any, create_errors: list, records_by_codec: dict) -> list[int]:
    """Produce every codec's records to partition 0, one producer per codec; the offsets acknowledged."""

    async def produce() -> list[int]:
        offsets = []
        for codec, records in records_by_codec.items():
            producer = AIOKafkaProducer(bootstrap_servers=compat_stack.bootstrap_servers,
                                        compression_type=CODEC_SETTING[codec], linger_ms=20, acks=1)
            await producer.start()
            try:
                futures = [
                    await producer.send(TOPIC, key=r.key, value=r.value, headers=list(r.headers), partition=0,
                                        timestamp_ms=r.timestamp_ms)
                    for r in records
                ]
                offsets += [(await future).offset for future in futures]
            finally:
                await producer.stop()
        return offsets

    return run(produce())


def test_a_created_topic_shows_in_metadata_with_its_configs(compat_stack: Any, create_errors: list) -> None:
    assert create_errors == [(TOPIC, 0), (SMALL_TOPIC, 0)]

    async def describe(admin: AIOKafkaAdminClient) -> tuple[Any, Any, Any]:
        return (await admin.describe_cluster(), await admin.describe_topics([TOPIC]),
                await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC)]))

    cluster, (described,), (configs_response,) = run(with_admin(compat_stack, describe))
    assert [(b["node_id"], b["port"]) for b in cluster["brokers"]] == [(1, compat_stack.processes[1].port)]
    assert cluster["controller_id"] == 1
    assert described["error_code"] == 0
    assert sorted((p["partition"], p["leader"], p["replicas"], p["isr"]) for p in described["partitions"]) == [
        (i, 1, [1], [1]) for i in range(TOPIC_PARTITIONS)
    ]
    (resource,) = configs_response.resources
    error_code, _, _, resource_name, entries = resource
    assert (error_code, resource_name) == (0, TOPIC)
    found = {name: (value, source) for name, value, _, source, *_ in entries}
    assert {name: found[name] for name in TOPIC_CONFIGS} == {
        name: (value, CONFIG_SOURCE_TOPIC) for name, value in TOPIC_CONFIGS.items()
    }


def test_keyed_records_with_headers_in_every_codec_read_back_intact_from_earliest(
        compat_stack: Any, records_by_codec: dict, sent_offsets: list[int], stored_codecs: Any) -> None:
    sent = [r for records in records_by_codec.values() for r in records]
    assert sent_offsets == list(range(len(sent)))
    # Each codec's batches reached the log compressed with that codec, in the order produced.
    assert stored_codecs(TOPIC, 0) == list(records_by_codec)

    async def read_all() -> list[Any]:
        consumer = await started_consumer(compat_stack)
        partition = TopicPartition(TOPIC, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        received: list[Any] = []
        try:
            async with asyncio.timeout(30):
                while len(received) < len(sent):
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        received += records
        finally:
            await consumer.stop()
        return received

    received = run(read_all())
    assert [r.offset for r in received] == list(range(len(sent)))
    assert [(r.key, r.value, tuple(r.headers), r.timestamp, r.timestamp_type) for r in received] == [
        (s.key, s.value, s.headers, s.timestamp_ms, 0) for s in sent
    ]


def test_offsets_for_times_finds_the_first_record_at_or_after_a_timestamp(
        compat_stack: Any, records_by_codec: dict, sent_offsets: list[int]) -> None:
    sent = [r for records in records_by_codec.values() for r in records]
    partition = TopicPartition(TOPIC, 0)

    async def look_up() -> tuple[list[Any], Any, Any, Any]:
        consumer = await started_consumer(compat_stack)
        try:
            exact = [(await consumer.offsets_for_times({partition: sent[i].timestamp_ms}))[partition]
                     for i in (0, 17, 45, len(sent) - 1)]
            between = (await consumer.offsets_for_times({partition: sent[80].timestamp_ms + 1}))[partition]
            after = await consumer.offsets_for_times({partition: sent[-1].timestamp_ms + 1})
            return exact, between, after, await consumer.end_offsets([partition])
        finally:
            await consumer.stop()

    exact, between, after, end = run(look_up())
    assert [(found.offset, found.timestamp) for found in exact] == [
        (i, sent[i].timestamp_ms) for i in (0, 17, 45, len(sent) - 1)
    ]
    # Between two records: the later one.
    assert (between.offset, between.timestamp) == (81, sent[81].timestamp_ms)
    assert after == {partition: None}
    assert end == {partition: len(sent)}


def test_an_unknown_topic_is_reported_as_unknown(compat_stack: Any, create_errors: list) -> None:
    (described,) = run(with_admin(compat_stack, lambda admin: admin.describe_topics([UNKNOWN_TOPIC])))
    assert (described["error_code"], described["partitions"]) == (UnknownTopicOrPartitionError.errno, [])

    async def send_to_unknown() -> None:
        # aiokafka waits up to request_timeout_ms for the topic to appear, then raises the broker's error.
        producer = AIOKafkaProducer(bootstrap_servers=compat_stack.bootstrap_servers, request_timeout_ms=1500)
        await producer.start()
        try:
            await producer.send_and_wait(UNKNOWN_TOPIC, value=b"lost")
        finally:
            await producer.stop()

    with pytest.raises(UnknownTopicOrPartitionError):
        run(send_to_unknown())


def test_a_record_over_max_message_bytes_gets_message_too_large_and_nothing_is_written(
        compat_stack: Any, create_errors: list) -> None:
    async def produce() -> tuple[BaseException | None, Any]:
        producer = AIOKafkaProducer(bootstrap_servers=compat_stack.bootstrap_servers, acks=1)
        await producer.start()
        refused = None
        try:
            try:
                await producer.send_and_wait(SMALL_TOPIC, value=b"x" * (4 * SMALL_MAX_MESSAGE_BYTES), partition=0)
            except MessageSizeTooLargeError as exc:
                refused = exc
            return refused, await producer.send_and_wait(SMALL_TOPIC, value=b"fits", partition=0)
        finally:
            await producer.stop()

    refused, fits = run(produce())
    assert isinstance(refused, MessageSizeTooLargeError)
    assert refused.errno == 10
    # The refused batch took no offset: the next record is the partition's first.
    assert fits.offset == 0


def test_a_consumer_with_a_rack_fetches_at_v11_and_reads_everything(
        compat_stack: Any, records_by_codec: dict, sent_offsets: list[int]) -> None:
    """aiokafka's newest Fetch is v11 (KIP-392's rack_id): with client_rack set it reads from the one
    broker (the leader; no follower here is in its rack)."""
    versions: list[int] = []

    async def read_all() -> int:
        consumer = AIOKafkaConsumer(bootstrap_servers=compat_stack.bootstrap_servers, enable_auto_commit=False,
                                    client_id="compat-rack-consumer", client_rack="az-x")
        await consumer.start()
        client = consumer._client
        send = client.send

        async def observed(node_id: int, request: Any, *args: Any, **kwargs: Any) -> Any:
            response = await send(node_id, request, *args, **kwargs)
            if type(response).__name__.startswith("FetchResponse"):
                versions.append(response.API_VERSION)
            return response

        client.send = observed
        partition = TopicPartition(TOPIC, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        received = 0
        try:
            async with asyncio.timeout(30):
                while received < len(sent_offsets):
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        received += len(records)
        finally:
            await consumer.stop()
        return received

    assert run(read_all()) == len(sent_offsets)
    assert versions and set(versions) == {11}
