"""CreatePartitions driven by confluent-kafka's and kafka-python's admin clients and `floe topics alter`
against a real broker: a topic grows, records go to the new partitions, and a count that does not grow,
a bad manual assignment, an unknown topic or a count past floe.max.partitions is refused with Kafka's
error and nothing added; validate_only adds nothing."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.errors import InvalidPartitionsError, InvalidReplicationAssignmentError

from broker_core import cli
from broker_core.local_stack import LocalStack
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)
BROKER_OVERRIDES = {"floe.max.partitions": "40"}


@pytest.fixture(scope="module")
def cf_admin(stack: LocalStack) -> AdminClient:
    return AdminClient({"bootstrap.servers": stack.bootstrap_servers})


def partition_count(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=30).topics[topic].partitions)


def grow(admin: AdminClient, topic: str, count: int, validate_only: bool = False) -> None:
    admin.create_partitions([NewPartitions(topic, count)], validate_only=validate_only)[topic].result(timeout=30)


def refusal(admin: AdminClient, topic: str, count: int) -> KafkaError:
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
        (100, KafkaError.POLICY_VIOLATION, "floe.max.partitions"),
    ]
    for count, code, message in cases:
        error = refusal(cf_admin, "fixed", count)
        assert error.code() == code, (count, error)
        assert message in error.str()
    # Manual assignments through kafka-python: confluent-kafka checks their count itself.
    for total, assignments, message in [(4, [[broker]], "2 but 1 assignments"),
                                        (3, [[broker, broker]], "replication factor"),
                                        (3, [[99]], "Unknown broker(s) in replica assignment: 99")]:
        with pytest.raises(InvalidReplicationAssignmentError, match=re.escape(message)):
            kp_admin.create_partitions({"fixed": KpNewPartitions(total_count=total, new_assignments=assignments)})
    assert refusal(cf_admin, "no-such-topic", 3).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
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
