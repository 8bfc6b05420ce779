"""Authorization decisions on a real two-broker stack with an authorizer and no super user, seen through
confluent-kafka, kafka-python and raw protocol requests.

Every client is User:ANONYMOUS (PLAINTEXT listeners). Each test states the ACLs it needs with
`grant`, which replaces the stored ACLs the way an operator with access to the acls table would
and waits until both brokers decide by them (a probe topic becomes describable). The brokers always
keep CLUSTER_ACTION for ANONYMOUS at 127.0.0.1, where they fetch from each other; raw requests from
127.0.0.2 are a client on another address that has no CLUSTER_ACTION.
"""

from __future__ import annotations

import datetime
import itertools
import signal
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kio.schema.errors import ErrorCode

from broker_core.local_stack import LocalStack
from broker_core.metadata.state import BrokerState
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import decode_response, encode_request
from broker_core.protocol.messages import build_entity, request_class
from broker_core.records import SimpleRecord, build_batch
from broker_core.security.acl_store import AclStore
from broker_core.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANONYMOUS = "User:ANONYMOUS"
TIMEOUT_S = 30
Op = AclOperation
TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
_probes = itertools.count()


def acl(resource_type: ResourceType, name: str, operation: AclOperation, *, deny: bool = False,
        prefixed: bool = False, host: str = "*", principal: str = ANONYMOUS) -> AclBinding:
    return AclBinding(resource_type, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL, principal, host,
                      operation, AclPermission.DENY if deny else AclPermission.ALLOW)


BROKERS_REPLICATE = acl(CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION, host="127.0.0.1")
OPERATOR = [acl(CLUSTER, "kafka-cluster", Op.CREATE), acl(TOPIC, "*", Op.ALL), acl(GROUP, "*", Op.ALL),
            acl(CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    # A follower stopped for a few seconds stays registered and in the ISR (trusted replication test).
    overrides = {"authorizer.class.name": STANDARD, "broker.session.timeout.ms": "30000"}
    with running_stack(tmp_path_factory.mktemp("authorization"), brokers=2, overrides=overrides) as stack:
        grant(stack, *OPERATOR)
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        topics = [NewTopic("orders", 1, 2), NewTopic("payments", 1, 2), NewTopic("secret", 1, 1)]
        for future in admin.create_topics(topics).values():
            future.result(timeout=TIMEOUT_S)
        yield stack


def grant(stack: LocalStack, *bindings: AclBinding) -> None:
    """Make ``bindings`` (and the brokers' own CLUSTER_ACTION) the only ACLs, on both brokers."""
    probe = f"probe-{next(_probes)}"
    store = AclStore(stack.aws)
    for stale in store.load():
        store.delete_matching([_exactly(stale)])
    for binding in (*bindings, BROKERS_REPLICATE, acl(TOPIC, probe, Op.DESCRIBE)):
        store.create(binding)
    MetadataStore(stack.aws).bump_metadata_version()
    for broker_id in stack.processes:
        wait_until(lambda broker_id=broker_id: metadata_error(stack, broker_id, probe) == ErrorCode.unknown_topic_or_partition,
                   f"broker {broker_id} decides by the new ACLs", TIMEOUT_S)


def _exactly(binding: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(binding.resource_type, binding.resource_name, binding.pattern_type, binding.principal,
                            binding.host, binding.operation, binding.permission)


def _recv_exact(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return bytes(data)


def raw(stack: LocalStack, broker_id: int, api_key: ApiKey, version: int, fields: dict[str, Any], *,
        source: str = "127.0.0.1") -> Any:
    """One request from ``source`` (any loopback address) to one broker, and its decoded response."""
    frame = encode_request(api_key, version, 7, "acl-tests", build_entity(request_class(api_key, version), fields))
    with socket.create_connection((stack.host, stack.processes[broker_id].port), timeout=TIMEOUT_S,
                                  source_address=(source, 0)) as sock:
        sock.sendall(frame)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        _, response = decode_response(api_key, version, _recv_exact(sock, size))
    return response


def metadata_error(stack: LocalStack, broker_id: int, topic: str) -> ErrorCode:
    response = raw(stack, broker_id, ApiKey.METADATA, 12, {
        "topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    return response.topics[0].error_code


def produce(stack: LocalStack, topic: str, values: list[bytes], **config: Any) -> list[KafkaError | None]:
    """Produce with librdkafka; each message's delivery error (None when delivered)."""
    outcomes: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "message.timeout.ms": 10000, **config})
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda err, _msg: outcomes.append(err))
    producer.flush(TIMEOUT_S)
    return outcomes


def leader_of(stack: LocalStack, topic: str) -> int:
    return MetadataStore(stack.aws).get_partition(topic, 0).leader


def high_watermark(stack: LocalStack, topic: str) -> int:
    response = raw(stack, leader_of(stack, topic), ApiKey.LIST_OFFSETS, 7, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    return response.topics[0].partitions[0].offset


def fetch_as_replica(stack: LocalStack, broker_id: int, topic: str, replica_id: int, offset: int, *,
                     source: str) -> Any:
    return raw(stack, broker_id, ApiKey.FETCH, 12, {
        "replica_id": replica_id, "max_wait": datetime.timedelta(0), "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                                    "last_fetched_epoch": -1, "log_start_offset": -1,
                                                    "partition_max_bytes": 1 << 20}]}]}, source=source)


def init_producer_id(stack: LocalStack, transactional_id: str | None = None, producer_id: int = -1,
                     producer_epoch: int = -1) -> Any:
    return raw(stack, 1, ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": transactional_id, "transaction_timeout": datetime.timedelta(seconds=60),
        "producer_id": producer_id, "producer_epoch": producer_epoch})


# Produce ------------------------------------------------------------------------------------------

def test_a_producer_without_write_on_the_topic_is_refused_and_with_it_delivers(stack: LocalStack) -> None:
    grant(stack, acl(TOPIC, "orders", Op.DESCRIBE))
    [refused] = produce(stack, "orders", [b"no"])
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(stack, acl(TOPIC, "orders", Op.WRITE))
    assert produce(stack, "orders", [b"yes"]) == [None]


def test_a_deny_wins_over_a_wildcard_allow(stack: LocalStack) -> None:
    grant(stack, acl(TOPIC, "*", Op.ALL), acl(TOPIC, "secret", Op.WRITE, deny=True))
    assert produce(stack, "payments", [b"fine"]) == [None]
    [refused] = produce(stack, "secret", [b"no"])
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_an_acl_for_another_host_does_not_apply(stack: LocalStack) -> None:
    grant(stack, acl(TOPIC, "orders", Op.WRITE, host="10.9.9.9"), acl(TOPIC, "orders", Op.DESCRIBE))
    [refused] = produce(stack, "orders", [b"no"])
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(stack, acl(TOPIC, "orders", Op.WRITE, host="127.0.0.1"))
    assert produce(stack, "orders", [b"yes"]) == [None]


def test_a_prefixed_acl_covers_the_topics_it_prefixes(stack: LocalStack) -> None:
    grant(stack, acl(TOPIC, "pay", Op.WRITE, prefixed=True))
    assert produce(stack, "payments", [b"ok"]) == [None]
    [refused] = produce(stack, "orders", [b"no"])
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


# Consume ------------------------------------------------------------------------------------------

ASSIGNED = "assigned-reader"  # librdkafka asks the coordinator of its group.id for offsets even when assigned


def consume_one(stack: LocalStack, topic: str, *, group: str | None = None) -> Any:
    config = {"bootstrap.servers": stack.bootstrap_servers, "group.id": group or ASSIGNED, "enable.auto.commit": False,
              "auto.offset.reset": "earliest"}
    consumer = Consumer(config)
    try:
        if group is None:
            consumer.assign([TopicPartition(topic, 0, 0)])
        else:
            consumer.subscribe([topic])
        message = None
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=TIMEOUT_S)
        while message is None and datetime.datetime.now() < deadline:
            message = consumer.poll(1.0)
        return message
    finally:
        consumer.close()


def test_a_consumer_needs_read_on_the_topic(stack: LocalStack) -> None:
    grant(stack, acl(TOPIC, "orders", Op.WRITE))
    assert produce(stack, "orders", [b"to-read"]) == [None]
    grant(stack, acl(TOPIC, "orders", Op.DESCRIBE), acl(GROUP, ASSIGNED, Op.READ))
    refused = consume_one(stack, "orders")
    assert refused.error() is not None and refused.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(stack, acl(TOPIC, "orders", Op.READ), acl(GROUP, ASSIGNED, Op.READ))
    message = consume_one(stack, "orders")
    assert message.error() is None and message.value() is not None


def test_a_group_member_needs_read_on_the_group(stack: LocalStack) -> None:
    grant(stack, acl(TOPIC, "orders", Op.WRITE))
    assert produce(stack, "orders", [b"grouped"]) == [None]
    grant(stack, acl(TOPIC, "orders", Op.READ))
    refused = consume_one(stack, "orders", group="billing")
    assert refused.error() is not None and refused.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    grant(stack, acl(TOPIC, "orders", Op.READ), acl(GROUP, "billing", Op.READ))
    message = consume_one(stack, "orders", group="billing")
    assert message.error() is None and message.value() is not None


def test_group_apis_show_only_the_groups_the_principal_may_describe(stack: LocalStack) -> None:
    grant(stack, *OPERATOR)
    for group in ("visible-group", "hidden-group"):
        consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": group})
        consumer.commit(offsets=[TopicPartition("orders", 0, 0)], asynchronous=False)
        consumer.close()
    grant(stack, acl(GROUP, "visible-group", Op.DESCRIBE))
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    listed = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result()
    assert {g.group_id for g in listed.valid} == {"visible-group"}
    hidden = admin.describe_consumer_groups(["hidden-group"], request_timeout=TIMEOUT_S)["hidden-group"]
    with pytest.raises(Exception) as refused:
        hidden.result()
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


# Metadata and topic administration ----------------------------------------------------------------

def test_metadata_lists_only_the_topics_the_principal_may_describe(stack: LocalStack) -> None:
    grant(stack, acl(TOPIC, "orders", Op.READ))
    listed = AdminClient({"bootstrap.servers": stack.bootstrap_servers}).list_topics(timeout=TIMEOUT_S).topics
    assert set(listed) == {"orders"}
    assert metadata_error(stack, 1, "payments") == ErrorCode.topic_authorization_failed
    # A topic that does not exist looks the same: its existence is not revealed.
    assert metadata_error(stack, 1, "no-such-topic") == ErrorCode.topic_authorization_failed


def test_creating_topics_needs_create_on_the_cluster_or_the_topic(stack: LocalStack) -> None:
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    grant(stack, acl(TOPIC, "team-", Op.CREATE, prefixed=True))
    futures = admin.create_topics([NewTopic("team-a", 1, 1), NewTopic("other-a", 1, 1)])
    futures["team-a"].result(timeout=TIMEOUT_S)
    with pytest.raises(Exception) as refused:
        futures["other-a"].result(timeout=TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(stack, acl(CLUSTER, "kafka-cluster", Op.CREATE))
    admin.create_topics([NewTopic("other-a", 1, 1)])["other-a"].result(timeout=TIMEOUT_S)


def test_deleting_a_topic_needs_delete_on_it(stack: LocalStack) -> None:
    grant(stack, *OPERATOR)
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    admin.create_topics([NewTopic("doomed", 1, 1)])["doomed"].result(timeout=TIMEOUT_S)
    grant(stack, acl(TOPIC, "doomed", Op.DESCRIBE))
    with pytest.raises(Exception) as refused:
        admin.delete_topics(["doomed"])["doomed"].result(timeout=TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "doomed" in {t.name for t in MetadataStore(stack.aws).list_topics()}
    grant(stack, acl(TOPIC, "doomed", Op.DELETE))
    admin.delete_topics(["doomed"])["doomed"].result(timeout=TIMEOUT_S)


def test_config_and_quota_apis_need_their_operations(stack: LocalStack) -> None:
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    grant(stack, acl(TOPIC, "orders", Op.DESCRIBE))
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "orders")]).values()
    with pytest.raises(Exception) as refused:
        future.result(timeout=TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    quotas = raw(stack, 1, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [], "strict": False})
    assert quotas.error_code == ErrorCode.cluster_authorization_failed
    grant(stack, acl(TOPIC, "orders", Op.ALTER_CONFIGS), acl(CLUSTER, "kafka-cluster", Op.DESCRIBE_CONFIGS))
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "orders")]).values()
    assert "retention.ms" in future.result(timeout=TIMEOUT_S)
    quotas = raw(stack, 1, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [], "strict": False})
    assert quotas.error_code == ErrorCode.none


# Producer ids -------------------------------------------------------------------------------------

def test_an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic(stack: LocalStack) -> None:
    grant(stack, acl(TOPIC, "orders", Op.DESCRIBE))
    assert init_producer_id(stack).error_code == ErrorCode.cluster_authorization_failed
    grant(stack, acl(TOPIC, "orders", Op.WRITE))
    assert init_producer_id(stack).error_code == ErrorCode.none
    grant(stack, acl(CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE))
    assert init_producer_id(stack).error_code == ErrorCode.none
    grant(stack, acl(TOPIC, "orders", Op.WRITE))
    assert produce(stack, "orders", [b"idempotent"], **{"enable.idempotence": True}) == [None]


def test_a_transactional_id_needs_write_on_it(stack: LocalStack) -> None:
    grant(stack, acl(TOPIC, "*", Op.ALL))
    assert init_producer_id(stack, "payments-tx").error_code == ErrorCode.transactional_id_authorization_failed
    grant(stack, acl(TOPIC, "*", Op.ALL), acl(TXN, "payments-", Op.WRITE, prefixed=True))
    # Authorized: the transaction coordinator hands the id a producer.
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "transactional.id": "payments-tx"})
    producer.init_transactions(TIMEOUT_S)


def test_init_producer_id_never_hands_out_an_id_the_caller_names(stack: LocalStack) -> None:
    grant(stack, *OPERATOR)
    owner = init_producer_id(stack)
    assert owner.error_code == ErrorCode.none
    taken = init_producer_id(stack, producer_id=owner.producer_id, producer_epoch=owner.producer_epoch)
    assert taken.error_code == ErrorCode.none
    assert taken.producer_id != owner.producer_id and taken.producer_epoch == 0
    # The owner is not fenced: its batches at its own epoch are still appended.
    batch = build_batch([SimpleRecord(value=b"mine")], producer_id=owner.producer_id,
                        producer_epoch=owner.producer_epoch, base_sequence=0)
    response = raw(stack, leader_of(stack, "orders"), ApiKey.PRODUCE, 9, {
        "transactional_id": None, "acks": -1, "timeout": datetime.timedelta(seconds=10),
        "topic_data": [{"name": "orders", "partition_data": [{"index": 0, "records": batch}]}]})
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


# Trusted replication ------------------------------------------------------------------------------

def test_a_forged_follower_fetch_is_refused_and_moves_no_high_watermark(stack: LocalStack) -> None:
    grant(stack, *OPERATOR)
    leader = leader_of(stack, "payments")
    follower = next(b for b in stack.processes if b != leader)
    # acks=all: once delivered, the follower holds everything and the high watermark is the log end.
    assert produce(stack, "payments", [b"replicated"]) == [None]
    stack.kill_broker(follower, signal.SIGSTOP)
    try:
        assert produce(stack, "payments", [b"ahead"], acks=1) == [None]
        stalled = high_watermark(stack, "payments")
        end = stalled + 1
        forged = fetch_as_replica(stack, leader, "payments", follower, end, source="127.0.0.2")
        assert forged.error_code == ErrorCode.cluster_authorization_failed
        assert forged.responses[0].partitions[0].error_code == ErrorCode.cluster_authorization_failed
        assert forged.responses[0].partitions[0].records in (None, b"")
        assert high_watermark(stack, "payments") == stalled
        # The same fetch from where the brokers replicate is trusted (on PLAINTEXT, ANONYMOUS at
        # 127.0.0.1 is what the follower registered as), and does move it: the refusal mattered.
        trusted = fetch_as_replica(stack, leader, "payments", follower, end, source="127.0.0.1")
        assert trusted.error_code == ErrorCode.none
        assert high_watermark(stack, "payments") == end
    finally:
        stack.kill_broker(follower, signal.SIGCONT)


def test_a_replica_request_naming_a_broker_registered_as_another_principal_is_refused(stack: LocalStack) -> None:
    grant(stack, *OPERATOR)
    store = MetadataStore(stack.aws)
    epoch = store.register_broker(9, "127.0.0.9", 9999, principal="User:CN=broker-9")
    store.set_broker_state(9, epoch, BrokerState.SHUTTING_DOWN)  # registered, never live: no partition goes there
    leader = leader_of(stack, "orders")
    wait_until(lambda: fetch_as_replica(stack, leader, "orders", 9, 0, source="127.0.0.1").error_code
               == ErrorCode.cluster_authorization_failed, "broker 9's registration is known", TIMEOUT_S)
    listed = raw(stack, leader, ApiKey.LIST_OFFSETS, 7, {
        "replica_id": 9, "isolation_level": 0,
        "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert listed.topics[0].partitions[0].error_code == ErrorCode.cluster_authorization_failed


def test_the_scram_credential_apis_need_describe_and_alter_on_the_cluster(stack: LocalStack) -> None:
    alteration = {"deletions": [], "upsertions": [{"name": "eve", "mechanism": 2, "iterations": 4096,
                                                   "salt": b"s" * 16, "salted_password": b"p" * 64}]}
    grant(stack, acl(TOPIC, "*", Op.ALL))
    described = raw(stack, 1, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
    assert described.error_code == ErrorCode.cluster_authorization_failed
    altered = raw(stack, 1, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, alteration)
    assert [(r.user, r.error_code) for r in altered.results] == [("eve", ErrorCode.cluster_authorization_failed)]
    grant(stack, acl(CLUSTER, "kafka-cluster", Op.DESCRIBE))
    assert raw(stack, 1, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None}).results == ()
    grant(stack, acl(CLUSTER, "kafka-cluster", Op.ALTER))
    altered = raw(stack, 1, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, alteration)
    assert [(r.user, r.error_code) for r in altered.results] == [("eve", ErrorCode.none)]
    described = raw(stack, 1, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
    assert [r.user for r in described.results] == ["eve"]


def test_metadata_and_describe_groups_report_the_principals_authorized_operations(stack: LocalStack) -> None:
    grant(stack, acl(TOPIC, "orders", Op.READ), acl(CLUSTER, "kafka-cluster", Op.ALTER_CONFIGS))
    response = raw(stack, 1, ApiKey.METADATA, 10, {
        "topics": [{"name": "orders", "topic_id": None}], "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": True, "include_topic_authorized_operations": True})
    # READ, and DESCRIBE which READ implies; ALTER_CONFIGS and the DESCRIBE_CONFIGS it implies (and
    # the brokers' CLUSTER_ACTION, granted to ANONYMOUS at 127.0.0.1).
    assert response.topics[0].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert response.cluster_authorized_operations == (
        (1 << Op.ALTER_CONFIGS) | (1 << Op.DESCRIBE_CONFIGS) | (1 << Op.CLUSTER_ACTION))
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    grant(stack, *OPERATOR)
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "ops-group"})
    consumer.commit(offsets=[TopicPartition("orders", 0, 0)], asynchronous=False)
    consumer.close()
    grant(stack, acl(GROUP, "ops-group", Op.DESCRIBE))
    described = admin.describe_consumer_groups(["ops-group"], include_authorized_operations=True,
                                               request_timeout=TIMEOUT_S)["ops-group"].result()
    assert {op.name for op in described.authorized_operations} == {"DESCRIBE"}
