"""Followers pick up a leader change by themselves, without the regular metadata poll or a long poll.

In the first test the brokers poll the metadata version only every ten minutes, so an acknowledged
acks=all write after the leader's death shows that both survivors (the new leader and the follower
that must fetch from it) learned of the election because their fetchers lost the old leader. In the
second a follower's long poll lasts up to ten minutes, so an acknowledged write to a partition that
joins its fetcher shows that the long poll already out did not hold the newcomer back.
"""

from __future__ import annotations

import asyncio
import datetime
import signal
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from broker_core.client import BrokerConnection, ClientError
from broker_core.local_stack import LocalStack
from broker_core.metadata.controller import ControllerLease
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.messages import build_entity, request_class
from broker_core.records import SimpleRecord, build_batch
from tests.faults.harness import produce_directly
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

# Runs in `make faults`, not in `make test`: it kills leaders of a three-broker stack (about 45 s on CI); the default suite must stay under CI's 20-minute budget.
pytestmark = pytest.mark.faults

PATIENCE_S = 60.0


def produce_acks_all(stack: LocalStack, broker_id: int, topic: str, partition: int, value: bytes,
                     timeout_ms: int) -> ErrorCode:
    """One acks=all Produce of one record sent to exactly this broker; its error code."""
    try:
        code, _ = produce_directly(stack.host, stack.processes[broker_id].port, topic, partition, value,
                                   timeout_ms=timeout_ms)
    except ClientError:
        return ErrorCode.network_exception
    return code


def ask_about_topic(stack: LocalStack, broker_id: int, topic: str) -> None:
    """A Metadata request naming the topic: a broker that has not heard of it reads the metadata."""
    async def ask() -> None:
        connection = BrokerConnection(stack.host, stack.processes[broker_id].port)
        await connection.connect()
        try:
            await connection.send(ApiKey.METADATA, {
                "topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
            })
        finally:
            await connection.close()

    asyncio.run(ask())


def in_sync(store: MetadataStore, topic: str) -> bool:
    return all(p.leader >= 0 and len(p.isr) == len(p.replicas) for p in store.get_partitions(topic))


def test_followers_find_the_new_leader_after_a_leader_dies_without_a_metadata_poll(tmp_path) -> None:
    # Nor does a leader shrink an ISR (a lost race to the controller would make it re-read metadata).
    overrides = {"metadata.poll.interval.ms": "600000", "replica.lag.time.max.ms": "600000"}
    with running_stack(tmp_path, brokers=3, overrides=overrides) as stack:
        store = MetadataStore(stack.aws)
        topic = "leader-dies"
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[topic].result(timeout=60)
        for broker_id in stack.processes:
            ask_about_topic(stack, broker_id, topic)
        wait_until(lambda: in_sync(store, topic), "every replica in sync", PATIENCE_S)
        controller = ControllerLease(store).current().holder
        doomed = next(p for p in store.get_partitions(topic) if p.leader != controller)
        assert produce_acks_all(stack, doomed.leader, topic, doomed.partition, b"before", 10_000) == ErrorCode.none

        stack.kill_broker(doomed.leader, signal.SIGKILL)
        wait_until(lambda: store.get_partition(topic, doomed.partition).leader not in (-1, doomed.leader),
                   "a new leader elected", PATIENCE_S)
        new_leader = store.get_partition(topic, doomed.partition).leader

        outcomes: list[ErrorCode] = []

        def acknowledged() -> bool:
            outcomes.append(produce_acks_all(stack, new_leader, topic, doomed.partition, b"after", 5_000))
            return outcomes[-1] == ErrorCode.none

        wait_until(acknowledged, "an acks=all write acknowledged by the new leader", PATIENCE_S)
        after = store.get_partition(topic, doomed.partition)
        assert after.leader == new_leader and after.leader_epoch > doomed.leader_epoch
        assert doomed.leader not in after.isr

        # KIP-951: the other survivor, a follower, points a producer at the new leader at once.
        follower = next(b for b in stack.processes if b not in (doomed.leader, new_leader))
        answer, endpoints = produce_v10(stack, follower, topic, doomed.partition)
        assert answer.error_code == ErrorCode.not_leader_or_follower
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (new_leader, after.leader_epoch)
        assert [(e.node_id, e.host, e.port) for e in endpoints] == [
            (new_leader, stack.host, stack.processes[new_leader].port)]


def produce_v10(stack: LocalStack, broker_id: int, topic: str, partition: int) -> tuple[Any, tuple[Any, ...]]:
    """One acks=all Produce v10 to this broker: its partition answer and the response's node endpoints."""
    async def produce() -> Any:
        connection = BrokerConnection(stack.host, stack.processes[broker_id].port)
        await connection.connect()
        try:
            request = build_entity(request_class(ApiKey.PRODUCE, 10), {
                "transactional_id": None, "acks": -1, "timeout": datetime.timedelta(seconds=5),
                "topic_data": [{"name": topic, "partition_data": [
                    {"index": partition, "records": build_batch([SimpleRecord(value=b"moved")])}]}]})
            return await connection.send(ApiKey.PRODUCE, request)
        finally:
            await connection.close()

    response = asyncio.run(produce())
    return response.responses[0].partition_responses[0], response.node_endpoints


def test_a_partition_joining_a_fetcher_is_replicated_while_a_long_poll_is_out(tmp_path) -> None:
    overrides = {"replica.fetch.wait.max.ms": "600000"}
    with running_stack(tmp_path, brokers=2, overrides=overrides) as stack:
        store = MetadataStore(stack.aws)
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        admin.create_topics([NewTopic("idle", 2, 2)])["idle"].result(timeout=60)
        wait_until(lambda: in_sync(store, "idle"), "the idle topic in sync", PATIENCE_S)
        # Both followers now hold a long poll on idle partitions, which nobody writes to.
        admin.create_topics([NewTopic("joining", 2, 2, config={"min.insync.replicas": "2"})])["joining"].result(
            timeout=60)
        wait_until(lambda: in_sync(store, "joining"), "the joining topic in sync", PATIENCE_S)
        for state in store.get_partitions("joining"):
            assert produce_acks_all(stack, state.leader, "joining", state.partition, b"x", 20_000) == ErrorCode.none
