"""DescribeCluster, DescribeLogDirs and DescribeProducers driven by kafka-python's and confluent-kafka's
admin clients against two real brokers."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from broker_core.local_stack import LocalStack

pytestmark = [pytest.mark.timeout(300), pytest.mark.faults]  # about 15 s: in `make faults`, outside CI's 20-minute budget
BROKERS = 2


def test_both_clients_describe_the_cluster_with_every_live_broker(stack: LocalStack,
                                                                  kp_admin: KafkaAdminClient) -> None:
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert sorted(node.id for node in cluster.nodes) == [1, 2]
    assert cluster.cluster_id and cluster.controller is not None and cluster.controller.id in (1, 2)
    # No authorizer: every operation the cluster resource has, as Kafka's authorizedOperations answers.
    assert {op.name for op in cluster.authorized_operations} == {
        "CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"}
    described = kp_admin.describe_cluster()
    assert sorted(broker["broker_id"] for broker in described["brokers"]) == [1, 2]
    assert described["cluster_id"] == cluster.cluster_id


def test_kafka_python_describes_the_log_dirs_with_each_replica_size(stack: LocalStack,
                                                                    kp_admin: KafkaAdminClient) -> None:
    kp_admin.create_topics([NewTopic("sized", 2, 2)])
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all")
    for i in range(20):
        producer.send("sized", value=b"x" * 1000, partition=i % 2)
    producer.flush(timeout=30)
    producer.close()
    answers = kp_admin.describe_log_dirs({"sized": [0, 1]})
    assert sorted(answer["broker"] for answer in answers) == [1, 2]
    for answer in answers:
        (log_dir,) = answer["log_dirs"]
        assert log_dir["error_code"] == 0 and log_dir["log_dir"].endswith(f"broker-{answer['broker']}")
        assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
        (topic,) = log_dir["topics"]
        assert topic["name"] == "sized"
        assert [p["partition_index"] for p in topic["partitions"]] == [0, 1]
        # Ten records of 1000 bytes each on every replica of each partition.
        assert all(10_000 < p["partition_size"] < 12_000 and p["offset_lag"] == 0 for p in topic["partitions"])


def test_describe_producers_lists_an_idempotent_producer_on_the_leader(stack: LocalStack,
                                                                       kp_admin: KafkaAdminClient) -> None:
    kp_admin.create_topics([NewTopic("produced-by", 1, 2)])
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "enable.idempotence": True})
    for i in range(5):
        producer.produce("produced-by", value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    states = kp_admin.describe_producers([TopicPartition("produced-by", 0)])
    state = states[TopicPartition("produced-by", 0)]
    (active,) = state.active_producers
    assert active.producer_id >= 0 and active.producer_epoch == 0 and active.last_sequence == 4
