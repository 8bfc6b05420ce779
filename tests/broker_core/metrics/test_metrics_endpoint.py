"""Every broker of a local stack serves Prometheus metrics at its stack.json ``metrics_url``; after a
known workload the counts there are exact: records in per topic (counted once, by the leader), a
refused produce, requests of one API sent a known number of times, consumer lag in offsets of a
group that committed known offsets, and its time lag. Killing a broker makes the partitions it
replicated under-replicated on the survivor (a faults test: it takes the stack down to one broker)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker_core.cli import main
from broker_core.client.blocking import BlockingConnection
from broker_core.groups.admin import GroupAdmin, OffsetReset
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.metrics.scrape import Scrape, scrape
from broker_core.protocol.api_keys import ApiKey
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

RECORDS_PER_PARTITION = 60
GROUP = "metrics-lagging"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("metrics"), brokers=2) as running:
        yield running


def metrics_urls(stack: LocalStack) -> dict[int, str]:
    described = json.loads((stack.directory / "stack.json").read_text())
    return {broker["id"]: broker["metrics_url"] for broker in described["brokers"]}


def scrape_all(stack: LocalStack) -> dict[int, Scrape]:
    return {broker_id: scrape(url) for broker_id, url in metrics_urls(stack).items()}


def cluster_total(scrapes: dict[int, Scrape], name: str, **labels: str) -> float:
    return sum(s.total(name, **labels) for s in scrapes.values())


def create_topic(stack: LocalStack, topic: str, partitions: int, replicas: int) -> None:
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, replicas)])[topic].result(timeout=60)
    store = MetadataStore(stack.aws)
    wait_until(lambda: all(len(store.get_partition(topic, p).isr) == replicas for p in range(partitions)),
               f"{topic} has {replicas} in-sync replicas", 60)


def produce(stack: LocalStack, topic: str, partitions: int, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all", "linger.ms": 5})
    for i in range(per_partition * partitions):
        producer.produce(topic, key=f"k{i}".encode(), value=b"v" * 100, partition=i % partitions)
    assert producer.flush(30) == 0


def commit(stack: LocalStack, group: str, topic: str, offsets: dict[int, int]) -> None:
    with GroupAdmin(stack.bootstrap_servers) as admin:
        admin.commit_offset_reset(group, [OffsetReset(topic, p, -1, offset) for p, offset in offsets.items()])


def group_series(stack: LocalStack, name: str, group: str, topic: str) -> dict[int, float]:
    """The group's samples named ``name`` by partition, from whichever broker reports them."""
    found: dict[int, float] = {}
    for s in scrape_all(stack).values():
        for sample in s.series(name, group=group, topic=topic):
            found[int(sample.labels["partition"])] = sample.value
    return found


def test_every_broker_serves_metrics_at_its_stack_json_url(stack: LocalStack) -> None:
    scrapes = scrape_all(stack)
    assert sorted(scrapes) == [1, 2]

    def one_controller() -> dict[int, Scrape] | None:
        # A controller that lost its lease learns it at its next renewal (its writes are fenced by the
        # controller epoch meanwhile), so under load both brokers may say 1 for a moment after start.
        latest = scrape_all(stack)
        counts = [s.value("kafka_controller_kafkacontroller_activecontrollercount") for s in latest.values()]
        return latest if sorted(counts) == [0.0, 1.0] else None

    scrapes = wait_until(one_controller, "exactly one broker reports itself the active controller", 30)
    for s in scrapes.values():
        assert s.value("kafka_controller_kafkacontroller_offlinepartitionscount") == 0
        assert s.total("floe_dynamodb_requests_total") > 0  # registration, heartbeats, metadata polls


def test_records_in_are_counted_once_per_topic_by_the_leaders(stack: LocalStack) -> None:
    create_topic(stack, "metrics-in", partitions=2, replicas=2)
    produce(stack, "metrics-in", 2, RECORDS_PER_PARTITION)
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "metrics-reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("metrics-in", p, 0) for p in range(2)])
    read = 0
    deadline = time.monotonic() + 30
    while read < 2 * RECORDS_PER_PARTITION and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            read += 1
    consumer.close()
    assert read == 2 * RECORDS_PER_PARTITION

    scrapes = scrape_all(stack)
    assert cluster_total(scrapes, "kafka_server_brokertopicmetrics_messagesin_total", topic="metrics-in") == 120
    bytes_in = cluster_total(scrapes, "kafka_server_brokertopicmetrics_bytesin_total", topic="metrics-in")
    assert bytes_in > 120 * 100
    # A consumer read every batch at least once from the leaders; followers' fetches are not BytesOut.
    assert cluster_total(scrapes, "kafka_server_brokertopicmetrics_bytesout_total", topic="metrics-in") >= bytes_in
    assert cluster_total(scrapes, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic="metrics-in") == 0
    # Each broker leads one partition (or one leads both) and hosts both replicas.
    assert sum(s.value("kafka_server_replicamanager_leadercount") for s in scrapes.values()) >= 2
    for s in scrapes.values():
        assert s.value("kafka_server_replicamanager_partitioncount") >= 2
        assert s.value("kafka_server_replicamanager_underreplicatedpartitions") == 0
        assert s.total("kafka_network_requestmetrics_totaltimems_count", request="FetchFollower") > 0
    assert cluster_total(scrapes, "kafka_network_requestmetrics_totaltimems_count", request="Produce") >= 1
    assert cluster_total(scrapes, "kafka_network_requestmetrics_remotetimems_count", request="Produce") >= 1


def test_a_refused_produce_counts_as_a_failed_produce_request_of_its_topic(stack: LocalStack) -> None:
    create_topic(stack, "metrics-refused", partitions=1, replicas=1)
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "message.max.bytes": 4_000_000,
                         "retries": 0})
    errors = []
    producer.produce("metrics-refused", value=b"x" * 2_000_000, on_delivery=lambda err, _: errors.append(err))
    producer.flush(30)
    assert len(errors) == 1 and errors[0] is not None  # MSG_SIZE_TOO_LARGE from the broker
    scrapes = scrape_all(stack)
    assert cluster_total(scrapes, "kafka_server_brokertopicmetrics_failedproducerequests_total",
                         topic="metrics-refused") == 1
    assert cluster_total(scrapes, "kafka_server_brokertopicmetrics_messagesin_total", topic="metrics-refused") == 0


def test_requests_of_an_api_are_counted_exactly_on_the_broker_that_answered(stack: LocalStack) -> None:
    before = scrape(metrics_urls(stack)[2]).value("kafka_network_requestmetrics_requests_total",
                                                   request="DescribeClientQuotas", version="1") or 0
    connection = BlockingConnection(stack.host, stack.processes[2].port)
    try:
        for _ in range(7):
            connection.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {"components": [], "strict": False}, version=1)
    finally:
        connection.close()
    after = scrape(metrics_urls(stack)[2])
    assert after.value("kafka_network_requestmetrics_requests_total",
                       request="DescribeClientQuotas", version="1") == before + 7
    assert after.value("kafka_network_requestmetrics_totaltimems_count", request="DescribeClientQuotas") == before + 7
    assert after.value("kafka_network_requestmetrics_requestqueuetimems_count",
                       request="DescribeClientQuotas") == before + 7


def test_the_group_coordinator_reports_lag_in_offsets_and_seconds(stack: LocalStack) -> None:
    create_topic(stack, "metrics-lag", partitions=2, replicas=2)
    commit(stack, GROUP, "metrics-lag", {0: 0, 1: 0})
    # A sample of the empty partitions, then one after the records arrived: the timeline the time lag
    # is interpolated on.
    wait_until(lambda: group_series(stack, "kafka_consumergroup_lag", GROUP, "metrics-lag") == {0: 0, 1: 0},
               "a lag sample of the empty topic", 30)
    started = time.time()
    produce(stack, "metrics-lag", 2, RECORDS_PER_PARTITION)
    wait_until(lambda: group_series(stack, "kafka_consumergroup_lag", GROUP, "metrics-lag") == {0: 60, 1: 60},
               lambda: f"lag 60 on both partitions, got {group_series(stack, 'kafka_consumergroup_lag', GROUP, 'metrics-lag')}",
               30)
    commit(stack, GROUP, "metrics-lag", {0: 20, 1: 60})
    wait_until(lambda: group_series(stack, "kafka_consumergroup_lag", GROUP, "metrics-lag") == {0: 40, 1: 0},
               "lag 40 and 0 after the commit", 30)
    seconds = group_series(stack, "kafka_consumergroup_lag_seconds", GROUP, "metrics-lag")
    assert seconds[1] == 0
    assert 0 < seconds[0] <= time.time() - started + 1
    assert group_series(stack, "kafka_consumergroup_current_offset", GROUP, "metrics-lag") == {0: 20, 1: 60}
    # One broker, the group's coordinator, reports it.
    reporting = [broker_id for broker_id, s in scrape_all(stack).items()
                 if any(s.series("kafka_consumergroup_lag", group=GROUP))]
    assert len(reporting) == 1


def test_groups_describe_shows_the_lag_in_offsets_and_seconds(stack: LocalStack,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # Runs after the lag test, which left GROUP 40 records behind on partition 0 of metrics-lag.
    capsys.readouterr()
    assert main(["groups", "describe", GROUP, "--format", "json", "--stack", str(stack.directory)]) == 0
    described = json.loads(capsys.readouterr().out)
    partitions = {p["partition"]: p for p in described["partitions"] if p["topic"] == "metrics-lag"}
    assert (partitions[0]["lag"], partitions[1]["lag"]) == (40, 0)
    assert partitions[0]["lag_seconds"] > 0 and partitions[1]["lag_seconds"] == 0
    assert main(["groups", "describe", GROUP, "--stack", str(stack.directory)]) == 0
    assert "lag (s)" in capsys.readouterr().out


def test_floe_top_shows_each_topic_with_its_lag(stack: LocalStack, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["top", "--once", "--interval", "0.2", "--stack", str(stack.directory)]) == 0
    out = capsys.readouterr().out
    assert "brokers answering 2/2" in out
    row = next(line for line in out.splitlines() if "metrics-lag" in line)
    assert "40" in row  # the group's lag, summed over the topic's partitions


@pytest.mark.faults
def test_partitions_become_under_replicated_on_the_survivor_when_a_broker_dies(stack: LocalStack) -> None:
    create_topic(stack, "metrics-urp", partitions=2, replicas=2)
    stack.kill_broker(2)
    survivor = metrics_urls(stack)[1]

    def under_replicated() -> Scrape | None:
        try:
            s = scrape(survivor)
        except Exception:
            return None
        urp = s.series("kafka_cluster_partition_underreplicated", topic="metrics-urp")
        return s if sorted(int(x.labels["partition"]) for x in urp if x.value == 1) == [0, 1] else None

    s = wait_until(under_replicated, "both partitions under-replicated on broker 1", 60)
    assert s.value("kafka_server_replicamanager_underreplicatedpartitions") >= 2
    assert s.value("kafka_controller_kafkacontroller_activecontrollercount") == 1
    # Offline: the partitions whose only replica was on broker 2 (metrics-refused has one replica, on
    # either broker, when the earlier tests ran); none of metrics-urp, which keeps a leader.
    snapshot = MetadataStore(stack.aws).snapshot()
    only_on_the_dead = sum(1 for states in snapshot.partitions.values() for p in states if tuple(p.replicas) == (2,))
    assert s.value("kafka_controller_kafkacontroller_offlinepartitionscount") == only_on_the_dead
    # The survivor leads every partition it hosts: the controller moved the dead broker's leaderships.
    assert s.value("kafka_server_replicamanager_leadercount") == s.value("kafka_server_replicamanager_partitioncount")
