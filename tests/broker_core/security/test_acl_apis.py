"""CreateAcls, DescribeAcls and DeleteAcls on a real two-broker stack, through confluent-kafka's and
kafka-python's admin clients: ACLs stored through one broker are described by the other, Kafka's
filter semantics, INVALID_REQUEST for bindings Kafka refuses, CLUSTER_AUTHORIZATION_FAILED without
ALTER/DESCRIBE on the cluster, SECURITY_DISABLED without an authorizer.

Every client here is User:ANONYMOUS at 127.0.0.1 (PLAINTEXT listeners); the stack makes ANONYMOUS
a super user, except where a test's own ACLs take that power away.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import kafka.errors
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
)
from kafka.admin import ResourcePatternFilter as KpFilter
from kafka.admin import ResourceType as KpType
from kio.schema.errors import ErrorCode

from broker_core.cli import main
from broker_core.client import BlockingConnection
from broker_core.local_stack import LocalStack
from broker_core.protocol.api_keys import ApiKey
from tests.support.stack import running_stack

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    overrides = {"authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS"}
    with running_stack(tmp_path_factory.mktemp("acl-apis"), brokers=2, overrides=overrides) as stack:
        yield stack


def admin_of(servers: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": servers})


@pytest.fixture
def admin(stack: LocalStack) -> AdminClient:
    return admin_of(stack.bootstrap_servers)


def broker_address(stack: LocalStack, broker_id: int) -> str:
    return f"{stack.host}:{stack.processes[broker_id].port}"


def describe(admin: AdminClient, flt: AclBindingFilter) -> set[AclBinding]:
    return set(admin.describe_acls(flt, request_timeout=TIMEOUT_S).result())


def delete_all(admin: AdminClient) -> None:
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    for future in admin.delete_acls([everything], request_timeout=TIMEOUT_S).values():
        future.result()


EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)
READ_ORDERS = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
WRITE_PREFIX = AclBinding(ResourceType.TOPIC, "orders.", ResourcePatternType.PREFIXED, "User:bob", "10.0.0.1",
                          AclOperation.WRITE, AclPermissionType.DENY)
GROUP_READ = AclBinding(ResourceType.GROUP, "billing", ResourcePatternType.LITERAL, "User:alice", "*",
                        AclOperation.READ, AclPermissionType.ALLOW)
CLUSTER_ACTION = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:broker", "*",
                            AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW)


EVERYTHING_KP = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                          KpFilter(KpType.ANY, None, ACLResourcePatternType.ANY))


def kafka_python_describe(stack: LocalStack, flt: ACLFilter) -> list[ACL]:
    client = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers, client_id="kafka-python-acls")
    try:
        return client.describe_acls(flt)[0]
    finally:
        client.close()


def test_confluent_kafka_creates_acls_that_the_other_broker_describes(stack: LocalStack, admin: AdminClient) -> None:
    delete_all(admin)
    created = admin.create_acls([READ_ORDERS, WRITE_PREFIX, GROUP_READ, CLUSTER_ACTION], request_timeout=TIMEOUT_S)
    for future in created.values():
        assert future.result() is None
    other = admin_of(broker_address(stack, 2))
    assert describe(other, EVERYTHING) == {READ_ORDERS, WRITE_PREFIX, GROUP_READ, CLUSTER_ACTION}
    only_topics = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                   AclPermissionType.ANY)
    assert describe(other, only_topics) == {READ_ORDERS, WRITE_PREFIX}
    applying_to_orders_eu = AclBindingFilter(ResourceType.TOPIC, "orders.eu", ResourcePatternType.MATCH, None, None,
                                             AclOperation.ANY, AclPermissionType.ANY)
    assert describe(other, applying_to_orders_eu) == {WRITE_PREFIX}
    by_alice = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ANY,
                                AclPermissionType.ANY)
    assert describe(admin, by_alice) == {READ_ORDERS, GROUP_READ}


def test_creating_an_acl_twice_stores_it_once(admin: AdminClient) -> None:
    delete_all(admin)
    for _ in range(2):
        for future in admin.create_acls([READ_ORDERS], request_timeout=TIMEOUT_S).values():
            future.result()
    assert describe(admin, EVERYTHING) == {READ_ORDERS}


def test_delete_acls_removes_what_the_filter_matches_and_returns_it(admin: AdminClient) -> None:
    delete_all(admin)
    for future in admin.create_acls([READ_ORDERS, WRITE_PREFIX, GROUP_READ], request_timeout=TIMEOUT_S).values():
        future.result()
    by_alice = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ANY,
                                AclPermissionType.ANY)
    [deleted] = admin.delete_acls([by_alice], request_timeout=TIMEOUT_S).values()
    assert set(deleted.result()) == {READ_ORDERS, GROUP_READ}
    assert describe(admin, EVERYTHING) == {WRITE_PREFIX}


def test_a_binding_kafka_refuses_gets_invalid_request_and_the_others_are_stored(admin: AdminClient) -> None:
    delete_all(admin)
    other_cluster = AclBinding(ResourceType.BROKER, "not-kafka-cluster", ResourcePatternType.LITERAL, "User:x", "*",
                               AclOperation.ALTER, AclPermissionType.ALLOW)
    futures = admin.create_acls([other_cluster, READ_ORDERS], request_timeout=TIMEOUT_S)
    with pytest.raises(KafkaException) as refused:
        futures[other_cluster].result()
    assert refused.value.args[0].name() == "INVALID_REQUEST"
    assert futures[READ_ORDERS].result() is None
    assert describe(admin, EVERYTHING) == {READ_ORDERS}


def test_kafka_python_creates_describes_and_deletes_acls(stack: LocalStack, admin: AdminClient) -> None:
    delete_all(admin)
    client = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers, client_id="kafka-python-acls")
    try:
        acl = ACL("User:carol", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                  ResourcePattern(KpType.TOPIC, "audit", ACLResourcePatternType.PREFIXED))
        result = client.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        flt = ACLFilter("User:carol", None, ACLOperation.ANY, ACLPermissionType.ANY,
                        KpFilter(KpType.ANY, None, ACLResourcePatternType.ANY))
        found = kafka_python_describe(stack, flt)
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in found] == [
            ("User:carol", ACLOperation.DESCRIBE, "audit")]
        [(_, deleted, _)] = client.delete_acls([flt])
        assert len(deleted) == 1
        assert describe(admin, EVERYTHING) == set()
    finally:
        client.close()


def test_without_alter_on_the_cluster_acls_cannot_be_changed(tmp_path_factory: pytest.TempPathFactory) -> None:
    with running_stack(tmp_path_factory.mktemp("acl-apis-closed"), brokers=1,
                       overrides={"authorizer.class.name": STANDARD}) as closed:
        locked_out = admin_of(closed.bootstrap_servers)
        futures = locked_out.create_acls([READ_ORDERS], request_timeout=TIMEOUT_S)
        with pytest.raises(KafkaException) as refused:
            futures[READ_ORDERS].result()
        assert refused.value.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"
        # confluent-kafka's describe_acls returns [] whatever error the broker answers; kafka-python shows it.
        with pytest.raises(kafka.errors.ClusterAuthorizationFailedError):
            kafka_python_describe(closed, EVERYTHING_KP)


def test_a_broker_without_an_authorizer_answers_security_disabled(tmp_path_factory: pytest.TempPathFactory) -> None:
    with running_stack(tmp_path_factory.mktemp("acl-apis-off"), brokers=1) as plain:
        off = admin_of(plain.bootstrap_servers)
        with pytest.raises(kafka.errors.SecurityDisabledError):
            kafka_python_describe(plain, EVERYTHING_KP)
        futures = off.create_acls([READ_ORDERS], request_timeout=TIMEOUT_S)
        with pytest.raises(KafkaException) as refused:
            futures[READ_ORDERS].result()
        assert refused.value.args[0].name() == "SECURITY_DISABLED"


def test_the_cli_adds_lists_and_removes_acls_like_kafka_acls(stack: LocalStack, admin: AdminClient,
                                                             capsys: pytest.CaptureFixture) -> None:
    delete_all(admin)
    servers = ["--bootstrap-servers", stack.bootstrap_servers]
    assert main(["acls", "add", *servers, "--allow-principal", "User:alice", "--allow-principal", "User:bob",
                 "--operation", "Read", "--operation", "Describe", "--topic", "orders.",
                 "--resource-pattern-type", "prefixed", "--group", "billing"]) == 0
    assert main(["acls", "add", *servers, "--deny-principal", "User:mallory", "--deny-host", "10.0.0.66",
                 "--cluster", "--operation", "ClusterAction"]) == 0
    assert len(describe(admin, EVERYTHING)) == 2 * 2 * 2 + 1
    capsys.readouterr()
    assert main(["acls", "list", *servers, "--principal", "User:mallory", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{
        "resource_type": "cluster", "resource_name": "kafka-cluster", "pattern_type": "literal",
        "principal": "User:mallory", "host": "10.0.0.66", "operation": "ClusterAction", "permission": "Deny"}]
    assert main(["acls", "list", *servers, "--topic", "orders.eu", "--resource-pattern-type", "match",
                 "--format", "json"]) == 0
    assert {(a["principal"], a["operation"]) for a in json.loads(capsys.readouterr().out)} == {
        ("User:alice", "Read"), ("User:alice", "Describe"), ("User:bob", "Read"), ("User:bob", "Describe")}
    assert main(["acls", "remove", *servers, "--allow-principal", "User:bob", "--operation", "Read",
                 "--topic", "orders.", "--resource-pattern-type", "prefixed"]) == 0
    # The pattern type applies to every resource named, so the group's ACLs are prefixed too.
    assert main(["acls", "remove", *servers, "--group", "billing", "--resource-pattern-type", "prefixed"]) == 0
    assert {(b.principal, b.operation, b.name) for b in describe(admin, EVERYTHING)} == {
        ("User:alice", AclOperation.READ, "orders."), ("User:alice", AclOperation.DESCRIBE, "orders."),
        ("User:bob", AclOperation.DESCRIBE, "orders."), ("User:mallory", AclOperation.CLUSTER_ACTION, "kafka-cluster")}
    # kafka-acls refuses an operation the resource does not have before sending anything.
    assert main(["acls", "add", *servers, "--allow-principal", "User:x", "--operation", "Write", "--group", "g"]) == 2
    assert "Write does not apply to group" in capsys.readouterr().err
    assert main(["acls", "add", *servers, "--allow-principal", "alice", "--topic", "t"]) == 1
    assert "Type:name" in capsys.readouterr().err


def test_super_users_may_do_anything_without_any_acl(stack: LocalStack, admin: AdminClient) -> None:
    delete_all(admin)
    admin.create_topics([NewTopic("super-topic", 1, 1)])["super-topic"].result(timeout=TIMEOUT_S)
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    delivered = []
    producer.produce("super-topic", b"v", on_delivery=lambda err, _msg: delivered.append(err))
    producer.flush(TIMEOUT_S)
    assert delivered == [None]


def test_malformed_acl_requests_get_invalid_request_and_change_nothing(stack: LocalStack, admin: AdminClient) -> None:
    delete_all(admin)
    for future in admin.create_acls([READ_ORDERS], request_timeout=TIMEOUT_S).values():
        future.result()
    connection = BlockingConnection(stack.host, stack.processes[1].port)
    try:
        described = connection.request(ApiKey.DESCRIBE_ACLS, {
            "resource_type_filter": 99, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}, version=3)
        assert described.error_code == ErrorCode.invalid_request
        created = connection.request(ApiKey.CREATE_ACLS, {"creations": [
            {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 2, "principal": "User:x",
             "host": "*", "operation": 3, "permission_type": 3},
            {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "nobody",
             "host": "*", "operation": 3, "permission_type": 3},
            {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:x",
             "host": "*", "operation": -5, "permission_type": 3}]}, version=3)
        assert [r.error_code for r in created.results] == [ErrorCode.invalid_request] * 3
        deleted = connection.request(ApiKey.DELETE_ACLS, {"filters": [
            {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 0,
             "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]}, version=3)
        assert deleted.filter_results[0].error_code == ErrorCode.invalid_request
    finally:
        connection.close()
    assert describe(admin, EVERYTHING) == {READ_ORDERS}
