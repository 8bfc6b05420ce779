"""The admin APIs of issue 24 refuse a principal as Kafka does, on a real broker with the StandardAuthorizer:
DENY ACLs for User:ANONYMOUS (every client here, on PLAINTEXT) take away AlterConfigs and Delete on one
topic and Alter and Describe on the cluster, where an ALLOW of All grants everything else (DENY wins)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode

from broker_core.client import BlockingConnection
from broker_core.local_stack import LocalStack
from broker_core.protocol.api_keys import ApiKey
from tests.support.stack import running_stack

pytestmark = pytest.mark.timeout(300)
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    overrides = {"authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true"}
    with running_stack(tmp_path_factory.mktemp("admin-authz"), overrides=overrides) as running:
        yield running


@pytest.fixture(scope="module")
def admin(stack: LocalStack) -> AdminClient:
    client = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    client.create_topics([NewTopic("guarded", 1, 1)])["guarded"].result(timeout=TIMEOUT_S)
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks=1)
    for i in range(3):
        producer.send("guarded", b"v%d" % i)
    producer.flush(timeout=TIMEOUT_S)
    producer.close()

    def deny(resource_type: ResourceType, name: str, operation: AclOperation) -> AclBinding:
        return AclBinding(resource_type, name, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", operation,
                          AclPermissionType.DENY)

    allow_all = [AclBinding(resource_type, name, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", AclOperation.ALL,
                            AclPermissionType.ALLOW)
                 for resource_type, name in ((ResourceType.TOPIC, "guarded"), (ResourceType.BROKER, "kafka-cluster"))]
    created = client.create_acls([
        *allow_all,
        deny(ResourceType.TOPIC, "guarded", AclOperation.ALTER_CONFIGS),
        deny(ResourceType.TOPIC, "guarded", AclOperation.DELETE),
        deny(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
        deny(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER),
    ], request_timeout=TIMEOUT_S)
    for future in created.values():
        future.result()
    return client


def test_altering_a_topics_configs_without_alter_configs_is_refused_and_nothing_changes(admin: AdminClient) -> None:
    resource = ConfigResource(ResourceType.TOPIC, "guarded", incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as caught:
        admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)
    assert caught.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    described = ConfigResource(ResourceType.TOPIC, "guarded")
    assert admin.describe_configs([described])[described].result(timeout=TIMEOUT_S)["retention.ms"].value == "604800000"


def test_deleting_records_without_delete_on_the_topic_is_refused(stack: LocalStack, admin: AdminClient) -> None:
    result = admin.delete_records([TopicPartition("guarded", 0, 2)])
    with pytest.raises(KafkaException) as caught:
        next(iter(result.values())).result(timeout=TIMEOUT_S)
    assert caught.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "watermarks"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("guarded", 0), timeout=TIMEOUT_S) == (0, 3)
    finally:
        consumer.close()


def test_electing_leaders_without_alter_on_the_cluster_is_refused(admin: AdminClient) -> None:
    with pytest.raises(KafkaException) as caught:
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("guarded", 0)]).result(timeout=TIMEOUT_S)
    assert caught.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_describing_log_dirs_without_describe_on_the_cluster_is_refused(stack: LocalStack, admin: AdminClient) -> None:
    client = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers)
    try:
        assert client.describe_log_dirs() == [{"broker": 1, "log_dirs": []}]  # kafka-python shows no directory
    finally:
        client.close()
    connection = BlockingConnection(stack.host, stack.processes[1].port, client_id="log-dirs", request_timeout_s=30)
    try:
        answer = connection.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": None}, 4)
    finally:
        connection.close()
    assert (answer.error_code, answer.results) == (ErrorCode.cluster_authorization_failed, ())
