"""AlterConfigs and IncrementalAlterConfigs driven by kafka-python's and confluent-kafka's admin clients
against a real broker: changes show in DescribeConfigs and take effect live (max.message.bytes on the
next produce, cleanup.policy starting the cleaner); a bad value, an unknown or a read-only name is
INVALID_CONFIG naming it and nothing of that resource is applied; validate_only writes nothing. Dynamic
broker configs, per broker and cluster-wide. CreatePartitions, on the same broker: a topic grows and
records reach the new partitions; a count that does not grow, a bad manual assignment, an unknown topic or
a count past floe.max.partitions is refused with Kafka's error and nothing is added."""

from __future__ import annotations

import asyncio
import re

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.errors import (
    InvalidPartitionsError,
    InvalidReplicationAssignmentError,
    MessageSizeTooLargeError,
    PolicyViolationError,
)

from broker_core import cli
from broker_core.client import FloeClient
from broker_core.local_stack import LocalStack
from tests.support.waiting import wait_until

# Runs in `make faults`, not in `make test`: admin-client passes over configs against their own stack (about 35 s on CI); the default suite must stay under CI's 20-minute budget.
pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]
BROKER_OVERRIDES = {"log.cleaner.backoff.ms": "100", "file.delete.delay.ms": "0", "log.segment.delete.delay.ms": "0"}

INVALID_CONFIG = 40


@pytest.fixture(scope="module")
def cf_admin(stack: LocalStack) -> AdminClient:
    return AdminClient({"bootstrap.servers": stack.bootstrap_servers, "client.id": "configs-admin"})


def create_topic(admin: KafkaAdminClient, name: str, configs: dict[str, str] | None = None) -> None:
    admin.create_topics([NewTopic(name, 1, 1, topic_configs=configs or {})])


def topic_configs(admin: AdminClient, name: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {key: entry.value for key, entry in entries.items()}


def incremental(admin: AdminClient, resource_type: ResourceType, name: str,
                *entries: tuple[str, str | None, AlterConfigOpType], validate_only: bool = False) -> None:
    resource = ConfigResource(resource_type, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, value, op in entries])
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(timeout=30)


def refusal(admin: AdminClient, resource_type: ResourceType, name: str,
            *entries: tuple[str, str | None, AlterConfigOpType]) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        incremental(admin, resource_type, name, *entries)
    return caught.value.args[0]


def test_incremental_set_delete_and_append_show_in_describe_configs(kp_admin: KafkaAdminClient,
                                                                    cf_admin: AdminClient) -> None:
    create_topic(kp_admin, "inc-configs", {"retention.ms": "600000"})
    incremental(cf_admin, ResourceType.TOPIC, "inc-configs",
                ("retention.bytes", "1048576", AlterConfigOpType.SET),
                ("retention.ms", None, AlterConfigOpType.DELETE),
                ("cleanup.policy", "compact", AlterConfigOpType.APPEND))
    configs = topic_configs(cf_admin, "inc-configs")
    assert configs["retention.bytes"] == "1048576"
    assert configs["retention.ms"] == "604800000"  # back to the default
    assert configs["cleanup.policy"] == "delete,compact"
    incremental(cf_admin, ResourceType.TOPIC, "inc-configs", ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert topic_configs(cf_admin, "inc-configs")["cleanup.policy"] == "compact"


def test_a_bad_value_an_unknown_name_or_append_to_a_scalar_is_invalid_config_and_nothing_is_applied(
        kp_admin: KafkaAdminClient, cf_admin: AdminClient) -> None:
    create_topic(kp_admin, "bad-configs")
    for bad, named in [(("retention.ms", "soon", AlterConfigOpType.SET), "retention.ms"),
                       (("no.such.config", "1", AlterConfigOpType.SET), "no.such.config"),
                       (("cleanup.policy", "shred", AlterConfigOpType.SET), "cleanup.policy"),
                       (("retention.ms", "1", AlterConfigOpType.APPEND), "retention.ms")]:
        error = refusal(cf_admin, ResourceType.TOPIC, "bad-configs", ("retention.bytes", "4096", AlterConfigOpType.SET),
                        bad)
        assert error.code() == KafkaError.INVALID_CONFIG
        assert named in error.str()
    assert topic_configs(cf_admin, "bad-configs")["retention.bytes"] == "-1"


def test_validate_only_checks_without_writing(kp_admin: KafkaAdminClient, cf_admin: AdminClient) -> None:
    create_topic(kp_admin, "validate-configs")
    incremental(cf_admin, ResourceType.TOPIC, "validate-configs", ("retention.ms", "1000", AlterConfigOpType.SET),
                validate_only=True)
    assert topic_configs(cf_admin, "validate-configs")["retention.ms"] == "604800000"
    with pytest.raises(KafkaException) as caught:
        incremental(cf_admin, ResourceType.TOPIC, "validate-configs", ("retention.ms", "x", AlterConfigOpType.SET),
                    validate_only=True)
    assert caught.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_an_unknown_topic_and_a_static_broker_setting_are_refused(cf_admin: AdminClient) -> None:
    error = refusal(cf_admin, ResourceType.TOPIC, "no-such-topic", ("retention.ms", "1000", AlterConfigOpType.SET))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    broker_id = str(next(iter(cf_admin.list_topics(timeout=30).brokers)))
    error = refusal(cf_admin, ResourceType.BROKER, broker_id, ("log.retention.ms", "1000", AlterConfigOpType.SET))
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "log.retention.ms" in error.str()


def test_kafka_python_alter_configs_replaces_the_whole_set(kp_admin: KafkaAdminClient, cf_admin: AdminClient) -> None:
    create_topic(kp_admin, "replace-configs", {"retention.ms": "600000"})
    result = kp_admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, "replace-configs",
                                                      configs={"retention.bytes": "2048"})],
                                    incremental=False, raise_on_unknown=False)
    assert "replace-configs" in str(result)
    configs = topic_configs(cf_admin, "replace-configs")
    assert configs["retention.bytes"] == "2048"
    assert configs["retention.ms"] == "600000"  # kafka-python carries the topic's other settings over
    refused = kp_admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, "replace-configs",
                                                       configs={"retention.bytes": "lots"})],
                                     incremental=False, raise_on_unknown=False)
    assert "InvalidConfig" in str(refused) or str(INVALID_CONFIG) in str(refused)
    assert topic_configs(cf_admin, "replace-configs")["retention.bytes"] == "2048"


def test_max_message_bytes_applies_to_the_next_produce(stack: LocalStack, kp_admin: KafkaAdminClient,
                                                      cf_admin: AdminClient) -> None:
    create_topic(kp_admin, "live-size")
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks=1, max_request_size=10_000_000)
    try:
        producer.send("live-size", b"x" * 5000).get(timeout=30)
        incremental(cf_admin, ResourceType.TOPIC, "live-size", ("max.message.bytes", "2000", AlterConfigOpType.SET))

        def refused() -> bool:
            try:
                producer.send("live-size", b"y" * 5000).get(timeout=30)
            except MessageSizeTooLargeError:
                return True
            return False

        wait_until(refused, "the new max.message.bytes refuses a 5000-byte record", timeout_s=30, interval_s=0.5)
    finally:
        producer.close()


def test_switching_cleanup_policy_to_compact_starts_the_cleaner(stack: LocalStack, kp_admin: KafkaAdminClient,
                                                               cf_admin: AdminClient) -> None:
    create_topic(kp_admin, "becomes-compacted", {"segment.bytes": "4096"})
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks=1, linger_ms=0)
    try:
        for round_ in range(20):
            for key in range(5):
                producer.send("becomes-compacted", key=b"k%d" % key, value=b"v%d-%s" % (round_, b"." * 100))
            producer.flush(timeout=30)  # one batch per round, so the records span several segments
    finally:
        producer.close()
    assert len(read_all(stack, "becomes-compacted")) == 100
    incremental(cf_admin, ResourceType.TOPIC, "becomes-compacted",
                ("cleanup.policy", "compact", AlterConfigOpType.SET),
                ("min.cleanable.dirty.ratio", "0.01", AlterConfigOpType.SET))

    def compacted() -> bool:
        return len(read_all(stack, "becomes-compacted")) < 100

    wait_until(compacted, "the cleaner compacts the topic after cleanup.policy=compact", timeout_s=90, interval_s=1)
    latest: dict[bytes, bytes] = {}
    for key, value in read_all(stack, "becomes-compacted"):
        latest[key] = value
    assert all(latest[b"k%d" % key].startswith(b"v19-") for key in range(5))


def read_all(stack: LocalStack, topic: str) -> list[tuple[bytes, bytes]]:
    consumer = KafkaConsumer(topic, bootstrap_servers=stack.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        return [(message.key, message.value) for message in consumer]
    finally:
        consumer.close()


def broker_configs(admin: AdminClient, name: str) -> dict[str, tuple[str | None, ConfigSource]]:
    resource = ConfigResource(ResourceType.BROKER, name)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {key: (entry.value, ConfigSource(entry.source)) for key, entry in entries.items()}


def cluster_default(stack: LocalStack, set_configs: dict[str, str], delete: tuple[str, ...] = ()) -> None:
    """IncrementalAlterConfigs on the cluster-wide default (the BROKER resource named "", kafka-configs
    --entity-default), through Floe's client: confluent-kafka and kafka-python only name brokers by id."""

    async def alter() -> None:
        async with FloeClient(stack.bootstrap_servers) as client:
            await client.alter_broker_configs(None, set_configs, delete)

    asyncio.run(alter())


def test_dynamic_broker_configs_apply_per_broker_over_the_cluster_default_and_show_their_source(
        stack: LocalStack, cf_admin: AdminClient) -> None:
    broker_id = str(next(iter(cf_admin.list_topics(timeout=30).brokers)))
    rate = "leader.replication.throttled.rate"
    assert broker_configs(cf_admin, broker_id)[rate] == ("9223372036854775807", ConfigSource.DEFAULT_CONFIG)
    cluster_default(stack, {rate: "5000000"})
    assert broker_configs(cf_admin, broker_id)[rate] == ("5000000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    incremental(cf_admin, ResourceType.BROKER, broker_id, (rate, "1000000", AlterConfigOpType.SET),
                ("log.cleaner.backoff.ms", "200", AlterConfigOpType.SET))
    described = broker_configs(cf_admin, broker_id)
    assert described[rate] == ("1000000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert described["log.cleaner.backoff.ms"] == ("200", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert described["message.max.bytes"][1] is ConfigSource.DEFAULT_CONFIG
    incremental(cf_admin, ResourceType.BROKER, broker_id, (rate, None, AlterConfigOpType.DELETE),
                ("log.cleaner.backoff.ms", None, AlterConfigOpType.DELETE))
    cluster_default(stack, {}, (rate,))
    assert broker_configs(cf_admin, broker_id)[rate] == ("9223372036854775807", ConfigSource.DEFAULT_CONFIG)


@pytest.mark.faults  # restarting the cleaner processes takes a while on a loaded machine
def test_a_change_of_cleaner_threads_restarts_the_cleaners(stack: LocalStack, cf_admin: AdminClient) -> None:
    broker_id = str(next(iter(cf_admin.list_topics(timeout=30).brokers)))
    incremental(cf_admin, ResourceType.BROKER, broker_id, ("log.cleaner.threads", "2", AlterConfigOpType.SET))
    log_path = stack.directory / "logs" / f"broker-{broker_id}.log"
    wait_until(lambda: "-> 2 threads" in log_path.read_text(errors="replace"), "the cleaner restarted",
               timeout_s=60, interval_s=0.2)
    incremental(cf_admin, ResourceType.BROKER, broker_id, ("log.cleaner.threads", None, AlterConfigOpType.DELETE))
    wait_until(lambda: "-> 1 threads" in log_path.read_text(errors="replace"), "the cleaner restarted again",
               timeout_s=60, interval_s=0.2)


def test_a_bad_dynamic_value_or_a_static_name_refuses_the_whole_broker_resource(cf_admin: AdminClient) -> None:
    broker_id = str(next(iter(cf_admin.list_topics(timeout=30).brokers)))
    rate = "follower.replication.throttled.rate"
    for bad, named in [(("log.cleaner.backoff.ms", "soon", AlterConfigOpType.SET), "log.cleaner.backoff.ms"),
                       (("log.cleaner.threads", "0", AlterConfigOpType.SET), "log.cleaner.threads"),
                       (("num.partitions", "3", AlterConfigOpType.SET), "num.partitions"),
                       (("no.such.config", "1", AlterConfigOpType.SET), "no.such.config")]:
        error = refusal(cf_admin, ResourceType.BROKER, broker_id, (rate, "1000", AlterConfigOpType.SET), bad)
        assert error.code() == KafkaError.INVALID_CONFIG
        assert named in error.str()
    assert broker_configs(cf_admin, broker_id)[rate][1] is ConfigSource.DEFAULT_CONFIG


def test_throttled_replica_lists_are_checked(kp_admin: KafkaAdminClient, cf_admin: AdminClient) -> None:
    create_topic(kp_admin, "throttle-lists")
    incremental(cf_admin, ResourceType.TOPIC, "throttle-lists",
                ("leader.replication.throttled.replicas", "0:1,0:2", AlterConfigOpType.SET),
                ("follower.replication.throttled.replicas", "*", AlterConfigOpType.SET))
    assert topic_configs(cf_admin, "throttle-lists")["leader.replication.throttled.replicas"] == "0:1,0:2"
    error = refusal(cf_admin, ResourceType.TOPIC, "throttle-lists",
                    ("leader.replication.throttled.replicas", "0-1", AlterConfigOpType.SET))
    assert error.code() == KafkaError.INVALID_CONFIG and "leader.replication.throttled.replicas" in error.str()


# CreatePartitions ------------------------------------------------------------------------------


def partition_count(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=30).topics[topic].partitions)


def grow(admin: AdminClient, topic: str, count: int, validate_only: bool = False) -> None:
    admin.create_partitions([NewPartitions(topic, count)], validate_only=validate_only)[topic].result(timeout=30)


def partitions_refusal(admin: AdminClient, topic: str, count: int) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        grow(admin, topic, count)
    return caught.value.args[0]


def test_a_topic_grows_and_records_reach_the_new_partitions(kp_admin: KafkaAdminClient, cf_admin: AdminClient,
                                                            stack: LocalStack) -> None:
    kp_admin.create_topics([NewTopic("growing", 1, 1)])
    grow(cf_admin, "growing", 3)
    wait_until(lambda: partition_count(cf_admin, "growing") == 3, "three partitions", timeout_s=30, interval_s=0.2)
    broker = next(iter(cf_admin.list_topics(timeout=30).brokers))
    kp_admin.create_partitions({"growing": KpNewPartitions(total_count=4, new_assignments=[[broker]])})
    kp_admin.create_partitions({"growing": KpNewPartitions(total_count=5)})
    wait_until(lambda: partition_count(cf_admin, "growing") == 5, "five partitions", timeout_s=30, interval_s=0.2)
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all")
    try:
        offsets = [producer.send("growing", b"to-%d" % p, partition=p).get(timeout=30).offset for p in range(5)]
    finally:
        producer.close()
    assert offsets == [0] * 5


def test_counts_assignments_and_limits_get_kafkas_errors_and_nothing_is_added(
        kp_admin: KafkaAdminClient, cf_admin: AdminClient) -> None:
    kp_admin.create_topics([NewTopic("fixed", 2, 1)])
    broker = next(iter(cf_admin.list_topics(timeout=30).brokers))
    cases = [
        (2, KafkaError.INVALID_PARTITIONS, "already has 2 partitions"),
        (1, KafkaError.INVALID_PARTITIONS, "higher than the requested 1"),
    ]
    for count, code, message in cases:
        error = partitions_refusal(cf_admin, "fixed", count)
        assert error.code() == code, (count, error)
        assert message in error.str()
    # Manual assignments through kafka-python: confluent-kafka checks their count itself.
    for total, assignments, message in [(4, [[broker]], "2 but 1 assignments"),
                                        (3, [[broker, broker]], "replication factor"),
                                        (3, [[99]], "Unknown broker(s) in replica assignment: 99")]:
        with pytest.raises(InvalidReplicationAssignmentError, match=re.escape(message)):
            kp_admin.create_partitions({"fixed": KpNewPartitions(total_count=total, new_assignments=assignments)})
    # Past floe.max.partitions (100,000 here) through kafka-python: confluent-kafka stops at 100,000 itself.
    with pytest.raises(PolicyViolationError, match="floe.max.partitions"):
        kp_admin.create_partitions({"fixed": KpNewPartitions(total_count=100_001)})
    assert partitions_refusal(cf_admin, "no-such-topic", 3).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    grow(cf_admin, "fixed", 3, validate_only=True)
    with pytest.raises(InvalidPartitionsError):
        kp_admin.create_partitions({"fixed": KpNewPartitions(total_count=2)})
    assert partition_count(cf_admin, "fixed") == 2


def test_floe_topics_alter_adds_partitions(kp_admin: KafkaAdminClient, cf_admin: AdminClient, stack: LocalStack,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    kp_admin.create_topics([NewTopic("cli-grown", 1, 1)])
    assert cli.main(["topics", "alter", "cli-grown", "--partitions", "2", "--bootstrap-servers",
                     stack.bootstrap_servers]) == 0
    assert "altered topic cli-grown: 2 partitions" in capsys.readouterr().out
    wait_until(lambda: partition_count(cf_admin, "cli-grown") == 2, "two partitions", timeout_s=30, interval_s=0.2)
    assert cli.main(["topics", "alter", "cli-grown", "--partitions", "1", "--bootstrap-servers",
                     stack.bootstrap_servers]) == 1
    assert "higher than the requested 1" in capsys.readouterr().err
