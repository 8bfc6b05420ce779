"""A real broker restarting after its topic was deleted while it was down: the stray log is renamed to
``-delete`` during startup and removed after log.segment.delete.delay.ms, the topic it hosts still
serves, and the deleted topic created again under the same name comes back empty."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError

from broker_core.local_stack import LocalStack
from broker_core.log.log_directories import is_deleted_directory
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]  # two brokers and a restart: in `make faults`


@pytest.fixture
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("stray"), brokers=2,
                       overrides={"log.segment.delete.delay.ms": "2000"}) as running:
        yield running


def produce(stack: LocalStack, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all")
    try:
        for value in values:
            producer.send(topic, value=value, partition=0)
        producer.flush(timeout=30)
    finally:
        producer.close()


def values_of(stack: LocalStack, topic: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=stack.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        return [message.value for message in consumer]
    finally:
        consumer.close()


def admin_call(stack: LocalStack, call: Callable[[KafkaAdminClient], object]) -> bool:
    """One admin request through a fresh client (the controller moves when its broker stops and returns);
    False if it failed, to be tried again."""
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{stack.processes[1].port}")
    try:
        call(admin)
    except KafkaError:
        return False
    finally:
        admin.close()
    return True


def test_a_topic_deleted_while_a_broker_was_down_leaves_its_disk_and_stays_deleted(stack: LocalStack) -> None:
    assert admin_call(stack, lambda a: a.create_topics([NewTopic("kept", 1, 2), NewTopic("gone", 1, 2)]))
    produce(stack, "kept", [b"kept"])
    produce(stack, "gone", [b"old 1", b"old 2"])
    data_dir = stack.processes[2].data_dir
    wait_until(lambda: (data_dir / "gone-0").is_dir() and (data_dir / "kept-0").is_dir(),
               "broker 2 hosts both topics", timeout_s=30)
    stack.kill_broker(2, signal.SIGTERM)
    wait_until(lambda: admin_call(stack, lambda a: a.delete_topics(["gone"])),
               "topic gone deleted while broker 2 is down", timeout_s=60, interval_s=0.5)
    assert (data_dir / "gone-0").is_dir()  # nobody could delete it: its broker was down

    stack.restart_broker(2)
    assert not (data_dir / "gone-0").exists()
    renamed = [p for p in data_dir.iterdir() if is_deleted_directory(p.name)]
    assert [p.name.split(".")[0] for p in renamed] == ["gone-0"]
    wait_until(lambda: not renamed[0].exists(), "the -delete directory is removed after the delay",
               timeout_s=30, interval_s=0.2)
    assert (data_dir / "kept-0").is_dir()

    # Until the controller sees broker 2 back, a replication factor of 2 is refused.
    wait_until(lambda: admin_call(stack, lambda a: a.create_topics([NewTopic("gone", 1, 2)])),
               "the topic created again on both brokers", timeout_s=60, interval_s=0.5)
    wait_until(lambda: (data_dir / "gone-0").is_dir(), "broker 2 hosts the new topic", timeout_s=30)
    produce(stack, "gone", [b"new"])
    assert values_of(stack, "gone") == [b"new"]
    assert values_of(stack, "kept") == [b"kept"]
