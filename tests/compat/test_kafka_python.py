"""kafka-python against a Floe broker: admin and metadata, every codec, reading back, offsets by time, errors.

The client negotiates its API versions from the broker's ApiVersions answer (no `api_version` is
pinned). Records are read with assign(), without a consumer group.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError, UnknownTopicOrPartitionError

TOPIC = "kafka-python-records"
TOPIC_PARTITIONS = 3
# Small segments, so reading back from earliest crosses several of them.
TOPIC_CONFIGS = {"segment.bytes": "4096", "retention.ms": "86400000"}
SMALL_TOPIC = "kafka-python-small-messages"
SMALL_MAX_MESSAGE_BYTES = 1024
UNKNOWN_TOPIC = "kafka-python-no-such-topic"
CODEC_SETTING = {"none": None, "gzip": "gzip", "snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}


@pytest.fixture(scope="module")
def admin(compat_stack: Any) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=compat_stack.bootstrap_servers, client_id="compat-admin")
    yield client
    client.close()


@pytest.fixture(scope="module")
def create_result(admin: KafkaAdminClient) -> dict[str, Any]:
    return admin.create_topics([
        NewTopic(TOPIC, TOPIC_PARTITIONS, 1, topic_configs=TOPIC_CONFIGS),
        NewTopic(SMALL_TOPIC, 1, 1, topic_configs={"max.message.bytes": str(SMALL_MAX_MESSAGE_BYTES)}),
    ])


@pytest.fixture(scope="module")
def sent_offsets(compat_stack: Any, create_result: dict[str, Any], records_by_codec: dict) -> list[int]:
    """Produce every codec's records to partition 0, one producer per codec; the offsets acknowledged."""
    offsets = []
    for codec, records in records_by_codec.items():
        producer = KafkaProducer(bootstrap_servers=compat_stack.bootstrap_servers,
                                 compression_type=CODEC_SETTING[codec], linger_ms=20, acks=1)
        futures = [
            producer.send(TOPIC, key=r.key, value=r.value, headers=list(r.headers), partition=0,
                          timestamp_ms=r.timestamp_ms)
            for r in records
        ]
        producer.flush(timeout=30)
        offsets += [future.get(timeout=30).offset for future in futures]
        producer.close()
    return offsets


def consumer_for(compat_stack: Any) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=compat_stack.bootstrap_servers, enable_auto_commit=False,
                         client_id="compat-consumer")


def test_a_created_topic_shows_in_metadata_with_its_configs(compat_stack: Any, admin: KafkaAdminClient,
                                                            create_result: dict[str, Any]) -> None:
    assert [(t["name"], t["error_code"]) for t in create_result["topics"]] == [(TOPIC, 0), (SMALL_TOPIC, 0)]
    cluster = admin.describe_cluster()
    assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [(1, compat_stack.processes[1].port)]
    assert cluster["controller_id"] == 1
    (described,) = admin.describe_topics([TOPIC])
    assert described["error_code"] == 0
    assert sorted((p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
                  for p in described["partitions"]) == [(i, 1, [1], [1]) for i in range(TOPIC_PARTITIONS)]
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC)])["topic"][TOPIC]
    assert {name: configs[name]["value"] for name in TOPIC_CONFIGS} == TOPIC_CONFIGS
    assert all(configs[name]["config_source"] == "DYNAMIC_TOPIC_CONFIG" for name in TOPIC_CONFIGS)
    consumer = consumer_for(compat_stack)
    try:
        assert consumer.partitions_for_topic(TOPIC) == set(range(TOPIC_PARTITIONS))
    finally:
        consumer.close()


def test_keyed_records_with_headers_in_every_codec_read_back_intact_from_earliest(
        compat_stack: Any, records_by_codec: dict, sent_offsets: list[int], stored_codecs: Any) -> None:
    sent = [r for records in records_by_codec.values() for r in records]
    assert sent_offsets == list(range(len(sent)))
    # Each codec's batches reached the log compressed with that codec, in the order produced.
    assert stored_codecs(TOPIC, 0) == list(records_by_codec)

    consumer = consumer_for(compat_stack)
    partition = TopicPartition(TOPIC, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    received = []
    deadline = time.monotonic() + 30
    try:
        while len(received) < len(sent) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                received += records
    finally:
        consumer.close()
    assert [r.offset for r in received] == list(range(len(sent)))
    assert [(r.key, r.value, r.headers, r.timestamp, r.timestamp_type) for r in received] == [
        (s.key, s.value, list(s.headers), s.timestamp_ms, 0) for s in sent
    ]


def test_offsets_for_times_finds_the_first_record_at_or_after_a_timestamp(
        compat_stack: Any, records_by_codec: dict, sent_offsets: list[int]) -> None:
    sent = [r for records in records_by_codec.values() for r in records]
    partition = TopicPartition(TOPIC, 0)
    consumer = consumer_for(compat_stack)
    try:
        for index in (0, 17, 45, len(sent) - 1):
            exact = consumer.offsets_for_times({partition: sent[index].timestamp_ms})[partition]
            assert (exact.offset, exact.timestamp) == (index, sent[index].timestamp_ms)
        # Between two records: the later one.
        between = consumer.offsets_for_times({partition: sent[80].timestamp_ms + 1})[partition]
        assert (between.offset, between.timestamp) == (81, sent[81].timestamp_ms)
        assert consumer.offsets_for_times({partition: sent[-1].timestamp_ms + 1}) == {partition: None}
        assert consumer.end_offsets([partition]) == {partition: len(sent)}
    finally:
        consumer.close()


def test_an_unknown_topic_is_reported_as_unknown(compat_stack: Any, admin: KafkaAdminClient,
                                                 create_result: dict[str, Any]) -> None:
    (described,) = admin.describe_topics([UNKNOWN_TOPIC])
    assert described["error_code"] == UnknownTopicOrPartitionError.errno
    assert described["partitions"] == []
    # kafka-python's producer keeps asking for metadata of a topic the cluster does not know until
    # max_block_ms runs out, as it does against Kafka with topic auto-creation off.
    producer = KafkaProducer(bootstrap_servers=compat_stack.bootstrap_servers, max_block_ms=1500)
    try:
        with pytest.raises(KafkaTimeoutError, match="metadata"):
            producer.send(UNKNOWN_TOPIC, value=b"lost")
    finally:
        producer.close()


def test_a_record_over_max_message_bytes_gets_message_too_large_and_nothing_is_written(
        compat_stack: Any, create_result: dict[str, Any]) -> None:
    producer = KafkaProducer(bootstrap_servers=compat_stack.bootstrap_servers, acks=1)
    try:
        with pytest.raises(MessageSizeTooLargeError, match="max.message.bytes") as refused:
            producer.send(SMALL_TOPIC, value=b"x" * (4 * SMALL_MAX_MESSAGE_BYTES), partition=0).get(timeout=30)
        assert refused.value.errno == 10
        fits = producer.send(SMALL_TOPIC, value=b"fits", partition=0).get(timeout=30)
    finally:
        producer.close()
    # The refused batch took no offset: the next record is the partition's first.
    assert fits.offset == 0


def test_a_consumer_fetches_in_an_incremental_session_that_leaves_out_quiet_partitions(
        compat_stack: Any, records_by_codec: dict, sent_offsets: list[int]) -> None:
    """kafka-python opens a KIP-227 session at its newest Fetch version (v12): once it has read
    everything, the broker's answers name none of the three partitions, in the same session."""
    consumer = KafkaConsumer(bootstrap_servers=compat_stack.bootstrap_servers, enable_auto_commit=False,
                             client_id="compat-session-consumer", fetch_max_wait_ms=50)
    answers: list[tuple[int, int, int]] = []  # (Fetch version, session id, partitions named)
    fetcher = consumer._fetcher
    handle = fetcher._handle_fetch_response

    def observed(node_id: int, fetch_offsets: Any, send_time: float, response: Any) -> Any:
        answers.append((response.API_VERSION, response.session_id, sum(len(t.partitions) for t in response.responses)))
        return handle(node_id, fetch_offsets, send_time, response)

    fetcher._handle_fetch_response = observed
    consumer.assign([TopicPartition(TOPIC, p) for p in range(TOPIC_PARTITIONS)])
    consumer.seek_to_beginning()
    received = 0
    deadline = time.monotonic() + 30
    try:
        while (received < len(sent_offsets) or len(answers) < 5) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                received += len(records)
    finally:
        consumer.close()
    assert received == len(sent_offsets)
    assert answers[0][0] == 12 and answers[0][2] == TOPIC_PARTITIONS  # the full fetch that opens the session
    session_id = answers[0][1]
    assert session_id != 0 and all(session == session_id for _, session, _ in answers)
    assert answers[-1][2] == 0  # caught up: an incremental answer names nothing
