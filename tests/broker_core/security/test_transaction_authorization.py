"""The transaction APIs' authorization, as Kafka checks them, on a two-broker PLAINTEXT stack with the
StandardAuthorizer and ACLs for User:ANONYMOUS (the brokers' CLUSTER_ACTION is granted from 127.0.0.1
only, so requests sent from 127.0.0.2 are a client's); end to end with confluent-kafka's
transactional producer, each refusal with a raw request.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from broker_core.local_stack import LocalStack
from broker_core.protocol.api_keys import ApiKey
from tests.broker_core.security.test_authorization import (
    CLUSTER,
    GROUP,
    OPERATOR,
    STANDARD,
    TIMEOUT_S,
    TOPIC,
    TXN,
    Op,
    acl,
    grant,
    leader_of,
    raw,
)
from tests.support.stack import running_stack
from tests.support.transactions import committed_values

# its own secured stack, about 40 s: in `make faults`, outside CI's 20-minute budget
pytestmark = pytest.mark.faults

CLIENT_HOST = "127.0.0.2"  # not the brokers' 127.0.0.1: no CLUSTER_ACTION from here


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    overrides = {"authorizer.class.name": STANDARD}
    with running_stack(tmp_path_factory.mktemp("txn-authorization"), brokers=2, overrides=overrides) as stack:
        grant(stack, *OPERATOR)
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        topics = [NewTopic("orders", 1, 2), NewTopic("secret", 1, 2)]
        for future in admin.create_topics(topics).values():
            future.result(timeout=TIMEOUT_S)
        yield stack


def transactional_producer(stack: LocalStack, transactional_id: str) -> Producer:
    return Producer({"bootstrap.servers": stack.bootstrap_servers, "transactional.id": transactional_id,
                     "transaction.timeout.ms": 60000, "message.timeout.ms": 20000})


def read_committed(stack: LocalStack, topic: str) -> list[bytes]:
    return committed_values({"bootstrap.servers": stack.bootstrap_servers}, topic, TIMEOUT_S)


def add_partitions(stack: LocalStack, transactional_id: str, topics: list[str], *, version: int = 3) -> dict[str, int]:
    answer = raw(stack, 1, ApiKey.ADD_PARTITIONS_TO_TXN, version, {
        "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": 1,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": t, "partitions": [0]} for t in topics]}, source=CLIENT_HOST)
    return {t.name: p.partition_error_code for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}


def txn_offset_commit(stack: LocalStack, transactional_id: str, group: str, topic: str) -> list[int]:
    answer = raw(stack, 1, ApiKey.TXN_OFFSET_COMMIT, 3, {
        "transactional_id": transactional_id, "group_id": group, "producer_id": 1, "producer_epoch": 0,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
        source=CLIENT_HOST)
    return [p.error_code for t in answer.topics for p in t.partitions]


def test_a_transactional_producer_needs_write_on_its_id_and_then_commits(stack: LocalStack) -> None:
    grant(stack, *OPERATOR)
    refused = transactional_producer(stack, "shop-tx")
    with pytest.raises(KafkaException) as caught:
        refused.init_transactions(TIMEOUT_S)
    assert caught.value.args[0].code() == ErrorCode.transactional_id_authorization_failed
    grant(stack, *OPERATOR, acl(TXN, "shop-", Op.WRITE, prefixed=True))
    producer = transactional_producer(stack, "shop-tx")
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("orders", b"committed", partition=0)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("orders", b"aborted", partition=0)
    producer.abort_transaction(TIMEOUT_S)
    assert read_committed(stack, "orders").count(b"committed") == 1
    assert b"aborted" not in read_committed(stack, "orders")


def test_add_partitions_needs_write_on_the_id_and_on_each_topic(stack: LocalStack) -> None:
    grant(stack, *OPERATOR[:1], acl(TOPIC, "orders", Op.WRITE), acl(TOPIC, "secret", Op.DESCRIBE))
    assert add_partitions(stack, "adder", ["orders"]) == {"orders": ErrorCode.transactional_id_authorization_failed}
    grant(stack, *OPERATOR[:1], acl(TOPIC, "orders", Op.WRITE), acl(TOPIC, "secret", Op.DESCRIBE),
          acl(TXN, "adder", Op.WRITE))
    assert add_partitions(stack, "adder", ["orders", "secret"]) == {
        "orders": ErrorCode.operation_not_attempted, "secret": ErrorCode.topic_authorization_failed}


def test_verify_only_add_partitions_is_for_brokers(stack: LocalStack) -> None:
    grant(stack, *OPERATOR, acl(TXN, "*", Op.ALL))
    answer = raw(stack, 1, ApiKey.ADD_PARTITIONS_TO_TXN, 4, {"transactions": [{
        "transactional_id": "verifier", "producer_id": 1, "producer_epoch": 0, "verify_only": True,
        "topics": [{"name": "orders", "partitions": [0]}]}]}, source=CLIENT_HOST)
    assert answer.error_code == ErrorCode.cluster_authorization_failed
    assert answer.results_by_transaction == ()


def test_add_offsets_and_end_txn_need_write_on_the_id_and_read_on_the_group(stack: LocalStack) -> None:
    grant(stack, *OPERATOR[:2])

    def add_offsets() -> int:
        return raw(stack, 1, ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "offsets-tx", "producer_id": 1,
                                                           "producer_epoch": 0, "group_id": "g"},
                   source=CLIENT_HOST).error_code

    def end_txn() -> int:
        return raw(stack, 1, ApiKey.END_TXN, 3, {"transactional_id": "offsets-tx", "producer_id": 1,
                                                "producer_epoch": 0, "committed": True}, source=CLIENT_HOST).error_code

    assert add_offsets() == ErrorCode.transactional_id_authorization_failed
    assert end_txn() == ErrorCode.transactional_id_authorization_failed
    grant(stack, *OPERATOR[:2], acl(TXN, "offsets-tx", Op.WRITE))
    assert add_offsets() == ErrorCode.group_authorization_failed
    # Authorized: now the coordinator's own answer (no producer was initialised for the id).
    assert end_txn() not in (ErrorCode.transactional_id_authorization_failed, ErrorCode.none)


def test_txn_offset_commit_checks_the_id_then_the_group_then_the_topic(stack: LocalStack) -> None:
    grant(stack, *OPERATOR[:1], acl(TOPIC, "orders", Op.DESCRIBE))
    assert txn_offset_commit(stack, "commit-tx", "g1", "orders") == [ErrorCode.transactional_id_authorization_failed]
    grant(stack, *OPERATOR[:1], acl(TOPIC, "orders", Op.DESCRIBE), acl(TXN, "commit-tx", Op.WRITE))
    assert txn_offset_commit(stack, "commit-tx", "g1", "orders") == [ErrorCode.group_authorization_failed]
    grant(stack, *OPERATOR[:1], acl(TOPIC, "orders", Op.DESCRIBE), acl(TXN, "commit-tx", Op.WRITE),
          acl(GROUP, "g1", Op.READ))
    assert txn_offset_commit(stack, "commit-tx", "g1", "orders") == [ErrorCode.topic_authorization_failed]


def test_a_client_cannot_write_transaction_markers(stack: LocalStack) -> None:
    grant(stack, *OPERATOR, acl(TXN, "marked-tx", Op.WRITE), acl(CLUSTER, "kafka-cluster", Op.ALL, host=CLIENT_HOST,
                                                                   deny=True))
    producer = transactional_producer(stack, "marked-tx")
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("secret", b"kept", partition=0)
    producer.flush(TIMEOUT_S)
    # The transaction is open; a forged ABORT from a client must not end it.
    info = raw(stack, 1, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["marked-tx"]}).transaction_states[0]
    assert info.transaction_state == "Ongoing"
    answer = raw(stack, leader_of(stack, "secret"), ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": info.producer_id, "producer_epoch": info.producer_epoch, "transaction_result": False,
        "coordinator_epoch": 0, "topics": [{"name": "secret", "partition_indexes": [0]}]}]}, source=CLIENT_HOST)
    assert [p.error_code for m in answer.markers for t in m.topics for p in t.partitions] == [
        ErrorCode.cluster_authorization_failed]
    producer.commit_transaction(TIMEOUT_S)
    assert read_committed(stack, "secret") == [b"kept"]


def test_describe_and_list_transactions_show_only_describable_ids_and_topics(stack: LocalStack) -> None:
    grant(stack, *OPERATOR, acl(TXN, "*", Op.WRITE))
    for transactional_id, topic in (("seen-tx", "orders"), ("hidden-tx", "orders"), ("seen-secret-tx", "secret")):
        producer = transactional_producer(stack, transactional_id)
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        producer.produce(topic, b"open", partition=0)
        producer.flush(TIMEOUT_S)
    grant(stack, acl(TXN, "seen-", Op.DESCRIBE, prefixed=True), acl(TOPIC, "orders", Op.DESCRIBE))

    def describe(transactional_id: str) -> Any:
        return raw(stack, 1, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                   {"transactional_ids": [transactional_id]}).transaction_states[0]

    assert describe("hidden-tx").error_code == ErrorCode.transactional_id_authorization_failed
    seen = describe("seen-tx")
    assert seen.error_code == ErrorCode.none and [t.topic for t in seen.topics] == ["orders"]
    seen_secret = describe("seen-secret-tx")
    assert seen_secret.error_code == ErrorCode.none and seen_secret.topics == ()
    listed: set[str] = set()
    for broker_id in stack.processes:
        answer = raw(stack, broker_id, ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": [],
                                                                    "duration_filter": -1})
        listed |= {t.transactional_id for t in answer.transaction_states}
    assert listed == {"seen-tx", "seen-secret-tx"}
