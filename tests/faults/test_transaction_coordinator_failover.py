"""A transaction coordinator dies with a commit prepared but its markers unwritten; another finishes it.

Two brokers. The transactional id's coordinator is broker 2 (it gets the first FindCoordinator);
the records go to the partitions broker 1 leads. Broker 1 is SIGSTOPped after the records are
written, so the commit's markers cannot reach it: EndTxn is answered once PrepareCommit is stored,
and broker 2 is then SIGKILLed before any marker is written. Broker 1 resumes, takes the lapsed
lease when asked for the coordinator, finds the transaction in PrepareCommit, writes the markers
and stores CompleteCommit: a read_committed consumer then reads every record of the transaction.
A second transaction, left open when its coordinator is killed, is aborted by the new coordinator
once its timeout passes, and none of its records is ever read.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from broker_core.client import BlockingConnection
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

PARTITIONS = 4


@pytest.fixture
def failover_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    overrides = {"floe.transaction.marker.retry.backoff.ms": "100",
                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
    with running_stack(tmp_path_factory.mktemp("txn-failover"), brokers=2, overrides=overrides) as stack:
        yield stack


def _request(stack: LocalStack, broker_id: int, api_key: ApiKey, data: dict, version: int) -> object:
    connection = BlockingConnection("127.0.0.1", stack.processes[broker_id].port, request_timeout_s=10)
    try:
        return connection.request(api_key, data, version)
    finally:
        connection.close()


def _find(stack: LocalStack, via: int, transactional_id: str) -> object:
    return _request(stack, via, ApiKey.FIND_COORDINATOR,
                    {"key_type": 1, "coordinator_keys": (transactional_id,)}, 4).coordinators[0]


def _state(stack: LocalStack, via: int, transactional_id: str) -> str:
    return _request(stack, via, ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": (transactional_id,)},
                    0).transaction_states[0].transaction_state


def _read_committed(stack: LocalStack, topic: str, partitions: list[int], expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{stack.processes[1].port}",
                         "group.id": f"reader-{uuid.uuid4().hex}", "isolation.level": "read_committed",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    values: list[bytes] = []
    at_end: set[int] = set()

    def drained() -> bool:
        message = consumer.poll(0.5)
        if message is not None:
            if message.error() is None:
                values.append(message.value())
            elif message.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
        return at_end == set(partitions) and len(values) >= expected

    try:
        wait_until(drained, timeout_s=30, interval_s=0, what=f"reading {topic}")
        return values
    finally:
        consumer.close()


def test_a_new_coordinator_finishes_a_prepared_commit_and_aborts_an_abandoned_transaction(
        failover_stack: LocalStack) -> None:
    stack = failover_stack
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    MetadataStore(stack.aws).create_topic(topic, PARTITIONS, 1, {})
    metadata = _request(stack, 1, ApiKey.METADATA, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}], "allow_auto_topic_creation": False,
                                                     "include_topic_authorized_operations": False}, 12)
    on_broker1 = sorted(p.partition_index for p in metadata.topics[0].partitions if p.leader_id == 1)
    assert on_broker1, "the topic has no partition on broker 1"

    committed_id, abandoned_id = f"committed-{uuid.uuid4().hex[:6]}", f"abandoned-{uuid.uuid4().hex[:6]}"
    for transactional_id in (committed_id, abandoned_id):
        assert _find(stack, 2, transactional_id).node_id == 2

    settings = {"bootstrap.servers": stack.bootstrap_servers, "linger.ms": 5, "transaction.timeout.ms": 5000}
    abandoned = Producer({**settings, "transactional.id": abandoned_id})
    abandoned.init_transactions(30)
    abandoned.begin_transaction()
    for partition in on_broker1:
        abandoned.produce(topic, value=b"never visible", partition=partition)
    abandoned.flush(30)

    producer = Producer({**settings, "transactional.id": committed_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    values = [f"committed-{i}".encode() for i in range(12)]
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=on_broker1[i % len(on_broker1)])
    producer.flush(30)

    stack.kill_broker(1, signal.SIGSTOP)
    try:
        producer.commit_transaction(30)  # answered once PrepareCommit is stored on broker 2
        assert _state(stack, 2, committed_id) == "PrepareCommit"
        stack.kill_broker(2, signal.SIGKILL)
    finally:
        stack.kill_broker(1, signal.SIGCONT)

    wait_until(lambda: _find(stack, 1, committed_id).node_id == 1, timeout_s=30,
               what="broker 1 to take over the committed transaction's lease")
    wait_until(lambda: _state(stack, 1, committed_id) == "CompleteCommit", timeout_s=30,
               what="the new coordinator to finish the prepared commit")
    assert sorted(_read_committed(stack, topic, on_broker1, len(values))) == sorted(values)

    wait_until(lambda: _find(stack, 1, abandoned_id).node_id == 1, timeout_s=30,
               what="broker 1 to take over the abandoned transaction's lease")
    wait_until(lambda: _state(stack, 1, abandoned_id) == "CompleteAbort", timeout_s=30,
               what="the new coordinator to abort the abandoned transaction after its timeout")
    assert b"never visible" not in _read_committed(stack, topic, on_broker1, len(values))
