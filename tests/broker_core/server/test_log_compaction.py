"""Compacted topics on a three-broker cluster, driven by kafka-python: every replica cleans its own log.

Producers overwrite a fixed set of keys many times; the cleaner of each broker (backoff 100 ms, a
dirty ratio of 1%) compacts its replica below its own high watermark. A consumer then reads each
key's latest value once (far fewer records than were produced, at their original offsets), and after
the stack stops every replica's directory, opened as a partition log, holds the same key -> latest
value map. A record without a key is refused with INVALID_RECORD, and a tiered compacted topic with
INVALID_CONFIG.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidConfigurationError, InvalidRecordError

from broker_core.local_stack import LocalStack
from broker_core.log import LogConfig, PartitionLog
from broker_core.log.checkpoint import read_offset_checkpoint
from broker_core.log.cleaner import CLEANER_CHECKPOINT_FILE
from broker_core.log.errors import CorruptCheckpointError
from broker_core.log.segment import LOG_SUFFIX
from broker_core.records import iter_batches
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

TOPIC = "changelog"
KEYS = 40
ROUNDS = 30
CLEANER_OVERRIDES = {"log.cleaner.backoff.ms": "100", "file.delete.delay.ms": "0",
                     "log.segment.delete.delay.ms": "0"}
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01",
                 "min.insync.replicas": "2"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("compaction"), brokers=3, overrides=CLEANER_OVERRIDES) as running:
        yield running


@pytest.fixture(scope="module")
def produced(stack: LocalStack) -> dict[bytes, bytes]:
    admin = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 3, topic_configs=TOPIC_CONFIGS)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all", linger_ms=5)
    latest = {}
    for round_number in range(ROUNDS):
        for key in range(KEYS):
            name, value = b"key-%d" % key, b"value %d of key %d " % (round_number, key) * 4
            producer.send(TOPIC, key=name, value=value, partition=0)
            latest[name] = value
    producer.flush(timeout=60)
    producer.close()
    return latest


def consume_all(stack: LocalStack) -> list[tuple[int, bytes, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=stack.bootstrap_servers, enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    partition = TopicPartition(TOPIC, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    end = consumer.end_offsets([partition])[partition]
    records = []
    try:
        for message in consumer:
            records.append((message.offset, message.key, message.value))
            if message.offset >= end - 1:
                break
    finally:
        consumer.close()
    return records


def replica_directories(stack: LocalStack) -> list[Path]:
    return [process.data_dir / f"{TOPIC}-0" for process in stack.processes.values()]


def cleaned_up_to_the_active_segment(directory: Path) -> bool:
    """Whether the replica's cleaner checkpoint reached its active segment: every sealed segment has been
    cleaned since the last record was produced (the producer is done before the tests run, so nothing
    rolls any more). A first pass that ran while the producer was still writing is not enough."""
    try:
        checkpoint = read_offset_checkpoint(directory / CLEANER_CHECKPOINT_FILE)
    except (CorruptCheckpointError, OSError):
        return False  # being replaced right now: look again
    bases = [int(path.name.removesuffix(LOG_SUFFIX)) for path in directory.glob("*" + LOG_SUFFIX)]
    return checkpoint is not None and bool(bases) and checkpoint >= max(bases)


def wait_until_every_replica_cleaned_everything(stack: LocalStack) -> None:
    wait_until(lambda: all(cleaned_up_to_the_active_segment(d) for d in replica_directories(stack)),
               "every replica cleaned every sealed segment", timeout_s=60)


def test_every_replica_cleans_and_a_consumer_reads_each_keys_latest_value(
    stack: LocalStack, produced: dict[bytes, bytes]
) -> None:
    wait_until_every_replica_cleaned_everything(stack)
    records = consume_all(stack)
    assert {key: value for _, key, value in records} == produced
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(set(offsets))
    assert len(records) < KEYS * ROUNDS // 2
    # each key's latest value is read at the offset it was written at (one producer, keys in order)
    assert {key: offset for offset, key, _ in records} == {
        b"key-%d" % key: (ROUNDS - 1) * KEYS + key for key in range(KEYS)}


def test_a_record_without_a_key_is_refused_with_invalid_record(stack: LocalStack, produced: dict) -> None:
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all", retries=0)
    try:
        future = producer.send(TOPIC, key=None, value=b"no key", partition=0)
        with pytest.raises(InvalidRecordError):
            future.get(timeout=30)
    finally:
        producer.close()
    assert all(key is not None for _, key, _ in consume_all(stack))


def test_a_tiered_compacted_topic_is_refused_with_invalid_config(stack: LocalStack) -> None:
    admin = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers)
    try:
        with pytest.raises(InvalidConfigurationError, match="remote.storage.enable"):
            admin.create_topics([NewTopic("tiered-changelog", 1, 1, topic_configs={
                "cleanup.policy": "compact", "remote.storage.enable": "true"})])
        assert "tiered-changelog" not in admin.list_topics()
    finally:
        admin.close()


def test_after_stopping_every_replica_holds_the_same_key_to_latest_value_map(
    stack: LocalStack, produced: dict[bytes, bytes]
) -> None:
    wait_until_every_replica_cleaned_everything(stack)
    directories = replica_directories(stack)
    stack.stop(save_state=False)
    maps = []
    for directory in directories:
        log = PartitionLog.open(directory, LogConfig(cleanup_policy="compact"), topic=TOPIC)
        try:
            latest, count, offset = {}, 0, log.log_start_offset
            while offset < log.log_end_offset:
                data = log.read_bytes(offset, 1 << 20)
                if not data:
                    break
                for batch in iter_batches(data):
                    for record in batch.records:
                        latest[record.key] = record.value
                        count += 1
                    offset = batch.header.next_offset
        finally:
            log.close()
        assert count < KEYS * ROUNDS
        maps.append(latest)
    assert maps == [produced] * 3
