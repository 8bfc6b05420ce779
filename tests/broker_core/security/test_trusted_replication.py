"""Trusted replication on a real `--security sasl_ssl` stack with an authorizer: the brokers authenticate
to each other as User:broker-1 and User:broker-2 (super users) and register as such; a client that
authenticates as User:alice, even with ClusterAction, cannot pose as broker 2's follower, nor write as
(or fence) the admin's idempotent producer. A broker added to the running stack is trusted by the
others at once (its principal is in no running broker's super.users) and obeys the admin.
"""

from __future__ import annotations

import asyncio
import datetime
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from broker_core.cli import main
from broker_core.client import BrokerConnection
from broker_core.client.security import ClientSecurity
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.messages import build_entity, request_class
from broker_core.records import SimpleRecord, build_batch, parse_header
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC = "replicated"
ALICE_PASSWORD = "alice-secret-password"
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    # A follower stopped for a few seconds stays registered and in the ISR.
    overrides = {"authorizer.class.name": STANDARD, "broker.session.timeout.ms": "30000"}
    with running_stack(tmp_path_factory.mktemp("trusted-replication"), brokers=2, overrides=overrides,
                       security="sasl_ssl") as stack:
        admin = AdminClient(stack.client_config)
        admin.create_topics([NewTopic(TOPIC, 1, 2)])[TOPIC].result(timeout=TIMEOUT_S)
        assert main(["users", "alter", "--stack", str(stack.directory), "--user", "alice",
                     "--add-config", f"SCRAM-SHA-512=[password={ALICE_PASSWORD}]"]) == 0
        # The CLI reads the stack's client_config: it speaks as the admin super user.
        assert main(["acls", "add", "--stack", str(stack.directory), "--allow-principal", "User:alice",
                     "--operation", "ClusterAction", "--cluster"]) == 0
        assert main(["acls", "add", "--stack", str(stack.directory), "--allow-principal", "User:alice",
                     "--operation", "All", "--topic", "*"]) == 0
        yield stack


def as_alice(stack: LocalStack, broker_id: int, api_key: ApiKey, version: int, fields: dict[str, Any]) -> Any:
    security = ClientSecurity.from_properties({**stack.client_config, "sasl.username": "alice",
                                               "sasl.password": ALICE_PASSWORD})

    async def call() -> Any:
        connection = BrokerConnection(stack.host, stack.processes[broker_id].port, security=security)
        await connection.connect()
        try:
            return await connection.send(api_key, build_entity(request_class(api_key, version), fields))
        finally:
            await connection.close()

    return asyncio.run(call())


def forged_fetch(stack: LocalStack, leader: int, follower: int, offset: int) -> Any:
    return as_alice(stack, leader, ApiKey.FETCH, 12, {
        "replica_id": follower, "max_wait": datetime.timedelta(0), "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                                    "last_fetched_epoch": -1, "log_start_offset": -1,
                                                    "partition_max_bytes": 1 << 20}]}]})


def high_watermark(stack: LocalStack, leader: int) -> int:
    response = as_alice(stack, leader, ApiKey.LIST_OFFSETS, 7, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    return response.topics[0].partitions[0].offset


def produce(stack: LocalStack, value: bytes, acks: int) -> None:
    delivered: list[Any] = []
    producer = Producer({**stack.client_config, "acks": acks})
    producer.produce(TOPIC, value, partition=0, on_delivery=lambda err, _msg: delivered.append(err))
    producer.flush(TIMEOUT_S)
    assert delivered == [None]


def test_the_brokers_replicate_as_their_own_principals(stack: LocalStack) -> None:
    assert {b.broker_id: b.principal for b in MetadataStore(stack.aws).list_brokers()} == {
        1: "User:broker-1", 2: "User:broker-2"}
    produce(stack, b"replicated by authenticated followers", acks=-1)


def test_a_client_with_cluster_action_cannot_fetch_as_another_brokers_follower(stack: LocalStack) -> None:
    leader = MetadataStore(stack.aws).get_partition(TOPIC, 0).leader
    follower = next(b for b in stack.processes if b != leader)
    produce(stack, b"caught up", acks=-1)  # acks=all: the high watermark is now the log end
    stack.kill_broker(follower, signal.SIGSTOP)
    try:
        produce(stack, b"ahead of the follower", acks=1)
        stalled = high_watermark(stack, leader)
        mismatch = (f"principal User:alice from 127.0.0.1 sent a replica request as broker {follower}, which "
                    f"registered as User:broker-{follower}")

        def refused_as_the_wrong_principal() -> bool:
            forged = forged_fetch(stack, leader, follower, stalled + 1)
            assert forged.error_code == ErrorCode.cluster_authorization_failed
            assert forged.responses[0].partitions[0].error_code == ErrorCode.cluster_authorization_failed
            assert high_watermark(stack, leader) == stalled
            # alice has ClusterAction (once the leader applied the ACLs), so the leader's log names the
            # reason: she is not the principal broker the follower registered as.
            return mismatch in stack.processes[leader].log_path.read_text()

        wait_until(refused_as_the_wrong_principal, "the forged fetch is refused for its principal", TIMEOUT_S)
    finally:
        stack.kill_broker(follower, signal.SIGCONT)
    wait_until(lambda: high_watermark(stack, leader) == stalled + 1, "the real follower catches up", TIMEOUT_S)


def test_a_client_cannot_write_as_or_fence_another_principals_idempotent_producer(stack: LocalStack) -> None:
    leader = MetadataStore(stack.aws).get_partition(TOPIC, 0).leader
    producer = Producer({**stack.client_config, "enable.idempotence": True})
    delivered: list[Any] = []
    producer.produce(TOPIC, b"admin's", partition=0, on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    producer.flush(TIMEOUT_S)
    [(error, offset)] = delivered
    assert error is None
    fetched = as_alice(stack, leader, ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait": datetime.timedelta(0), "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                                    "last_fetched_epoch": -1, "log_start_offset": -1,
                                                    "partition_max_bytes": 1 << 20}]}]})
    admins = parse_header(bytes(fetched.responses[0].partitions[0].records))
    assert admins.producer_id >= 0
    # alice read admin's producer id from the log and writes as it, one epoch up, which would fence admin.
    forged = build_batch([SimpleRecord(value=b"alice's")], producer_id=admins.producer_id,
                         producer_epoch=admins.producer_epoch + 1, base_sequence=0)
    answer = as_alice(stack, leader, ApiKey.PRODUCE, 9, {
        "transactional_id": None, "acks": -1, "timeout": datetime.timedelta(seconds=10),
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": forged}]}]})
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.invalid_producer_id_mapping
    # admin's producer is not fenced: its next record is delivered at its own epoch.
    delivered.clear()
    producer.produce(TOPIC, b"admin's again", partition=0, on_delivery=lambda err, msg: delivered.append((err, 0)))
    producer.flush(TIMEOUT_S)
    assert delivered == [(None, 0)]


@pytest.mark.faults  # starts a third broker process: beyond the default suite's time budget
def test_a_broker_added_to_the_running_stack_replicates_at_once_and_obeys_the_admin(stack: LocalStack) -> None:
    # Brokers 1 and 2 were started with super.users naming broker-1 and broker-2 only; broker 3 is
    # trusted from its registration on (floe.super.users.include.brokers), without restarting them.
    stack.start_broker(3)
    stack.wait_for_broker(3)
    stack.write_stack_file()
    # The admin, through the new broker alone, creates a topic replicated on all three brokers.
    admin = AdminClient({**stack.client_config, "bootstrap.servers": f"{stack.host}:{stack.processes[3].port}"})
    admin.create_topics([NewTopic("grown", 3, 3)])["grown"].result(timeout=TIMEOUT_S)
    partitions = MetadataStore(stack.aws).snapshot().partitions["grown"]
    followed = [p.partition for p in partitions if p.leader != 3]
    assert followed  # broker 3 follows a leader that was running before it
    producer = Producer({**stack.client_config, "acks": -1})
    values = {partition: f"to broker 3 as follower of partition {partition}".encode() for partition in followed}
    for partition, value in values.items():
        producer.produce("grown", value, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0

    def replicated_to_broker_3() -> bool:
        return all(any(values[p] in log.read_bytes() for log in (stack.processes[3].data_dir / f"grown-{p}").glob("*.log"))
                   for p in followed)

    wait_until(replicated_to_broker_3, "broker 3's replicas hold the records", TIMEOUT_S)
    for leader in (1, 2):
        refusals = [line for line in stack.processes[leader].log_path.read_text().splitlines()
                    if "denied: principal User:broker-3" in line]
        assert refusals == []
