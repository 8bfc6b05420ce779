"""DeleteRecords driven by kafka-python's and confluent-kafka's admin clients against two real brokers:
the log start moves on the leader and on the follower, consumers from earliest start there, an offset
past the high watermark is refused with nothing moved, and a tiered topic's log start moves in the
segment manifest too (reads from S3 below it: tests/functions/test_fetch.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from broker_core.local_stack import LocalStack
from broker_core.log.checkpoint import LOG_START_OFFSET_FILE, read_offset_checkpoint
from broker_core.metadata.store import MetadataStore
from tests.support.waiting import wait_until
from tiered_storage.manifest import ManifestStore

pytestmark = [pytest.mark.timeout(300), pytest.mark.faults]  # about 30 s: in `make faults`, outside CI's 20-minute budget
BROKERS = 2


@pytest.fixture(scope="module")
def cf_admin(stack: LocalStack) -> AdminClient:
    return AdminClient({"bootstrap.servers": stack.bootstrap_servers})


def produce(stack: LocalStack, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all")
    try:
        for i in range(count):
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
        producer.flush(timeout=30)
    finally:
        producer.close()


def earliest_offsets(stack: LocalStack, topic: str) -> list[int]:
    consumer = KafkaConsumer(bootstrap_servers=stack.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        consumer.assign([KpTopicPartition(topic, 0)])
        return [message.offset for message in consumer]
    finally:
        consumer.close()


def log_starts(stack: LocalStack, topic: str) -> list[int]:
    """The log start each broker checkpointed for partition 0 (what it serves after a restart)."""
    return [read_offset_checkpoint(stack.directory / f"broker-{broker_id}" / f"{topic}-0" / LOG_START_OFFSET_FILE) or 0
            for broker_id in range(1, stack.brokers + 1)]


def test_confluent_delete_records_moves_the_log_start_on_every_replica(
        stack: LocalStack, kp_admin: KafkaAdminClient, cf_admin: AdminClient) -> None:
    kp_admin.create_topics([NewTopic("trimmed", 1, 2)])
    produce(stack, "trimmed", 30)
    result = cf_admin.delete_records([TopicPartition("trimmed", 0, 12)])
    deleted = next(iter(result.values())).result(timeout=30)
    assert deleted.low_watermark == 12
    assert earliest_offsets(stack, "trimmed") == list(range(12, 30))
    wait_until(lambda: log_starts(stack, "trimmed") == [12, 12], "both replicas checkpoint log start 12",
               timeout_s=30, interval_s=0.5)


def test_kafka_python_deletes_up_to_the_high_watermark(stack: LocalStack, kp_admin: KafkaAdminClient) -> None:
    kp_admin.create_topics([NewTopic("emptied", 1, 2)])
    produce(stack, "emptied", 10)
    result = kp_admin.delete_records({KpTopicPartition("emptied", 0): -1})
    assert "10" in str(result)
    assert earliest_offsets(stack, "emptied") == []
    produce(stack, "emptied", 2)
    assert earliest_offsets(stack, "emptied") == [10, 11]


def test_an_offset_past_the_high_watermark_is_out_of_range_and_nothing_moves(
        stack: LocalStack, kp_admin: KafkaAdminClient, cf_admin: AdminClient) -> None:
    kp_admin.create_topics([NewTopic("kept", 1, 2)])
    produce(stack, "kept", 5)
    result = cf_admin.delete_records([TopicPartition("kept", 0, 6)])
    with pytest.raises(KafkaException) as caught:
        next(iter(result.values())).result(timeout=30)
    assert caught.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert earliest_offsets(stack, "kept") == [0, 1, 2, 3, 4]


def test_a_tiered_topic_moves_its_log_start_in_the_manifest_and_on_disk(
        stack: LocalStack, kp_admin: KafkaAdminClient, cf_admin: AdminClient) -> None:
    kp_admin.create_topics([NewTopic("tiered-trimmed", 1, 2, topic_configs={"remote.storage.enable": "true"})])
    produce(stack, "tiered-trimmed", 3)
    result = cf_admin.delete_records([TopicPartition("tiered-trimmed", 0, 2)])
    assert next(iter(result.values())).result(timeout=30).low_watermark == 2
    assert earliest_offsets(stack, "tiered-trimmed") == [2]
    topic_id = MetadataStore(stack.aws).get_topic("tiered-trimmed").topic_id
    assert ManifestStore(stack.aws).remote_log(topic_id, 0).log_start_offset == 2
    wait_until(lambda: log_starts(stack, "tiered-trimmed") == [2, 2], "both replicas checkpoint log start 2",
               timeout_s=30, interval_s=0.5)
