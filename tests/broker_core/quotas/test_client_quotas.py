"""Client quotas on a real two-broker stack: set and read with kafka-python's protocol messages, the
CLI and FloeClient; enforced on librdkafka producers and consumers (which honour throttle_time and
report it through throttle_cb), on raw requests, and on CreateTopics (KIP-599).

The stack measures quota rates over 3 windows of 1 s (instead of Kafka's 11), so a client uses up
its burst, and is throttled, within seconds.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kio.schema.errors import ErrorCode

from broker_core.cli import main
from broker_core.client import BlockingConnection, ClientError, FloeClient, KafkaError
from broker_core.local_stack import LocalStack
from broker_core.protocol.api_keys import ApiKey
from broker_core.records import SimpleRecord, build_batch
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

TOPIC = "quota-records"
TIMEOUT_S = 30
QUOTA_OVERRIDES = {"quota.window.num": "3", "quota.window.size.seconds": "1"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("quotas"), brokers=2, overrides=QUOTA_OVERRIDES) as stack:
        run(stack, lambda client: client.create_topic(TOPIC, partitions=2, replication_factor=1))
        yield stack


def run(stack: LocalStack, action: Any, client_id: str = "quota-tests") -> Any:
    async def go() -> Any:
        async with FloeClient(stack.bootstrap_servers, client_id=client_id) as client:
            return await action(client)

    return asyncio.run(go())


@pytest.fixture(scope="module")
def kafka_admin(stack: LocalStack) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers, client_id="kafka-python-admin")
    yield admin
    admin.close()


def kafka_python_send(admin: KafkaAdminClient, request: Any) -> Any:
    async def send() -> Any:
        return await admin._manager.send(request)

    return admin._manager.run(send)


def alter_with_kafka_python(admin: KafkaAdminClient, entity: dict[str, str | None], ops: dict[str, float | None],
                            validate_only: bool = False) -> Any:
    """One AlterClientQuotas entry: ops maps a key to its value, or to None to remove it."""
    entry = AlterClientQuotasRequest.EntryData(
        entity=[AlterClientQuotasRequest.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[AlterClientQuotasRequest.EntryData.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()])
    return kafka_python_send(admin, AlterClientQuotasRequest(entries=[entry], validate_only=validate_only))


def describe_with_kafka_python(admin: KafkaAdminClient, components: list[tuple[str, int, str | None]],
                               strict: bool) -> Any:
    return kafka_python_send(admin, DescribeClientQuotasRequest(components=[
        DescribeClientQuotasRequest.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components
    ], strict=strict))


def set_quota(admin: KafkaAdminClient, client_id: str, **quotas: float) -> None:
    response = alter_with_kafka_python(admin, {"client-id": client_id}, quotas)
    assert [entry.error_code for entry in response.entries] == [0]


def leaders(stack: LocalStack) -> dict[int, int]:
    """Partition -> leader id of TOPIC."""
    info = run(stack, lambda client: client.describe_topic(TOPIC))
    return {p.partition: p.leader for p in info.partitions}


def raw_produce(stack: LocalStack, broker_id: int, partition: int, client_id: str, nbytes: int) -> datetime.timedelta:
    """Produce ``nbytes`` of values straight to a broker; the response's throttle time."""
    process = stack.processes[broker_id]
    connection = BlockingConnection("127.0.0.1", process.port, client_id=client_id)
    try:
        batch = build_batch([SimpleRecord(key=None, value=b"x" * nbytes)])
        response = connection.request(ApiKey.PRODUCE, {
            "transactional_id": None, "acks": 1, "timeout": datetime.timedelta(seconds=10),
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}],
        })
    finally:
        connection.close()
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    return response.throttle_time


# ---- AlterClientQuotas / DescribeClientQuotas ----------------------------------------------------


def test_kafka_python_sets_quotas_and_describes_them(kafka_admin: KafkaAdminClient) -> None:
    response = alter_with_kafka_python(kafka_admin, {"user": "alice", "client-id": "app"},
                                       {"producer_byte_rate": 1048576.0, "request_percentage": 25.5})
    assert [(e.error_code, e.error_message) for e in response.entries] == [(0, None)]
    alter_with_kafka_python(kafka_admin, {"user": None}, {"consumer_byte_rate": 2048.0})

    described = describe_with_kafka_python(kafka_admin, [("user", 0, "alice")], strict=False)
    assert described.error_code == 0
    assert [([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
            for entry in described.entries] == [
        ([("user", "alice"), ("client-id", "app")], {"producer_byte_rate": 1048576.0, "request_percentage": 25.5}),
    ]
    strict = describe_with_kafka_python(kafka_admin, [("user", 0, "alice")], strict=True)
    assert strict.entries == []
    default_user = describe_with_kafka_python(kafka_admin, [("user", 1, None)], strict=True)
    assert [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in default_user.entries] == [
        [("user", None)]]
    # The default user's quota would outrank every client-id quota the later tests set (precedence 6 > 7).
    alter_with_kafka_python(kafka_admin, {"user": None}, {"consumer_byte_rate": None})


def test_removing_the_last_quota_removes_the_entity(kafka_admin: KafkaAdminClient) -> None:
    set_quota(kafka_admin, "short-lived", producer_byte_rate=4096.0)
    alter_with_kafka_python(kafka_admin, {"client-id": "short-lived"}, {"producer_byte_rate": None})
    described = describe_with_kafka_python(kafka_admin, [("client-id", 0, "short-lived")], strict=True)
    assert described.entries == []


def test_unknown_quota_keys_and_bad_values_get_invalid_request_with_a_message(kafka_admin: KafkaAdminClient) -> None:
    response = alter_with_kafka_python(kafka_admin, {"client-id": "bad"}, {"bytes_per_fortnight": 5.0})
    [entry] = response.entries
    assert entry.error_code == ErrorCode.invalid_request
    assert "bytes_per_fortnight" in entry.error_message
    response = alter_with_kafka_python(kafka_admin, {"client-id": "bad"}, {"producer_byte_rate": -1.0})
    assert response.entries[0].error_code == ErrorCode.invalid_request
    response = alter_with_kafka_python(kafka_admin, {"ip": "10.0.0.1"}, {"producer_byte_rate": 1.0})
    assert response.entries[0].error_code == ErrorCode.invalid_request
    for value in (float("nan"), float("inf"), 0.5):
        response = alter_with_kafka_python(kafka_admin, {"client-id": "bad"}, {"consumer_byte_rate": value})
        assert response.entries[0].error_code == ErrorCode.invalid_request, value
    described = describe_with_kafka_python(kafka_admin, [("client-id", 0, "bad")], strict=False)
    assert described.entries == []


def test_validate_only_checks_without_storing(kafka_admin: KafkaAdminClient) -> None:
    response = alter_with_kafka_python(kafka_admin, {"client-id": "dry-run"}, {"producer_byte_rate": 1.0},
                                       validate_only=True)
    assert response.entries[0].error_code == 0
    assert describe_with_kafka_python(kafka_admin, [("client-id", 0, "dry-run")], strict=False).entries == []


def test_a_describe_filter_kafka_refuses_gets_invalid_request(kafka_admin: KafkaAdminClient) -> None:
    described = describe_with_kafka_python(kafka_admin, [("client-id", 0, None)], strict=False)
    assert described.error_code == ErrorCode.invalid_request
    assert described.error_message


def test_the_cli_alters_and_describes_like_kafka_configs(stack: LocalStack, capsys: pytest.CaptureFixture) -> None:
    servers = ["--bootstrap-servers", stack.bootstrap_servers]
    assert main(["quotas", "alter", *servers, "--user", "bob", "--client-id-default",
                 "--add", "producer_byte_rate=2048,controller_mutation_rate=0.5"]) == 0
    assert main(["quotas", "alter", *servers, "--user", "bob", "--client-id-default",
                 "--delete", "controller_mutation_rate"]) == 0
    capsys.readouterr()
    assert main(["quotas", "describe", *servers, "--user", "bob", "--client-id-default", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"entity": {"user": "bob", "client-id": None}, "quotas": {"producer_byte_rate": 2048.0}}]
    assert main(["quotas", "alter", *servers, "--client-id", "x", "--add", "nonsense=1"]) == 1
    assert "nonsense" in capsys.readouterr().err


# ---- enforcement --------------------------------------------------------------------------------


def test_a_quota_set_through_one_broker_throttles_on_every_broker(stack: LocalStack,
                                                                  kafka_admin: KafkaAdminClient) -> None:
    set_quota(kafka_admin, "raw-producer", producer_byte_rate=1024.0)
    led = leaders(stack)
    assert set(led.values()) == {1, 2}, "the topic's partitions should be led by both brokers"
    for partition, broker_id in led.items():
        wait_until(lambda b=broker_id, p=partition: raw_produce(stack, b, p, "raw-producer", 16384)
                   > datetime.timedelta(0), f"broker {broker_id} throttles raw-producer", timeout_s=10)
    assert raw_produce(stack, led[0], 0, "raw-unlimited", 16384) == datetime.timedelta(0)


def test_a_librdkafka_producer_over_its_quota_is_throttled_and_loses_nothing(
        stack: LocalStack, kafka_admin: KafkaAdminClient) -> None:
    set_quota(kafka_admin, "slow-producer", producer_byte_rate=200_000.0)
    time.sleep(0.5)  # more than one metadata poll: every broker holds the quota
    throttles: list[float] = []
    delivered: list[Any] = []
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "client.id": "slow-producer",
                         "acks": 1, "linger.ms": 5,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    value = b"v" * 10_000
    for _ in range(120):  # 1.2 MB: three times the 400 kB burst of 3 windows
        producer.produce(TOPIC, value, partition=0, on_delivery=lambda err, msg: delivered.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert delivered == [None] * 120
    assert throttles and max(throttles) > 0


def test_a_librdkafka_consumer_over_its_quota_is_throttled_and_reads_everything(
        stack: LocalStack, kafka_admin: KafkaAdminClient) -> None:
    topic = "quota-consumed"
    run(stack, lambda client: client.create_topic(topic, partitions=1, replication_factor=1))
    records = [SimpleRecord(key=None, value=bytes([i % 256]) * 10_000) for i in range(120)]
    for start in range(0, len(records), 20):
        run(stack, lambda client, s=start: client.produce(topic, records[s:s + 20], 0))
    set_quota(kafka_admin, "slow-consumer", consumer_byte_rate=200_000.0)
    time.sleep(0.5)
    throttles: list[float] = []
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "client.id": "slow-consumer",
                         "group.id": "unused", "enable.auto.commit": False,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    deadline = time.monotonic() + 60
    while len(values) < len(records) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values == [r.value for r in records]
    assert throttles and max(throttles) > 0


def test_request_time_over_request_percentage_is_throttled(stack: LocalStack, kafka_admin: KafkaAdminClient) -> None:
    set_quota(kafka_admin, "busy-client", request_percentage=0.01)
    time.sleep(0.5)
    connection = BlockingConnection("127.0.0.1", stack.processes[1].port, client_id="busy-client")
    try:
        def throttle() -> datetime.timedelta:
            return connection.request(ApiKey.METADATA, {
                "topics": None, "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
            }).throttle_time

        wait_until(lambda: throttle() > datetime.timedelta(0), "a Metadata response carries a throttle", 10)
    finally:
        connection.close()


def test_creating_partitions_beyond_the_mutation_rate_gets_throttling_quota_exceeded(
        stack: LocalStack, kafka_admin: KafkaAdminClient) -> None:
    set_quota(kafka_admin, "mutator", controller_mutation_rate=1.0)
    time.sleep(0.5)
    # The bucket holds 11 partitions (1/s over 11 windows); one request may overdraw it.
    run(stack, lambda client: client.create_topic("mutated-a", partitions=11, wait_for_leaders=False), "mutator")
    run(stack, lambda client: client.create_topic("mutated-b", partitions=1, wait_for_leaders=False), "mutator")
    with pytest.raises(KafkaError) as refused:
        run(stack, lambda client: client.create_topic("mutated-c", partitions=1, wait_for_leaders=False), "mutator")
    assert refused.value.code == ErrorCode.throttling_quota_exceeded
    run(stack, lambda client: client.create_topic("mutated-d", partitions=1, wait_for_leaders=False), "other")


def test_a_restarted_broker_reads_the_quotas_from_dynamodb(stack: LocalStack, kafka_admin: KafkaAdminClient) -> None:
    set_quota(kafka_admin, "restarted", producer_byte_rate=1024.0)
    stack.kill_broker(2, signal.SIGTERM)
    stack.restart_broker(2)

    def throttled_on_broker_2() -> bool:
        partitions = [p for p, leader in leaders(stack).items() if leader == 2]
        try:
            return bool(partitions) and raw_produce(stack, 2, partitions[0], "restarted", 16384) > datetime.timedelta(0)
        except (AssertionError, ClientError):  # leadership still moving back
            return False

    wait_until(throttled_on_broker_2, "the restarted broker leads a partition and throttles", timeout_s=30)


def test_each_entry_of_an_alteration_succeeds_or_fails_alone(kafka_admin: KafkaAdminClient) -> None:
    entry = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(entries=[
        entry(entity=[entry.EntityData(entity_type="client-id", entity_name="good-entry")],
              ops=[entry.OpData(key="producer_byte_rate", value=5000.0, remove=False)]),
        entry(entity=[entry.EntityData(entity_type="client-id", entity_name="bad-entry")],
              ops=[entry.OpData(key="producer_byte_rate", value=-5.0, remove=False)]),
    ], validate_only=False)
    response = kafka_python_send(kafka_admin, request)
    assert [e.error_code for e in response.entries] == [ErrorCode.none, ErrorCode.invalid_request]
    described = describe_with_kafka_python(kafka_admin, [("client-id", 2, None)], strict=True)
    names = {entry.entity[0].entity_name for entry in described.entries}
    assert "good-entry" in names and "bad-entry" not in names
