"""confluent-kafka (librdkafka) against a Floe broker: admin and metadata, every codec, reading back,
offsets by time, errors.

librdkafka reports per-message errors through the delivery callback and topic errors in metadata;
the tests collect both and compare error codes. Records are read with assign(); librdkafka insists
on a group.id for any consumer, but no group is joined and nothing is committed.

librdkafka before 2.11.1 compresses with gzip, snappy and lz4 only for brokers that still serve
Produce v0 (librdkafka issues 4948 and 4956); Floe's oldest Produce is v3, Kafka 4.0's floor, so
with such a build those batches go uncompressed, and the codec check expects that.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType

TOPIC = "confluent-records"
TOPIC_PARTITIONS = 3
# Small segments, so reading back from earliest crosses several of them.
TOPIC_CONFIGS = {"segment.bytes": "4096", "retention.ms": "86400000"}
SMALL_TOPIC = "confluent-small-messages"
SMALL_MAX_MESSAGE_BYTES = 1024
UNKNOWN_TOPIC = "confluent-no-such-topic"
TIMEOUT_S = 30


def codecs_sent_by_librdkafka(codecs: list[str]) -> list[str]:
    """The codecs the bundled librdkafka really uses when asked for ``codecs`` (runs collapsed)."""
    version = tuple(int(part) for part in confluent_kafka.libversion()[0].split("-")[0].split("."))
    used = [codec if version >= (2, 11, 1) or codec in ("none", "zstd") else "none" for codec in codecs]
    return [codec for i, codec in enumerate(used) if i == 0 or used[i - 1] != codec]


@pytest.fixture(scope="module")
def admin(compat_stack: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": compat_stack.bootstrap_servers, "client.id": "compat-admin"})


@pytest.fixture(scope="module")
def create_outcomes(admin: AdminClient) -> dict[str, BaseException | None]:
    """Topic -> the exception its CreateTopics future raised, or None."""
    futures = admin.create_topics([
        NewTopic(TOPIC, num_partitions=TOPIC_PARTITIONS, replication_factor=1, config=TOPIC_CONFIGS),
        NewTopic(SMALL_TOPIC, num_partitions=1, replication_factor=1,
                 config={"max.message.bytes": str(SMALL_MAX_MESSAGE_BYTES)}),
    ], operation_timeout=TIMEOUT_S)
    outcomes: dict[str, BaseException | None] = {}
    for topic, future in futures.items():
        try:
            outcomes[topic] = future.result(timeout=TIMEOUT_S)
        except Exception as exc:
            outcomes[topic] = exc
    return outcomes


def produce(compat_stack: Any, messages: list[dict[str, Any]], **settings: Any) -> list[tuple[KafkaError | None, int]]:
    """Produce ``messages`` (keyword arguments of Producer.produce) and wait for every delivery report;
    (error, offset) per message in the order sent."""
    reports: dict[int, tuple[KafkaError | None, int]] = {}
    producer = Producer({"bootstrap.servers": compat_stack.bootstrap_servers, "acks": 1, **settings})
    for number, message in enumerate(messages):
        producer.produce(**message, on_delivery=lambda err, msg, number=number: reports.__setitem__(
            number, (err, msg.offset())))
    assert producer.flush(TIMEOUT_S) == 0, "delivery reports still outstanding"
    return [reports[number] for number in range(len(messages))]


@pytest.fixture(scope="module")
def delivery_reports(compat_stack: Any, create_outcomes: dict, records_by_codec: dict) -> list[tuple[Any, int]]:
    """Produce every codec's records to partition 0, one producer per codec."""
    reports = []
    for codec, records in records_by_codec.items():
        reports += produce(compat_stack, [
            {"topic": TOPIC, "key": r.key, "value": r.value, "headers": list(r.headers), "partition": 0,
             "timestamp": r.timestamp_ms}
            for r in records
        ], **{"compression.type": codec, "linger.ms": 20})
    return reports


@pytest.fixture
def consumer(compat_stack: Any) -> Iterator[Consumer]:
    consumer = Consumer({"bootstrap.servers": compat_stack.bootstrap_servers, "group.id": "compat-assign-only",
                         "enable.auto.commit": False, "client.id": "compat-consumer"})
    yield consumer
    consumer.close()


def test_a_created_topic_shows_in_metadata_with_its_configs(compat_stack: Any, admin: AdminClient,
                                                            create_outcomes: dict) -> None:
    assert create_outcomes == {TOPIC: None, SMALL_TOPIC: None}
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert [(b.id, b.port) for b in metadata.brokers.values()] == [(1, compat_stack.processes[1].port)]
    assert metadata.controller_id == 1
    topic = metadata.topics[TOPIC]
    assert topic.error is None
    assert sorted((p.id, p.leader, p.replicas, p.isrs, p.error) for p in topic.partitions.values()) == [
        (i, 1, [1], [1], None) for i in range(TOPIC_PARTITIONS)
    ]
    resource = ConfigResource(ResourceType.TOPIC, TOPIC)
    configs = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
    assert {name: (configs[name].value, configs[name].source) for name in TOPIC_CONFIGS} == {
        name: (value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value) for name, value in TOPIC_CONFIGS.items()
    }


def test_keyed_records_with_headers_in_every_codec_read_back_intact_from_earliest(
        consumer: Consumer, records_by_codec: dict, delivery_reports: list, stored_codecs: Any) -> None:
    sent = [r for records in records_by_codec.values() for r in records]
    assert delivery_reports == [(None, offset) for offset in range(len(sent))]
    # Each codec's batches reached the log compressed as librdkafka sent them, in the order produced.
    assert stored_codecs(TOPIC, 0) == codecs_sent_by_librdkafka(list(records_by_codec))

    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    received = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(received) < len(sent) and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=100, timeout=0.5):
            assert message.error() is None, message.error()
            received.append(message)
    assert [m.offset() for m in received] == list(range(len(sent)))
    assert [(m.key(), m.value(), m.headers(), m.timestamp()) for m in received] == [
        (s.key, s.value, list(s.headers), (TIMESTAMP_CREATE_TIME, s.timestamp_ms)) for s in sent
    ]


def test_offsets_for_times_finds_the_first_record_at_or_after_a_timestamp(
        consumer: Consumer, records_by_codec: dict, delivery_reports: list) -> None:
    sent = [r for records in records_by_codec.values() for r in records]

    def offset_for(timestamp_ms: int) -> int:
        (found,) = consumer.offsets_for_times([TopicPartition(TOPIC, 0, timestamp_ms)], timeout=TIMEOUT_S)
        assert found.error is None
        return found.offset

    for index in (0, 17, 45, len(sent) - 1):
        assert offset_for(sent[index].timestamp_ms) == index
    # Between two records: the later one.
    assert offset_for(sent[80].timestamp_ms + 1) == 81
    # After the last record: the log end, as librdkafka reports "no such offset".
    assert offset_for(sent[-1].timestamp_ms + 1) == OFFSET_END
    assert consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=TIMEOUT_S) == (0, len(sent))


def test_an_unknown_topic_is_reported_as_unknown(compat_stack: Any, admin: AdminClient,
                                                 create_outcomes: dict) -> None:
    described = admin.list_topics(topic=UNKNOWN_TOPIC, timeout=TIMEOUT_S).topics[UNKNOWN_TOPIC]
    assert described.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert described.partitions == {}
    # librdkafka gives a topic this long to appear in metadata before failing its messages.
    ((error, _),) = produce(compat_stack, [{"topic": UNKNOWN_TOPIC, "value": b"lost"}],
                            **{"topic.metadata.propagation.max.ms": 1000})
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_a_record_over_max_message_bytes_gets_message_too_large_and_nothing_is_written(
        compat_stack: Any, create_outcomes: dict) -> None:
    reports = produce(compat_stack, [{"topic": SMALL_TOPIC, "value": b"x" * (4 * SMALL_MAX_MESSAGE_BYTES),
                                      "partition": 0}])
    ((error, _),) = reports
    assert error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert not error.retriable()
    # The refused batch took no offset: the next record is the partition's first.
    assert produce(compat_stack, [{"topic": SMALL_TOPIC, "value": b"fits", "partition": 0}]) == [(None, 0)]


def test_librdkafka_reads_at_fetch_v13_or_later_by_topic_id(compat_stack: Any, records_by_codec: dict,
                                                            delivery_reports: list) -> None:
    """The broker offers Fetch up to v18, so librdkafka fetches at its newest (v16 for 2.16), which names
    topics by id; its protocol debug log shows the version of every FetchResponse it read."""
    sent = sum(len(records) for records in records_by_codec.values())
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("compat.librdkafka.protocol")
    logger.addHandler(Collect())
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    reader = Consumer({"bootstrap.servers": compat_stack.bootstrap_servers, "group.id": "compat-assign-only",
                       "enable.auto.commit": False, "debug": "protocol", "logger": logger})
    reader.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    received = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while received < sent and time.monotonic() < deadline:
            received += sum(1 for m in reader.consume(num_messages=100, timeout=0.5) if m.error() is None)
    finally:
        reader.close()
    assert received == sent
    versions = {int(found) for line in lines for found in re.findall(r"Received FetchResponse \(v(\d+)", line)}
    assert versions and min(versions) >= 13, versions
