"""kafka-python consumer groups against a Floe broker: join, share partitions, commit, resume, reset policies."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import NoOffsetForPartitionError

from broker_core.metadata.store import MetadataStore
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

PARTITIONS = 4
GROUP_SETTINGS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500, "enable_auto_commit": False,
                  "max_poll_interval_ms": 30000}
# poll() returns as soon as records arrive, so a long timeout costs nothing. A short one does: a
# kafka-python 3.0 member whose JoinGroup/SyncGroup round finishes after its poll() gave up throws
# that round away and joins again on the next poll(), so on a slow machine it may never settle.
POLL_MS = 1000


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with running_stack(tmp_path_factory.mktemp("kafka-python-groups"), brokers=1,
                       overrides={"group.initial.rebalance.delay.ms": "0"}) as running:
        yield running


def create_topic(stack: Any, name: str, partitions: int = PARTITIONS) -> str:
    MetadataStore(stack.aws).create_topic(name, partitions, 1)
    consumer = KafkaConsumer(bootstrap_servers=stack.bootstrap_servers)
    try:
        wait_until(lambda: (consumer.partitions_for_topic(name) or set()) == set(range(partitions)),
                   f"topic {name} visible", 20, interval_s=0.2)
    finally:
        consumer.close()
    return name


def produce(stack: Any, topic: str, values: list[bytes], partitions: int = PARTITIONS) -> None:
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers)
    for i, value in enumerate(values):
        producer.send(topic, value=value, partition=i % partitions)
    producer.flush(timeout=30)
    producer.close()


def drain(consumers: list[KafkaConsumer], count: int, timeout_s: float = 30) -> dict[str, list[tuple[int, int, bytes]]]:
    """Poll every consumer until ``count`` records arrived in total; records by consumer client id."""
    got: dict[str, list[tuple[int, int, bytes]]] = {c.config["client_id"]: [] for c in consumers}
    deadline = time.monotonic() + timeout_s
    while sum(map(len, got.values())) < count and time.monotonic() < deadline:
        for consumer in consumers:
            for tp, records in consumer.poll(timeout_ms=POLL_MS).items():
                got[consumer.config["client_id"]] += [(tp.partition, r.offset, r.value) for r in records]
    return got


def settle(consumers: list[KafkaConsumer], timeout_s: float = 30) -> dict[str, set[TopicPartition]]:
    """Poll every member from its own thread, as applications run consumers, until each has a share
    and no two shares overlap; returns each member's assignment.

    One thread taking turns polling two members can rebalance forever with kafka-python 3.0: a
    member whose JoinGroup/SyncGroup round finished while the thread was polling the other member
    throws the round away and joins again, which sends the other member back to join too.
    """
    lock = threading.Lock()
    seen: dict[str, set[TopicPartition]] = {}
    stop = threading.Event()

    def run(consumer: KafkaConsumer) -> None:
        while not stop.is_set():
            consumer.poll(timeout_ms=POLL_MS)
            with lock:
                seen[consumer.config["client_id"]] = set(consumer.assignment())

    def settled() -> bool:
        with lock:
            shares = [seen.get(c.config["client_id"], set()) for c in consumers]
        return all(shares) and sum(map(len, shares)) == len(set().union(*shares))

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in consumers]
    for thread in threads:
        thread.start()
    try:
        wait_until(settled, lambda: f"the members settle on a shared assignment (they hold {seen})", timeout_s)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    with lock:
        return dict(seen)


def test_members_share_partitions_and_a_new_member_resumes_from_the_commits(stack) -> None:
    topic = create_topic(stack, "kp-share")
    produce(stack, topic, [f"first-{i}".encode() for i in range(40)])
    settings = {"bootstrap_servers": stack.bootstrap_servers, "group_id": "kp-share-group",
                "auto_offset_reset": "earliest", **GROUP_SETTINGS}
    one = KafkaConsumer(topic, client_id="one", **settings)
    got = drain([one], 40)
    assert sorted(v for _, _, v in got["one"]) == sorted(f"first-{i}".encode() for i in range(40))
    one.commit()

    two = KafkaConsumer(topic, client_id="two", **settings)
    assignments = settle([one, two])
    assert set().union(*assignments.values()) == {TopicPartition(topic, p) for p in range(PARTITIONS)}
    one.close()
    two.close()

    produce(stack, topic, [f"second-{i}".encode() for i in range(8)])
    three = KafkaConsumer(topic, client_id="three", **settings)
    got = drain([three], 8)
    assert sorted(v for _, _, v in got["three"]) == sorted(f"second-{i}".encode() for i in range(8))
    three.commit()
    committed = {tp.partition: three.committed(tp) for tp in three.assignment()}
    assert committed == {p: 12 for p in range(PARTITIONS)}
    three.close()


def test_auto_offset_reset_none_raises_for_a_group_without_offsets(stack) -> None:
    topic = create_topic(stack, "kp-none", partitions=1)
    produce(stack, topic, [b"x"], partitions=1)
    consumer = KafkaConsumer(topic, bootstrap_servers=stack.bootstrap_servers, group_id="kp-none-group",
                             auto_offset_reset="none", **GROUP_SETTINGS)
    with pytest.raises(NoOffsetForPartitionError):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            consumer.poll(timeout_ms=POLL_MS)
    consumer.close()


def test_auto_offset_reset_latest_skips_what_was_there_before(stack) -> None:
    topic = create_topic(stack, "kp-latest", partitions=1)
    produce(stack, topic, [b"old"], partitions=1)
    consumer = KafkaConsumer(topic, bootstrap_servers=stack.bootstrap_servers, group_id="kp-latest-group",
                             auto_offset_reset="latest", **GROUP_SETTINGS)
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        assert time.monotonic() < deadline
        assert consumer.poll(timeout_ms=POLL_MS) == {}
    # position() resolves the reset: from here on only new records can arrive.
    assert consumer.position(next(iter(consumer.assignment()))) == 1
    produce(stack, topic, [b"new"], partitions=1)
    got = drain([consumer], 1)
    assert [v for _, _, v in got[consumer.config["client_id"]]] == [b"new"]
    consumer.close()
