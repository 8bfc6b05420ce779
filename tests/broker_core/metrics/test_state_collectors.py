"""Gauges computed at scrape time from broker state (replicas, controller, connections, tiering lag), and
the DynamoDB call counters against a moto server."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from broker_core.aws import AwsSettings
from broker_core.metadata.errors import BrokerFencedError
from broker_core.metadata.state import BrokerState
from broker_core.metadata.store import MetadataStore
from broker_core.metrics.aws_calls import DYNAMODB_CALLS
from broker_core.metrics.broker import BrokerMetrics
from broker_core.metrics.scrape import parse
from broker_core.server.metrics_collector import BrokerStateCollector
from tiered_storage.service import TieringService


def replica(topic: str, index: int, *, leader: bool, replicas: tuple[int, ...], isr: tuple[int, ...],
            min_isr: int = 1, segments: tuple[tuple[int, int], ...] = ()) -> SimpleNamespace:
    """A hosted replica as the collectors read it; ``segments`` are (size, next offset), the last one active."""
    log = SimpleNamespace(segments=[SimpleNamespace(size=size, next_offset=end) for size, end in segments])
    # in_sync: the ISR the leader counts (Partition.in_sync), here no member fenced.
    return SimpleNamespace(topic=topic, index=index, is_leader=leader, replicas=replicas, isr=isr, in_sync=isr,
                           min_insync_replicas=min_isr, log=log)


class Census:
    def __init__(self, open_: dict[tuple[str, str], int], refused: dict[str, int]) -> None:
        self.open, self.refused = open_, refused

    def connections_by_listener(self) -> dict[tuple[str, str], int]:
        return self.open

    def refused_connections(self) -> dict[str, int]:
        return self.refused


def state(partitions: list[SimpleNamespace], *, controller: bool, leaders: dict[tuple[str, int], int],
          running: set[int]) -> SimpleNamespace:
    image = SimpleNamespace(
        brokers={b: SimpleNamespace(broker_id=b, state=BrokerState.RUNNING if b in running else BrokerState.FENCED)
                 for b in (1, 2, 3)},
        partitions={key: SimpleNamespace(leader=leader) for key, leader in leaders.items()},
        topics={topic for topic, _ in leaders})
    return SimpleNamespace(replicas=SimpleNamespace(partitions={(p.topic, p.index): p for p in partitions}),
                           controller=object() if controller else None, image=image)


def collected(collector: object) -> object:
    metrics = BrokerMetrics()
    metrics.add_collector(collector)
    return parse("test", metrics.exposition().decode())


def test_replica_gauges_count_what_this_broker_hosts_and_leads() -> None:
    partitions = [replica("a", 0, leader=True, replicas=(1, 2), isr=(1,), min_isr=2),
                  replica("a", 1, leader=True, replicas=(1, 2), isr=(1, 2)),
                  replica("b", 0, leader=False, replicas=(2, 1), isr=(2,))]
    context = state(partitions, controller=False, leaders={("a", 0): 1, ("a", 1): 1, ("b", 0): 3}, running={1, 2})
    scraped = collected(BrokerStateCollector(context, Census({}, {})))
    assert scraped.value("kafka_server_replicamanager_partitioncount") == 3
    assert scraped.value("kafka_server_replicamanager_leadercount") == 2
    assert scraped.value("kafka_server_replicamanager_underreplicatedpartitions") == 1
    assert scraped.value("kafka_server_replicamanager_underminisrpartitioncount") == 1
    assert scraped.value("kafka_cluster_partition_underreplicated", topic="a", partition="0") == 1
    assert scraped.value("kafka_cluster_partition_underreplicated", topic="a", partition="1") == 0
    # Only the active controller reports offline partitions, as Kafka.
    assert scraped.value("kafka_controller_kafkacontroller_activecontrollercount") == 0
    assert scraped.value("kafka_controller_kafkacontroller_offlinepartitionscount") == 0


def test_the_active_controller_counts_partitions_without_a_running_leader_as_offline() -> None:
    context = state([], controller=True, leaders={("a", 0): 1, ("a", 1): -1, ("b", 0): 3}, running={1, 2})
    scraped = collected(BrokerStateCollector(context, Census({}, {})))
    assert scraped.value("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert scraped.value("kafka_controller_kafkacontroller_offlinepartitionscount") == 2
    assert scraped.value("kafka_controller_kafkacontroller_globalpartitioncount") == 3


def test_connections_are_reported_by_listener_and_principal_and_refusals_by_limit() -> None:
    census = Census({("PLAINTEXT", "User:ANONYMOUS"): 3, ("SASL_SSL", "User:alice"): 2},
                    Counter({"max.connections.per.ip": 4}))
    scraped = collected(BrokerStateCollector(state([], controller=False, leaders={}, running=set()), census))
    assert scraped.value("floe_connections", listener="SASL_SSL", principal="User:alice") == 2
    assert scraped.value("floe_connections", listener="PLAINTEXT", principal="User:ANONYMOUS") == 3
    assert scraped.value("floe_connections_refused_total", reason="max.connections.per.ip") == 4


def test_tiering_lag_is_the_sealed_bytes_above_the_remote_end_of_partitions_led_here() -> None:
    tiered = replica("t", 0, leader=True, replicas=(1,), isr=(1,),
                     segments=((100, 10), (200, 20), (300, 30), (999, 35)))  # the last one is active
    followed = replica("t", 1, leader=False, replicas=(2, 1), isr=(2, 1), segments=((100, 10), (1, 11)))
    service = TieringService.__new__(TieringService)
    service.context = SimpleNamespace(replicas=SimpleNamespace(partitions={("t", 0): tiered, ("t", 1): followed}))
    service._topic_is_tiered = lambda topic: topic == "t"
    service._uploaders = {("t", 0): SimpleNamespace(remote_end_offset=9)}
    assert service.lag_bytes() == [(("t", 0), 500)]  # segments ending at 19 and 29; 9 is in S3
    service._uploaders = {}
    assert service.lag_bytes() == [(("t", 0), 600)]  # before the manifest is read, every sealed byte


def test_dynamodb_calls_are_counted_by_table_with_conditional_failures_apart(aws_settings: AwsSettings) -> None:
    store = MetadataStore(aws_settings)
    store.ensure_tables()
    table = next(name for name in _tables_with(aws_settings.table_prefix) if name.endswith("brokers"))

    def count(counter: object) -> float:
        return sum(s.value for m in counter.collect() for s in m.samples
                   if s.name.endswith("_total") and s.labels == {"table": table, "operation": "UpdateItem"})

    requests, failures = count(DYNAMODB_CALLS.requests), count(DYNAMODB_CALLS.conditional_failures)
    with pytest.raises(BrokerFencedError):
        store.heartbeat_broker(7, 42)  # no such registration: the condition fails
    assert count(DYNAMODB_CALLS.requests) == requests + 1
    assert count(DYNAMODB_CALLS.conditional_failures) == failures + 1


def _tables_with(prefix: str) -> list[str]:
    return sorted({s.labels["table"] for m in DYNAMODB_CALLS.requests.collect() for s in m.samples
                   if s.labels.get("table", "").startswith(prefix)})
