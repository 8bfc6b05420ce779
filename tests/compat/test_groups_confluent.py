"""confluent-kafka (librdkafka) consumer groups against a Floe broker.

Three members share a 6-partition topic with the cooperative-sticky assignor while records keep
arriving; a fourth joins; one is SIGKILLed. Each member is its own process (this file, run as a
script) that reports what it consumed and what it was assigned as JSON lines on stdout, and
commits synchronously after processing and before giving partitions up. The test checks the
broker's view (DescribeGroups through `GroupAdmin`: every partition owned by exactly one member),
samples committed offsets throughout (they never go backwards), and at the end that every
produced offset of every partition was consumed at least once.

Also here: auto.offset.reset earliest, latest and error (Kafka's "none") for a group without
committed offsets, and static membership surviving a member restart without a rebalance.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from broker_core.groups.admin import GroupAdmin
from broker_core.groups.store import GroupStore
from broker_core.metadata.store import MetadataStore
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
MEMBER_MODULE = ".".join(Path(__file__).resolve().relative_to(REPO_ROOT).with_suffix("").parts)
PARTITIONS = 6
SESSION_TIMEOUT_MS = 6000
CONSUMER_DEFAULTS = {
    "session.timeout.ms": SESSION_TIMEOUT_MS,
    "heartbeat.interval.ms": 500,
    "partition.assignment.strategy": "cooperative-sticky",
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "topic.metadata.refresh.interval.ms": 1000,
}


# the member process ------------------------------------------------------------------------------


def run_member(bootstrap: str, group: str, topic: str, name: str) -> None:
    """Consume until SIGTERM, printing every record and assignment change as a JSON line."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    processed: dict[int, int] = {}  # partition -> next offset to commit

    def emit(event: dict[str, Any]) -> None:
        print(json.dumps({"member": name, **event}), flush=True)

    def commit(partitions: list[int]) -> None:
        offsets = [TopicPartition(topic, p, processed[p]) for p in partitions if p in processed]
        if offsets:
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                emit({"event": "commit", "offsets": {tp.partition: tp.offset for tp in offsets}})
            except Exception as exc:  # a commit refused during a rebalance is retried after it
                emit({"event": "commit-failed", "error": str(exc)})

    def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        emit({"event": "assign", "partitions": sorted(tp.partition for tp in partitions)})

    def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = sorted(tp.partition for tp in partitions)
        commit(revoked)
        for p in revoked:
            processed.pop(p, None)
        emit({"event": "revoke", "partitions": revoked})

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name, **CONSUMER_DEFAULTS})
    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    last_commit = time.monotonic()
    while not stopping.is_set():
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            processed[message.partition()] = message.offset() + 1
            emit({"event": "record", "partition": message.partition(), "offset": message.offset()})
        if time.monotonic() - last_commit > 0.3:
            commit(sorted(processed))
            last_commit = time.monotonic()
    commit(sorted(processed))
    consumer.close()
    emit({"event": "closed"})


# the test side -----------------------------------------------------------------------------------


class MemberProcess:
    """A consumer-group member in its own process; its JSON lines are collected by a reader thread."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        # Run as a module from the repository root, so the member imports this file's package as the tests do.
        self.process = subprocess.Popen(
            [sys.executable, "-m", MEMBER_MODULE, "--bootstrap", bootstrap, "--group", group, "--topic", topic,
             "--name", name],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.append(json.loads(line))

    def consumed(self) -> list[tuple[int, int]]:
        return [(e["partition"], e["offset"]) for e in list(self.events) if e["event"] == "record"]

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)


class OffsetSampler(threading.Thread):
    """Reads the group's committed offsets every 50 ms (as a non-member would) and keeps each sample."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        self.partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        self.samples: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                committed = self.consumer.committed(self.partitions, timeout=5)
            except Exception:  # the coordinator may be rebalancing; sample again
                committed = []
            for tp in committed:
                if tp.error is None and tp.offset >= 0:
                    self.samples[tp.partition].append(tp.offset)
            self.stopping.wait(0.05)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)
        self.consumer.close()


class BackgroundProducer(threading.Thread):
    """Produces numbered records round-robin over the partitions until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic = topic
        self.sent = 0
        self.stopping = threading.Event()

    def produce(self, count: int) -> None:
        for _ in range(count):
            self.producer.produce(self.topic, value=str(self.sent).encode(), partition=self.sent % PARTITIONS)
            self.sent += 1
        assert self.producer.flush(30) == 0

    def run(self) -> None:
        while not self.stopping.is_set():
            self.produce(12)
            self.stopping.wait(0.1)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)


def settled_ownership(admin: Any, group: str, members: int) -> dict[int, str] | None:
    """partition -> owning client id, if the group is Stable with ``members`` members owning every
    partition exactly once; None otherwise."""
    described = admin.describe_group(group)
    if described.state != "Stable" or len(described.members) != members:
        return None
    owners: dict[int, list[str]] = {}
    for member in described.members:
        for _, partition in member.assignment:
            owners.setdefault(partition, []).append(member.client_id)
    if sorted(owners) != list(range(PARTITIONS)):
        return None
    assert all(len(o) == 1 for o in owners.values()), f"a partition has two owners: {owners}"
    return {p: o[0] for p, o in owners.items()}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Any]:
    with running_stack(tmp_path, brokers=1, overrides={"group.initial.rebalance.delay.ms": "0"}) as stack:
        store = MetadataStore(stack.aws)

        def create_topic(name: str, partitions: int = PARTITIONS) -> str:
            store.create_topic(name, partitions, 1)
            probe = Producer({"bootstrap.servers": stack.bootstrap_servers})
            wait_until(lambda: len(probe.list_topics(name, timeout=5).topics[name].partitions) == partitions
                       and probe.list_topics(name, timeout=5).topics[name].error is None, f"topic {name}", 20)
            return name

        stack.create_topic = create_topic
        yield stack


# In `make faults`, not `make test`: it SIGKILLs a member and waits out session timeouts (about 17 s on CI); the module's other group tests stay in the default suite.
@pytest.mark.faults
def test_three_then_four_members_share_six_partitions_and_survive_a_sigkill(cluster) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = cluster.create_topic("orders")
    group = f"orders-{uuid.uuid4().hex[:6]}"
    producer = BackgroundProducer(bootstrap, topic)
    producer.produce(600)
    members = [MemberProcess(bootstrap, group, topic, f"member-{i}") for i in range(1, 4)]
    sampler = OffsetSampler(bootstrap, group, topic)
    admin = GroupAdmin(bootstrap)
    try:
        three = wait_until(lambda: settled_ownership(admin, group, 3), "3 members own the 6 partitions", 60)
        assert set(three.values()) == {"member-1", "member-2", "member-3"}
        sampler.start()
        producer.start()

        members.append(MemberProcess(bootstrap, group, topic, "member-4"))
        four = wait_until(lambda: settled_ownership(admin, group, 4), "a 4th member gets partitions", 60)
        assert set(four.values()) == {"member-1", "member-2", "member-3", "member-4"}

        victim = members[1]
        lost = sorted(p for p, owner in four.items() if owner == victim.name)
        victim.kill()
        killed_at = time.monotonic()
        after = wait_until(lambda: settled_ownership(admin, group, 3), "the killed member's partitions move",
                           SESSION_TIMEOUT_MS / 1000 + 20)
        moved_after_s = time.monotonic() - killed_at
        assert victim.name not in after.values()
        assert {after[p] for p in lost} <= {"member-1", "member-3", "member-4"}
        print(f"partitions {lost} of the killed member moved after {moved_after_s:.1f}s "
              f"(session timeout {SESSION_TIMEOUT_MS / 1000:.0f}s)")

        producer.stop()
        ends = admin.log_end_offsets([(topic, p) for p in range(PARTITIONS)])
        assert sum(ends.values()) == producer.sent
        wait_until(lambda: all(p.lag == 0 for p in admin.describe_group(group).partitions)
                   and len(admin.describe_group(group).partitions) == PARTITIONS, "the group catches up", 60)
    finally:
        producer.stopping.set()
        for member in members:
            member.stop()
        sampler.stop()
        admin.close()

    consumed: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
    for member in members:
        for partition, offset in member.consumed():
            consumed[partition].add(offset)
    for partition in range(PARTITIONS):
        assert consumed[partition] == set(range(ends[(topic, partition)])), f"partition {partition} has gaps"
    for partition, samples in sampler.samples.items():
        assert samples, f"no committed offset was ever read for partition {partition}"
        assert samples == sorted(samples), f"committed offset of partition {partition} went backwards"
        assert samples[-1] == ends[(topic, partition)]


def _consume(consumer: Consumer, count: int, timeout_s: float = 30) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value())
    return values


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def _consumer(bootstrap: str, group: str, **overrides: Any) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, **CONSUMER_DEFAULTS, **overrides})


def test_auto_offset_reset_decides_where_a_group_without_offsets_starts(cluster) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = cluster.create_topic("reset", partitions=1)
    _produce(bootstrap, topic, [b"old-1", b"old-2"])

    earliest = _consumer(bootstrap, "reset-earliest", **{"auto.offset.reset": "earliest"})
    earliest.subscribe([topic])
    assert _consume(earliest, 2) == [b"old-1", b"old-2"]
    earliest.close()

    latest = _consumer(bootstrap, "reset-latest", **{"auto.offset.reset": "latest"})
    latest.subscribe([topic])
    # Keep producing until the consumer reads something: whatever it reads must be new.
    producer = Producer({"bootstrap.servers": bootstrap})
    received: list[bytes] = []
    deadline = time.monotonic() + 30
    while not received and time.monotonic() < deadline:
        producer.produce(topic, value=b"new")
        producer.flush(10)
        received = _consume(latest, 1, timeout_s=0.5)
    assert received == [b"new"]
    latest.close()

    strict = _consumer(bootstrap, "reset-none", **{"auto.offset.reset": "error"})
    strict.subscribe([topic])

    def reset_error() -> bool:
        message = strict.poll(0.2)
        return message is not None and message.error() is not None and \
            message.error().code() == KafkaError._AUTO_OFFSET_RESET

    wait_until(reset_error, "auto.offset.reset=error reports the missing offset", 30)
    strict.close()


def test_a_rejoining_consumer_resumes_from_the_committed_offset(cluster) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = cluster.create_topic("resume", partitions=2)
    _produce(bootstrap, topic, [f"v{i}".encode() for i in range(10)])
    first = _consumer(bootstrap, "resume-group")
    first.subscribe([topic])
    seen = _consume(first, 10)
    assert sorted(seen) == sorted(f"v{i}".encode() for i in range(10))
    first.commit(asynchronous=False)
    first.close()
    _produce(bootstrap, topic, [b"after-1", b"after-2"])
    second = _consumer(bootstrap, "resume-group")
    second.subscribe([topic])
    assert sorted(_consume(second, 2)) == [b"after-1", b"after-2"]
    assert second.poll(1.0) is None
    second.close()


def test_a_static_member_restarting_within_its_session_keeps_its_partitions_without_a_rebalance(cluster) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = cluster.create_topic("static", partitions=4)
    group = "static-group"
    store = GroupStore(cluster.aws)
    stays = _consumer(bootstrap, group, **{"group.instance.id": "stays"})
    restarts = _consumer(bootstrap, group, **{"group.instance.id": "restarts"})
    for consumer in (stays, restarts):
        consumer.subscribe([topic])

    def both_assigned() -> bool:
        for consumer in (stays, restarts):
            consumer.poll(0.1)
        stored = store.read_group(group)
        return bool(stays.assignment() and restarts.assignment() and stored and stored.record.state == "Stable"
                    and len(stored.record.members) == 2)

    wait_until(both_assigned, "two static members assigned", 60)
    before = store.read_group(group)
    kept = sorted(tp.partition for tp in restarts.assignment())
    # librdkafka sends no LeaveGroup for a static member: the coordinator keeps its place.
    restarts.close()
    again = _consumer(bootstrap, group, **{"group.instance.id": "restarts"})
    again.subscribe([topic])
    wait_until(lambda: again.poll(0.1) is None and again.assignment(), "restarted member assigned", 30)
    assert sorted(tp.partition for tp in again.assignment()) == kept
    after = store.read_group(group)
    assert after.record.generation == before.record.generation
    assert {m.group_instance_id for m in after.record.members} == {"stays", "restarts"}
    stays.close()
    again.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="one consumer-group member (run by the tests)")
    for option in ("--bootstrap", "--group", "--topic", "--name"):
        parser.add_argument(option, required=True)
    options = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    run_member(options.bootstrap, options.group, options.topic, options.name)
