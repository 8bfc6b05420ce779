"""KIP-392 and fetch at scale on a three-broker stack in three racks, with real clients.

The brokers run the rack-aware replica selector and two replica fetchers per leader, so every
replica here is filled by fetchers in KIP-227 sessions. librdkafka with ``client.rack`` set to one
broker's rack reads every partition from that broker (its statistics name the broker each partition
is fetched from), follower or not, and gets every record; a consumer without a rack stays on the
leaders. Its own multi-broker stack, so it runs with `make faults`.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from broker_core.client import BrokerConnection
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.messages import build_entity, request_class
from broker_core.server.replica_selector import RACK_AWARE_SELECTOR
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

pytestmark = pytest.mark.faults

TOPIC = "rack-aware"
PARTITIONS = 6
RECORDS_PER_PARTITION = 50
TIMEOUT_S = 60
RACKS = {1: "az-a", 2: "az-b", 3: "az-c"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    overrides = {"replica.selector.class": RACK_AWARE_SELECTOR, "num.replica.fetchers": "2",
                 "min.insync.replicas": "2"}
    with running_stack(Path(tmp_path_factory.mktemp("rack-aware")), brokers=3, overrides=overrides,
                       broker_overrides={b: {"broker.rack": rack} for b, rack in RACKS.items()}) as running:
        yield running


@pytest.fixture(scope="module")
def produced(stack: LocalStack) -> dict[int, list[bytes]]:
    """Records written acks=all to every partition of an RF 3 topic, once every replica holds them."""
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)])[TOPIC].result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all", "linger.ms": 5})
    values = {p: [f"{p}-{i}".encode() for i in range(RECORDS_PER_PARTITION)] for p in range(PARTITIONS)}
    failures = []
    for p, records in values.items():
        for value in records:
            producer.produce(TOPIC, value, partition=p, on_delivery=lambda err, _m: err and failures.append(err))
    assert producer.flush(TIMEOUT_S) == 0 and not failures
    store = MetadataStore(stack.aws)
    wait_until(lambda: all(len(s.isr) == 3 for s in store.get_partitions(TOPIC)), "every replica in sync", TIMEOUT_S)
    return values


def consume_all(stack: LocalStack, rack: str | None, expected: int) -> tuple[dict[int, list[bytes]], dict[int, int]]:
    """(values per partition, the broker each partition was last fetched from per librdkafka's statistics)."""
    stats: dict[int, int] = {}

    def on_stats(text: str) -> None:
        for number, partition in json.loads(text)["topics"].get(TOPIC, {}).get("partitions", {}).items():
            if int(number) >= 0 and partition.get("broker", -1) >= 0:
                stats[int(number)] = partition["broker"]

    settings = {"bootstrap.servers": stack.bootstrap_servers, "group.id": "unused", "enable.auto.commit": False,
                "statistics.interval.ms": 200, "stats_cb": on_stats, "fetch.wait.max.ms": 100}
    if rack is not None:
        settings["client.rack"] = rack
    consumer = Consumer(settings)
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    values: dict[int, list[bytes]] = {}
    received = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline and (received < expected or len(stats) < PARTITIONS):
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            values.setdefault(message.partition(), []).append(message.value())
            received += 1
        # A few more statistics rounds, so that each partition's fetch broker is the settled one.
        settle = time.monotonic() + 1.0
        while time.monotonic() < settle:
            consumer.poll(0.2)
    finally:
        consumer.close()
    return values, stats


def test_a_consumer_with_a_rack_reads_every_partition_from_the_broker_in_its_rack(
        stack: LocalStack, produced: dict[int, list[bytes]]) -> None:
    leaders = {s.partition: s.leader for s in MetadataStore(stack.aws).get_partitions(TOPIC)}
    assert set(leaders.values()) != {2}, "every partition led by broker 2: nothing would be read from a follower"
    values, fetched_from = consume_all(stack, RACKS[2], PARTITIONS * RECORDS_PER_PARTITION)
    assert values == produced
    assert fetched_from == {p: 2 for p in range(PARTITIONS)}


def test_a_consumer_without_a_rack_reads_from_the_leaders(stack: LocalStack, produced: dict[int, list[bytes]]) -> None:
    leaders = {s.partition: s.leader for s in MetadataStore(stack.aws).get_partitions(TOPIC)}
    values, fetched_from = consume_all(stack, None, PARTITIONS * RECORDS_PER_PARTITION)
    assert values == produced
    assert fetched_from == leaders


def test_a_broker_that_does_not_host_a_partition_names_its_leader_in_fetch_v16(stack: LocalStack) -> None:
    """KIP-951: NOT_LEADER_OR_FOLLOWER comes with the current leader and its endpoint."""
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    admin.create_topics([NewTopic("single-replica", num_partitions=1, replication_factor=1)])[
        "single-replica"].result(TIMEOUT_S)
    store = MetadataStore(stack.aws)
    (state,) = wait_until(lambda: [s for s in store.get_partitions("single-replica") if s.leader >= 0],
                          "a leader", TIMEOUT_S)
    topic_id = uuid.UUID(store.get_topic("single-replica").topic_id)
    elsewhere = next(b for b in RACKS if b != state.leader)
    request = build_entity(request_class(ApiKey.FETCH, 16), {
        "max_wait": datetime.timedelta(0), "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic_id": topic_id, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
    })

    async def ask() -> Any:
        connection = BrokerConnection(stack.host, stack.processes[elsewhere].port)
        await connection.connect()
        try:
            # The broker may not have read the new topic yet: asked by an id it does not know, it catches up.
            return await connection.send(ApiKey.FETCH, request)
        finally:
            await connection.close()

    response = asyncio.run(ask())
    (partition,) = response.responses[0].partitions
    assert partition.error_code == ErrorCode.not_leader_or_follower
    assert (partition.current_leader.leader_id, partition.current_leader.leader_epoch) == (
        state.leader, state.leader_epoch)
    assert [(n.node_id, n.port, n.rack) for n in response.node_endpoints] == [
        (state.leader, stack.processes[state.leader].port, RACKS[state.leader])]
