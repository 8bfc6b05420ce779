"""Killing a group's coordinator broker mid-consumption: another broker takes the lease, the group goes on.

Three brokers; the topic's partitions live on brokers 1 and 2 only (it is created before broker 3
starts), and broker 3 is made the group's coordinator by sending it the first FindCoordinator.
So when broker 3 is SIGKILLed, no partition becomes unavailable: what is tested is the group
alone. Its lease lapses on the other brokers' clocks, one of them takes it, loads the group
metadata and offsets from DynamoDB, and the members carry on. Every produced record is consumed
(at least once, no gaps), committed offsets never go backwards, and a consumer that joins the
group afterwards starts exactly at the committed offsets. The first test runs in the harness's
`FLOE_FAULTS_SECURITY` mode; the second speaks the raw protocol and stays PLAINTEXT.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker_core.client import BlockingConnection, ClientSecurity
from broker_core.groups.admin import GroupAdmin
from broker_core.groups.store import GroupStore
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from tests.broker_core.groups.raw_member import RawMember
from tests.faults.harness import SECURITY
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

# Runs in `make faults`, not in `make test`: two coordinator-broker kills and stops (about 30 s); groups/test_group_coordinator_protocol.py keeps group coordination in the default suite; the default suite must stay under CI's 20-minute budget.
pytestmark = pytest.mark.faults

PARTITIONS = 4
TOPIC = "payments"
GROUP = "payments-readers"
CONSUMER_SETTINGS = {
    "group.id": GROUP, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.auto.commit": False,
    "auto.offset.reset": "earliest", "partition.assignment.strategy": "cooperative-sticky",
}


class ConsumingMember(threading.Thread):
    """A group member polling in a thread, committing synchronously what it processed every 300 ms."""

    def __init__(self, client_config: dict[str, str], name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.consumer = Consumer({**client_config, "client.id": name, **CONSUMER_SETTINGS})
        self.records: list[tuple[int, int]] = []
        self.processed: dict[int, int] = {}
        self.stopping = threading.Event()

    def commit(self, partitions: list[int]) -> None:
        offsets = [TopicPartition(TOPIC, p, self.processed[p]) for p in partitions if p in self.processed]
        if offsets:
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            except Exception:  # refused while the coordinator moves or the group rebalances: retried later
                return

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = [tp.partition for tp in partitions]
        self.commit(revoked)
        for p in revoked:
            self.processed.pop(p, None)

    def run(self) -> None:
        self.consumer.subscribe([TOPIC], on_revoke=self.on_revoke, on_lost=self.on_revoke)
        last_commit = time.monotonic()
        while not self.stopping.is_set():
            message = self.consumer.poll(0.1)
            if message is not None and message.error() is None:
                self.records.append((message.partition(), message.offset()))
                self.processed[message.partition()] = message.offset() + 1
            if time.monotonic() - last_commit > 0.3:
                self.commit(sorted(self.processed))
                last_commit = time.monotonic()
        self.commit(sorted(self.processed))
        self.consumer.close()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    with running_stack(tmp_path, brokers=2, overrides={"group.initial.rebalance.delay.ms": "0"},
                       security=SECURITY) as running:
        MetadataStore(running.aws).create_topic(TOPIC, PARTITIONS, 1)
        running.start_broker(3)
        running.wait_for_broker(3)
        running.write_stack_file()
        yield running


def test_killing_the_coordinator_broker_moves_the_group_and_consumption_goes_on(stack) -> None:
    leaders = {p.leader for p in MetadataStore(stack.aws).snapshot().partitions[TOPIC]}
    assert leaders <= {1, 2}
    config = stack.client_config
    security = ClientSecurity.from_properties(config)
    probe = BlockingConnection("127.0.0.1", stack.processes[3].port, security=security)
    assert probe.request(ApiKey.FIND_COORDINATOR, {"key": GROUP, "key_type": 0}, 3).node_id == 3
    probe.close()

    producer = Producer({**config, "linger.ms": 5})
    sent = 0

    def produce(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            producer.produce(TOPIC, value=str(sent).encode(), partition=sent % PARTITIONS)
            sent += 1
        assert producer.flush(30) == 0

    produce(200)
    members = [ConsumingMember(config, f"reader-{i}") for i in (1, 2)]
    for member in members:
        member.start()
    admin = GroupAdmin(config["bootstrap.servers"], security=security)
    store = GroupStore(stack.aws)
    committed_samples: list[dict[int, int]] = []

    def sample_commits() -> dict[int, int]:
        stored = {p: c.offset for (t, p), c in store.load_offsets(GROUP).items() if t == TOPIC}
        committed_samples.append(stored)
        return stored

    try:
        wait_until(lambda: sum(len(m.records) for m in members) >= 200 and len(sample_commits()) == PARTITIONS,
                   "the group consumes and commits through broker 3", 60)
        assert store.read_group(GROUP).lease.holder == 3

        stack.kill_broker(3)
        for _ in range(30):  # keep producing while the coordinator is gone
            produce(10)
            sample_commits()
            time.sleep(0.1)

        new_holder = wait_until(lambda: (lambda g: g.lease.holder if g.lease.holder in (1, 2) else None)(
            store.read_group(GROUP)), "another broker takes the group's lease", 60)
        wait_until(lambda: admin.describe_group(GROUP).state == "Stable", "the group is stable again", 60)
        assert admin.describe_group(GROUP).coordinator == new_holder
        produce(100)
        ends = admin.log_end_offsets([(TOPIC, p) for p in range(PARTITIONS)])
        assert sum(ends.values()) == sent
        wait_until(lambda: sample_commits() == {p: ends[(TOPIC, p)] for p in range(PARTITIONS)},
                   "everything produced is committed", 60)
    finally:
        for member in members:
            member.stopping.set()
        for member in members:
            member.join(timeout=30)

    consumed: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
    for member in members:
        for partition, offset in member.records:
            consumed[partition].add(offset)
    for partition in range(PARTITIONS):
        assert consumed[partition] == set(range(ends[(TOPIC, partition)])), f"partition {partition} has gaps"
    for partition in range(PARTITIONS):
        history = [s[partition] for s in committed_samples if partition in s]
        assert history == sorted(history), f"committed offset of partition {partition} went backwards"

    # A consumer joining now starts exactly where the group committed.
    produce(8)
    late = Consumer({**config, "client.id": "late", **CONSUMER_SETTINGS})
    late.subscribe([TOPIC])
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    while len(seen) < 8 and time.monotonic() < deadline:
        message = late.poll(0.2)
        if message is not None and message.error() is None:
            seen.append((message.partition(), message.offset()))
    late.close()
    admin.close()
    assert sorted(seen) == sorted((p, ends[(TOPIC, p)] + i) for p in range(PARTITIONS) for i in range(2))


def test_a_broker_stopping_gracefully_hands_its_groups_over_at_once(tmp_path: Path) -> None:
    with running_stack(tmp_path, brokers=2) as two:
        MetadataStore(two.aws).create_topic(TOPIC, 1, 1)
        member = RawMember(two, GROUP)
        assert member.find_coordinator(via=1).node_id == 1
        wait_until(lambda: member.commit({(TOPIC, 0): 17}, generation=-1, member_id="") == {(TOPIC, 0): 0},
                   "the topic is known and the commit lands", 20)
        member.close()
        two.kill_broker(1, signal.SIGTERM)
        # The lease was released, not left to lapse: broker 2 takes it on the first request.
        assert member.find_coordinator(via=2).node_id == 2
        fetched = member.fetch([(TOPIC, 0)])
        assert fetched.topics[0].partitions[0].committed_offset == 17
        member.close()
