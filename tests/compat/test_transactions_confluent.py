"""confluent-kafka (librdkafka) transactions against Floe brokers, end to end.

A transactional producer writes to several partitions on two brokers and commits a consumer
group's offsets in the same transaction (consume-transform-produce); read_committed consumers see
every committed record once and no aborted one, read_uncommitted consumers see both; the group's
offsets move only with a committed transaction; a second producer with the same transactional id
fences the first, whose later calls fail as Kafka's do.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

PARTITIONS = 4
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def txn_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    overrides = {"floe.transaction.marker.retry.backoff.ms": "100"}
    with running_stack(tmp_path_factory.mktemp("confluent-txn"), brokers=2, overrides=overrides) as stack:
        yield stack


def new_topic(stack: LocalStack, partitions: int = PARTITIONS) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    MetadataStore(stack.aws).create_topic(name, partitions, 1, {})
    return name


def producer(stack: LocalStack, transactional_id: str) -> Producer:
    p = Producer({"bootstrap.servers": stack.bootstrap_servers, "transactional.id": transactional_id,
                  "transaction.timeout.ms": 20000, "linger.ms": 5})
    p.init_transactions(TIMEOUT_S)
    return p


def consume_all(stack: LocalStack, topic: str, isolation: str, expected: int | None = None,
                group: str | None = None) -> list[bytes]:
    """Every value of ``topic`` a fresh consumer reads with ``isolation`` until it reaches the end
    (and has at least ``expected`` values)."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": group or f"reader-{uuid.uuid4().hex}",
                         "isolation.level": isolation, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: list[bytes] = []
    at_end: set[int] = set()

    def drained() -> bool:
        message = consumer.poll(0.5)
        if message is not None:
            if message.error() is None:
                values.append(message.value())
            elif message.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
        return len(at_end) == PARTITIONS and (expected is None or len(values) >= expected)

    try:
        wait_until(drained, timeout_s=TIMEOUT_S, interval_s=0, what=f"reading {topic} ({isolation})")
        return values
    finally:
        consumer.close()


def test_read_committed_consumers_see_committed_transactions_only(txn_stack: LocalStack) -> None:
    topic = new_topic(txn_stack)
    p = producer(txn_stack, f"writer-{uuid.uuid4().hex[:8]}")
    committed, aborted = [], []
    for round_ in range(4):
        p.begin_transaction()
        values = [f"r{round_}-{i}".encode() for i in range(20)]
        for i, value in enumerate(values):
            p.produce(topic, value=value, partition=i % PARTITIONS)
        if round_ % 2 == 0:
            p.commit_transaction(TIMEOUT_S)
            committed += values
        else:
            p.flush(TIMEOUT_S)
            p.abort_transaction(TIMEOUT_S)
            aborted += values
    read = consume_all(txn_stack, topic, "read_committed", expected=len(committed))
    assert sorted(read) == sorted(committed)
    uncommitted = consume_all(txn_stack, topic, "read_uncommitted", expected=len(committed) + len(aborted))
    assert sorted(uncommitted) == sorted(committed + aborted)


def test_consume_transform_produce_commits_output_and_offsets_together(txn_stack: LocalStack) -> None:
    source, sink = new_topic(txn_stack), new_topic(txn_stack)
    setup = producer(txn_stack, f"setup-{uuid.uuid4().hex[:8]}")
    setup.begin_transaction()
    for i in range(40):
        setup.produce(source, value=f"in-{i}".encode(), partition=i % PARTITIONS)
    setup.commit_transaction(TIMEOUT_S)

    group = f"ctp-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": txn_stack.bootstrap_servers, "group.id": group,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([source])
    p = producer(txn_stack, f"ctp-{uuid.uuid4().hex[:8]}")
    transformed: list[bytes] = []
    try:
        def drain() -> bool:
            messages = [m for m in consumer.consume(50, 1.0) if m.error() is None]
            if messages:
                p.begin_transaction()
                for m in messages:
                    p.produce(sink, value=m.value().replace(b"in-", b"out-"), partition=m.partition())
                p.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                              consumer.consumer_group_metadata(), TIMEOUT_S)
                p.commit_transaction(TIMEOUT_S)
                transformed.extend(m.value() for m in messages)
            return len(transformed) >= 40

        wait_until(drain, timeout_s=60, interval_s=0, what="transforming the source topic")
        committed = consumer.committed([TopicPartition(source, i) for i in range(PARTITIONS)], TIMEOUT_S)
        # Each partition's committed offset is its end: past its 10 records and the commit marker.
        ends = [consumer.get_watermark_offsets(TopicPartition(source, i), TIMEOUT_S)[1] for i in range(PARTITIONS)]
    finally:
        consumer.close()
    assert [tp.offset for tp in committed] == ends == [11] * PARTITIONS
    assert sorted(consume_all(txn_stack, sink, "read_committed", expected=40)) == sorted(
        f"out-{i}".encode() for i in range(40))


def test_an_aborted_transaction_leaves_the_group_offsets_where_they_were(txn_stack: LocalStack) -> None:
    topic = new_topic(txn_stack)
    group = f"abort-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": txn_stack.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False})
    p = producer(txn_stack, f"offsets-{uuid.uuid4().hex[:8]}")
    try:
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 5)], consumer.consumer_group_metadata(), TIMEOUT_S)
        p.abort_transaction(TIMEOUT_S)
        assert consumer.committed([TopicPartition(topic, 0)], TIMEOUT_S)[0].offset < 0
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 9)], consumer.consumer_group_metadata(), TIMEOUT_S)
        p.commit_transaction(TIMEOUT_S)
        assert consumer.committed([TopicPartition(topic, 0)], TIMEOUT_S)[0].offset == 9
    finally:
        consumer.close()


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(txn_stack: LocalStack) -> None:
    topic = new_topic(txn_stack)
    transactional_id = f"zombie-{uuid.uuid4().hex[:8]}"
    zombie = producer(txn_stack, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"from the zombie", partition=0)
    zombie.flush(TIMEOUT_S)
    successor = producer(txn_stack, transactional_id)  # aborts the zombie's open transaction
    successor.begin_transaction()
    successor.produce(topic, value=b"from the successor", partition=1)
    successor.commit_transaction(TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(TIMEOUT_S)
    assert raised.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH)
    assert consume_all(txn_stack, topic, "read_committed", expected=1) == [b"from the successor"]
