"""Partition reassignment (AlterPartitionReassignments, ListPartitionReassignments) driven by kafka-python's
admin client and `floe reassign` against three real brokers: a replica moves while a producer writes and
every acknowledged record is read back from the new replicas; the old replica's log is deleted; a move
held back by the replication throttle is listed and can be cancelled; bad targets get Kafka's errors;
a move whose target broker is killed completes once it returns, and one whose leaving leader is killed
completes from the new leader."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)

from broker_core import cli
from broker_core.client import FloeClient
from broker_core.local_stack import LocalStack
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]
T = TypeVar("T")

# Two one-second windows: a throttled move is held to its rate after about one second's worth of bytes.
OVERRIDES = {"replication.quota.window.num": "2", "replica.lag.time.max.ms": "5000", "broker.session.timeout.ms": "10000",
             "auto.leader.rebalance.enable": "false"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("reassign"), brokers=3, overrides=OVERRIDES) as running:
        yield running


@pytest.fixture(scope="module")
def admin(stack: LocalStack) -> Iterator[KafkaAdminClient]:
    # Every broker registered and known to the one answering, before kafka-python caches the cluster.
    probe = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    wait_until(lambda: len(probe.list_topics(timeout=30).brokers) == 3, "three brokers", timeout_s=60, interval_s=0.2)
    client = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers, request_timeout_ms=60000)
    yield client
    client.close()


def replicas_and_isr(admin: KafkaAdminClient, topic: str) -> tuple[list[int], list[int], int]:
    (described,) = admin.describe_topics([topic])
    partition = described["partitions"][0]
    return list(partition["replica_nodes"]), sorted(partition["isr_nodes"]), partition["leader_id"]


def create(admin: KafkaAdminClient, topic: str, replication_factor: int) -> list[int]:
    admin.create_topics([NewTopic(topic, 1, replication_factor)])
    wait_until(lambda: replicas_and_isr(admin, topic)[2] >= 0, "a leader", timeout_s=30, interval_s=0.2)
    return replicas_and_isr(admin, topic)[0]


def read_all(stack: LocalStack, topic: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=stack.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, 0)])
    values = [m.value for m in consumer]
    consumer.close()
    return values


def replica_dirs(stack: LocalStack, topic: str) -> set[int]:
    return {b for b in (1, 2, 3) if any(stack.directory.glob(f"broker-{b}/**/{topic}-0"))}


def test_a_replica_moves_while_a_producer_writes_and_no_acknowledged_record_is_lost(
        stack: LocalStack, admin: KafkaAdminClient) -> None:
    before = create(admin, "moving", 2)
    target = [b for b in (1, 2, 3) if b not in before] + before[1:]
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all", retries=20)
    acknowledged: list[bytes] = []
    stop = threading.Event()

    def produce() -> None:
        number = 0
        while not stop.is_set():
            value = b"record-%06d" % number
            producer.send("moving", value, partition=0).get(timeout=60)
            acknowledged.append(value)
            number += 1

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        wait_until(lambda: len(acknowledged) >= 200, "records before the move", timeout_s=60, interval_s=0.1)
        assert admin.alter_partition_reassignments({TopicPartition("moving", 0): target}) == {
            TopicPartition("moving", 0): None}
        wait_until(lambda: not admin.list_partition_reassignments(), "the move completes", timeout_s=120,
                   interval_s=0.2)
        wait_until(lambda: replicas_and_isr(admin, "moving")[:2] == (target, sorted(target)),
                   "metadata shows the new replicas", timeout_s=30, interval_s=0.2)
    finally:
        stop.set()
        writer.join()
        producer.close()
    assert read_all(stack, "moving") == acknowledged
    wait_until(lambda: replica_dirs(stack, "moving") == set(target), "the old replica's log is deleted",
               timeout_s=30, interval_s=0.2)


def test_bad_targets_and_a_cancel_of_nothing_get_kafkas_errors(admin: KafkaAdminClient) -> None:
    create(admin, "refusals", 1)
    for target in ([1, 1], [7]):  # an empty list kafka-python refuses itself
        outcome = admin.alter_partition_reassignments({TopicPartition("refusals", 0): target})
        assert outcome == {TopicPartition("refusals", 0): InvalidReplicationAssignmentError}
    assert admin.alter_partition_reassignments({TopicPartition("refusals", 0): None}) == {
        TopicPartition("refusals", 0): NoReassignmentInProgressError}
    assert admin.alter_partition_reassignments({TopicPartition("no-such-topic", 0): [1]}) == {
        TopicPartition("no-such-topic", 0): UnknownTopicOrPartitionError}


def floe(capsys: pytest.CaptureFixture[str], stack: LocalStack, *args: str) -> tuple[int, str]:
    code = cli.main([*args, "--bootstrap-servers", stack.bootstrap_servers])
    return code, capsys.readouterr().out


def test_floe_reassign_executes_a_throttled_move_lists_it_cancels_it_and_clears_the_throttle(
        stack: LocalStack, admin: KafkaAdminClient, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    before = create(admin, "throttled", 1)
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all", linger_ms=5)
    for _ in range(300):
        producer.send("throttled", b"x" * 10_000, partition=0)
    producer.flush()
    producer.close()
    target = [b for b in (1, 2, 3) if b not in before][:1]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "throttled", "partition": 0,
                                                              "replicas": target}]}))
    # 3 MB at 100 kB/s: the move is still going when it is cancelled.
    code, out = floe(capsys, stack, "reassign", "--execute", "--reassignment-json-file", str(plan),
                     "--throttle", "100000")
    assert code == 0 and "Successfully started partition reassignment for throttled-0" in out
    assert f'"replicas": {json.dumps(before)}' in out  # the rollback plan
    code, out = floe(capsys, stack, "configs", "describe", "--entity-type", "brokers", "--entity-name", str(target[0]))
    assert "follower.replication.throttled.rate=100000 (DYNAMIC_BROKER_CONFIG)" in out
    code, out = floe(capsys, stack, "reassign", "--list")
    assert f"throttled-0: replicas: {target[0]},{before[0]}. adding: {target[0]}. removing: {before[0]}." in out
    code, out = floe(capsys, stack, "reassign", "--verify", "--reassignment-json-file", str(plan))
    assert code == 1 and "Reassignment of partition throttled-0 is still in progress." in out
    code, out = floe(capsys, stack, "reassign", "--cancel", "--reassignment-json-file", str(plan))
    assert code == 0 and "Successfully cancelled partition reassignments for: throttled-0" in out
    assert "Clearing broker-level throttles" in out
    assert admin.list_partition_reassignments() == {}
    wait_until(lambda: replicas_and_isr(admin, "throttled")[0] == before, "the original replicas are back",
               timeout_s=30, interval_s=0.2)
    code, out = floe(capsys, stack, "configs", "describe", "--entity-type", "brokers", "--entity-name", str(target[0]))
    assert "follower.replication.throttled.rate=9223372036854775807 (DEFAULT_CONFIG)" in out
    wait_until(lambda: replica_dirs(stack, "throttled") == set(before), "the cancelled replica's log is deleted",
               timeout_s=30, interval_s=0.2)
    assert len(read_all(stack, "throttled")) == 300


def with_client(stack: LocalStack, call: Callable[[FloeClient], Awaitable[T]]) -> T:
    """One call through Floe's client: after a broker is killed kafka-python keeps addressing it from its
    cached metadata, which is not what these tests are about."""

    async def run() -> T:
        async with FloeClient(stack.bootstrap_servers, request_timeout_s=30) as client:
            return await call(client)

    return asyncio.run(run())


def controller_of(stack: LocalStack) -> int:
    async def ask(client: FloeClient) -> int:
        await client.refresh_metadata([])
        return client.controller_id

    return with_client(stack, ask)


def state_of(stack: LocalStack, topic: str) -> tuple[list[int], list[int], int]:
    async def ask(client: FloeClient) -> tuple[list[int], list[int], int]:
        partition = (await client.describe_topic(topic)).partitions[0]
        return list(partition.replicas), sorted(partition.isr), partition.leader

    return with_client(stack, ask)


def moving(stack: LocalStack) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    return with_client(stack, lambda client: client.list_partition_reassignments())


def reassign(stack: LocalStack, topic: str, target: list[int]) -> None:
    outcome = with_client(stack, lambda client: client.alter_partition_reassignments({(topic, 0): target}))
    assert outcome == {(topic, 0): None}


def placed(stack: LocalStack, admin: KafkaAdminClient, topic: str, replicas: list[int]) -> None:
    """Create ``topic`` (two replicas) and move its replicas to ``replicas``, the first leading."""
    create(admin, topic, 2)
    reassign(stack, topic, replicas)
    wait_until(lambda: not moving(stack) and state_of(stack, topic)[:2] == (replicas, sorted(replicas)),
               "the replicas placed", timeout_s=120, interval_s=0.2)
    with_client(stack, lambda client: client.elect_leaders([(topic, 0)]))  # the first replica leads
    wait_until(lambda: state_of(stack, topic)[2] == replicas[0], "the first replica leads", timeout_s=60,
               interval_s=0.2)


def test_a_move_whose_target_broker_dies_completes_once_it_returns(
        stack: LocalStack, admin: KafkaAdminClient) -> None:
    # The target must not be the controller: its death would move the controller too (not this test).
    controller = controller_of(stack)
    before = [controller, next(b for b in (1, 2, 3) if b != controller)]
    placed(stack, admin, "interrupted", before)
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all")
    for number in range(500):
        producer.send("interrupted", b"v-%d" % number, partition=0)
    producer.flush()
    producer.close()
    (newcomer,) = [b for b in (1, 2, 3) if b not in before]
    stack.kill_broker(newcomer, signal.SIGKILL)
    target = [newcomer, before[0]]
    reassign(stack, "interrupted", target)
    assert moving(stack)[("interrupted", 0)][1] == [newcomer]
    assert len(state_of(stack, "interrupted")[1]) >= 2  # never fewer in-sync replicas than before
    stack.restart_broker(newcomer)
    wait_until(lambda: not moving(stack), "the move completes", timeout_s=120, interval_s=0.5)
    wait_until(lambda: state_of(stack, "interrupted")[:2] == (target, sorted(target)),
               "the new replicas in sync", timeout_s=30, interval_s=0.2)
    assert len(read_all(stack, "interrupted")) == 500


def test_a_move_whose_source_leader_dies_completes_from_the_new_leader(
        stack: LocalStack, admin: KafkaAdminClient) -> None:
    # The leaving leader must not be the controller: its death would move the controller too (not this test).
    stays = controller_of(stack)
    source = next(b for b in (1, 2, 3) if b != stays)
    arriving = next(b for b in (1, 2, 3) if b not in (source, stays))
    placed(stack, admin, "source-lost", [source, stays])
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all", retries=20)
    for number in range(2000):
        producer.send("source-lost", b"v-%d" % number + b"x" * 1000, partition=0)
    producer.flush()
    producer.close()
    stack.kill_broker(source, signal.SIGKILL)
    try:
        reassign(stack, "source-lost", [stays, arriving])
        wait_until(lambda: not moving(stack), "the move completes", timeout_s=120, interval_s=0.5)
        wait_until(lambda: state_of(stack, "source-lost") == ([stays, arriving], sorted([stays, arriving]), stays),
                   "the new replicas in sync, led by the one that stayed", timeout_s=30, interval_s=0.2)
        assert len(read_all(stack, "source-lost")) == 2000
    finally:
        stack.restart_broker(source)
