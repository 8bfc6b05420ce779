"""kafka-python's transactional producer (KIP-98, kafka-python 3) and read_committed consumer against Floe.

Committed and aborted transactions over several partitions, each committing the group's offset of
partition 0: a read_committed consumer reads the committed records only, and the group's committed
offset is the last committed transaction's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

# Runs in `make faults`, not in `make test`: a second client's pass over the transaction matrix that test_transactions_confluent.py runs in the default suite; the default suite must stay under CI's 20-minute budget.
pytestmark = pytest.mark.faults

PARTITIONS = 3


@pytest.fixture(scope="module")
def kafka_python_txn_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    overrides = {"floe.transaction.marker.retry.backoff.ms": "100"}
    with running_stack(tmp_path_factory.mktemp("kafka-python-txn"), brokers=2, overrides=overrides) as stack:
        yield stack


def _read_committed(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=1000)
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    values: list[bytes] = []
    try:
        def caught_up() -> bool:
            values.extend(m.value for m in consumer)  # stops after consumer_timeout_ms without records
            if len(values) < expected:
                return False
            # Up to the LSO, so that no aborted record can still come.
            ends = consumer.end_offsets(partitions)
            return all(consumer.position(tp) >= ends[tp] for tp in partitions)

        wait_until(caught_up, timeout_s=30, interval_s=0,
                   what=lambda: f"reading {topic}: {len(values)} of {expected} records")
        return values
    finally:
        consumer.close()


def test_kafka_python_transactions_commit_and_abort(kafka_python_txn_stack: LocalStack) -> None:
    bootstrap = kafka_python_txn_stack.bootstrap_servers
    topic = f"kptxn-{uuid.uuid4().hex[:8]}"
    MetadataStore(kafka_python_txn_stack.aws).create_topic(topic, PARTITIONS, 1, {})
    group = f"kpgroup-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:8]}")
    producer.init_transactions()
    committed = []
    try:
        for round_ in range(4):
            values = [f"kp-{round_}-{i}".encode() for i in range(9)]
            producer.begin_transaction()
            for i, value in enumerate(values):
                producer.send(topic, value, partition=i % PARTITIONS)
            producer.send_offsets_to_transaction({TopicPartition(topic, 0): OffsetAndMetadata(round_ + 1, "", -1)},
                                                 group)
            if round_ % 2 == 0:
                producer.commit_transaction()
                committed += values
            else:
                producer.abort_transaction()
    finally:
        producer.close()
    assert sorted(_read_committed(bootstrap, topic, len(committed))) == sorted(committed)
    checker = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        assert checker.committed(TopicPartition(topic, 0)) == 3
    finally:
        checker.close()
