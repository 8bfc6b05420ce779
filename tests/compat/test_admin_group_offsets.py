"""OffsetDelete driven by kafka-python's admin client, and `floe groups reset-offsets` (a dry run unless
--execute, refused while the group has members), against a real broker; the committed offsets are read
back with kafka-python."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import GroupSubscribedToTopicError, NoError

from broker_core.cli import main
from broker_core.local_stack import LocalStack

# Runs in `make faults`, not in `make test`: admin-client passes over group offsets against their own stack (about 25 s on CI); the default suite must stay under CI's 20-minute budget.
pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

RECORDS = 10


@pytest.fixture(scope="module")
def topic(stack: LocalStack, kp_admin: KafkaAdminClient) -> Iterator[str]:
    """Two partitions of RECORDS records each, the first half written an hour ago (by CreateTime)."""
    kp_admin.create_topics([NewTopic("resettable", 2, 1)])
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks=1)
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    for partition in (0, 1):
        for i in range(RECORDS):
            stamp = an_hour_ago if i < RECORDS // 2 else None
            producer.send("resettable", value=b"v%d" % i, partition=partition, timestamp_ms=stamp)
    producer.flush(timeout=30)
    producer.close()
    yield "resettable"


def consumed_group(stack: LocalStack, group: str, topic: str) -> KafkaConsumer:
    """A member of ``group`` that read all of ``topic`` and committed; still in the group."""
    consumer = KafkaConsumer(topic, bootstrap_servers=stack.bootstrap_servers, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=5000)
    assert len(list(consumer)) == 2 * RECORDS
    consumer.commit()
    return consumer


def committed(kp_admin: KafkaAdminClient, group: str, topic: str) -> dict[int, int]:
    offsets = kp_admin.list_group_offsets(group)[group]
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


def floe(stack: LocalStack, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([*args, "--stack", str(stack.directory)])
    out, err = capsys.readouterr()
    return code, out, err


def test_reset_offsets_is_a_dry_run_until_execute_and_refused_while_the_group_is_active(
        stack: LocalStack, kp_admin: KafkaAdminClient, topic: str, capsys: pytest.CaptureFixture[str]) -> None:
    consumer = consumed_group(stack, "resetting", topic)
    code, _, err = floe(stack, capsys, "groups", "reset-offsets", "--group", "resetting", "--topic", topic,
                        "--to-earliest", "--execute")
    assert code == 1 and "inactive" in err
    consumer.close()
    assert committed(kp_admin, "resetting", topic) == {0: RECORDS, 1: RECORDS}

    code, out, _ = floe(stack, capsys, "groups", "reset-offsets", "--group", "resetting", "--topic", topic,
                        "--to-earliest")
    assert code == 0 and "dry run" in out
    assert committed(kp_admin, "resetting", topic) == {0: RECORDS, 1: RECORDS}

    assert floe(stack, capsys, "groups", "reset-offsets", "--group", "resetting", "--topic", topic,
                "--to-earliest", "--execute")[0] == 0
    assert committed(kp_admin, "resetting", topic) == {0: 0, 1: 0}

    assert floe(stack, capsys, "groups", "reset-offsets", "--group", "resetting", "--topic", f"{topic}:1",
                "--to-offset", "3", "--execute")[0] == 0
    assert committed(kp_admin, "resetting", topic) == {0: 0, 1: 3}

    assert floe(stack, capsys, "groups", "reset-offsets", "--group", "resetting", "--topic", f"{topic}:0",
                "--to-offset", "999", "--execute")[0] == 0  # clamped to the latest offset, as Kafka's tool
    assert committed(kp_admin, "resetting", topic) == {0: RECORDS, 1: 3}

    half_an_hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=30)
    assert floe(stack, capsys, "groups", "reset-offsets", "--group", "resetting", "--topic", topic,
                "--to-datetime", half_an_hour_ago.isoformat(timespec="seconds"), "--execute")[0] == 0
    assert committed(kp_admin, "resetting", topic) == {0: RECORDS // 2, 1: RECORDS // 2}

    code, _, err = floe(stack, capsys, "groups", "reset-offsets", "--group", "resetting", "--topic", f"{topic}:7",
                        "--to-latest", "--execute")
    assert code == 1 and "no partition 7" in err
    assert committed(kp_admin, "resetting", topic) == {0: RECORDS // 2, 1: RECORDS // 2}


def test_offset_delete_forgets_offsets_of_a_topic_no_member_consumes(
        stack: LocalStack, kp_admin: KafkaAdminClient, topic: str) -> None:
    consumer = consumed_group(stack, "forgetting", topic)
    try:
        answer = kp_admin.delete_group_offsets("forgetting", [TopicPartition(topic, 0)])
        assert answer[TopicPartition(topic, 0)] is GroupSubscribedToTopicError
        assert committed(kp_admin, "forgetting", topic) == {0: RECORDS, 1: RECORDS}
    finally:
        consumer.close()
    answer = kp_admin.delete_group_offsets("forgetting", [TopicPartition(topic, 0)])
    assert answer[TopicPartition(topic, 0)] is NoError
    assert committed(kp_admin, "forgetting", topic) == {1: RECORDS}
