"""Gauges computed from the broker's state when Prometheus scrapes: replicas, controller, connections.

Kafka keeps these as gauges that read state when the JMX exporter asks; so does this collector, on
the broker's event loop (the metrics endpoint runs there), so a scrape sees one consistent state and
the request path pays nothing for them:

- the ReplicaManager's partition, leader, under-replicated and under-min-ISR counts, and per
  partition ``kafka_cluster_partition_underreplicated`` for the partitions this broker leads;
- the controller's active controller count (1 on the lease holder) and, on it only, as Kafka, the
  offline partition count (partitions with no leader, or a leader that is not running) and the
  cluster's topic and partition counts;
- connections open by listener and principal, and refused by limit (issue 22's connection limits).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from broker_core.metadata.state import BrokerState
from broker_core.metrics.families import gauge

from .context import BrokerContext


class ConnectionCensus(Protocol):
    def connections_by_listener(self) -> dict[tuple[str, str], int]: ...

    def refused_connections(self) -> Mapping[str, int]: ...


class BrokerStateCollector(Collector):
    """The broker's replica, controller and connection gauges (see the module doc)."""

    def __init__(self, context: BrokerContext, connections: ConnectionCensus) -> None:
        self.context = context
        self.connections = connections

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield from self._replicas()
        yield from self._controller()
        yield from self._connections()

    def _replicas(self) -> Iterator[GaugeMetricFamily]:
        partitions = list(self.context.replicas.partitions.values())
        led = [p for p in partitions if p.is_leader]
        under = [p for p in led if len(p.in_sync) < len(p.replicas)]
        yield gauge("kafka_server_replicamanager_partitioncount", "Partitions with a replica on this broker",
                    values=[((), len(partitions))])
        yield gauge("kafka_server_replicamanager_leadercount", "Partitions this broker leads", values=[((), len(led))])
        yield gauge("kafka_server_replicamanager_underreplicatedpartitions",
                    "Partitions this broker leads whose ISR is smaller than their replica set",
                    values=[((), len(under))])
        yield gauge("kafka_server_replicamanager_underminisrpartitioncount",
                    "Partitions this broker leads whose ISR is below min.insync.replicas",
                    values=[((), sum(1 for p in led if len(p.in_sync) < p.min_insync_replicas))])
        yield gauge("kafka_cluster_partition_underreplicated",
                    "1 for a partition this broker leads that is under-replicated, else 0", ("topic", "partition"),
                    [((p.topic, str(p.index)), 1 if p in under else 0) for p in led])

    def _controller(self) -> Iterator[GaugeMetricFamily]:
        active = self.context.controller is not None
        yield gauge("kafka_controller_kafkacontroller_activecontrollercount",
                    "1 on the broker holding the controller lease, else 0", values=[((), 1 if active else 0)])
        offline = topics = partitions = 0
        if active:
            image = self.context.image
            running = {b.broker_id for b in image.brokers.values() if b.state is BrokerState.RUNNING}
            offline = sum(1 for state in image.partitions.values() if state.leader not in running)
            topics, partitions = len(image.topics), len(image.partitions)
        yield gauge("kafka_controller_kafkacontroller_offlinepartitionscount",
                    "On the active controller: partitions without a running leader", values=[((), offline)])
        yield gauge("kafka_controller_kafkacontroller_globaltopiccount", "On the active controller: topics",
                    values=[((), topics)])
        yield gauge("kafka_controller_kafkacontroller_globalpartitioncount", "On the active controller: partitions",
                    values=[((), partitions)])

    def _connections(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield gauge("floe_connections", "Open client connections by listener and principal", ("listener", "principal"),
                    [((listener, principal), count)
                     for (listener, principal), count in sorted(self.connections.connections_by_listener().items())])
        refused = CounterMetricFamily("floe_connections_refused",
                                      "Connections closed as soon as accepted, by the limit that refused them",
                                      labels=("reason",))
        for reason, count in sorted(self.connections.refused_connections().items()):
            refused.add_metric((reason,), count)
        yield refused
