"""The broker's in-memory view of the cluster: one consistent snapshot from DynamoDB, indexed.

A `MetadataImage` is built from a `ClusterSnapshot` (brokers, topics, partition states, tagged with the
metadata version) plus the controller lease's holder, and is never changed afterwards: a broker that
reads a newer snapshot (or a delta of changed partitions, `with_partitions`) builds a new image and
swaps it in whole, so a request handler that holds an
image sees one version of the cluster from start to end. Any task on the broker's event loop may read
it; nothing writes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .state import BrokerRegistration, BrokerState, ClusterSnapshot, PartitionState, TopicDescription


@dataclass
class MetadataImage:
    """Brokers by id, topics by name and by id, partition states by (topic, partition), dynamic broker configs."""

    version: int = -1
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    topics: dict[str, TopicDescription] = field(default_factory=dict)
    topics_by_id: dict[str, TopicDescription] = field(default_factory=dict)
    partitions: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    controller_id: int = -1
    # Dynamic broker configs ("<default>" and broker ids as strings), as broker_core.settings reads them.
    broker_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def from_snapshot(cls, snapshot: ClusterSnapshot, controller_id: int = -1) -> MetadataImage:
        image = cls(version=snapshot.version, controller_id=controller_id, broker_configs=snapshot.broker_configs)
        for broker in snapshot.brokers:
            image.brokers[broker.broker_id] = broker
        for topic in snapshot.topics.values():
            image.topics[topic.name] = topic
            image.topics_by_id[topic.topic_id] = topic
        for states in snapshot.partitions.values():
            for state in states:
                image.partitions[(state.topic, state.partition)] = state
        return image

    def with_partitions(self, version: int, states: Iterable[PartitionState]) -> MetadataImage | None:
        """A new image at ``version``: this one with ``states`` replacing those partitions' states
        (a metadata delta). None if a state belongs to a topic this image does not know by that
        topic id: the caller then reads a whole snapshot."""
        partitions = dict(self.partitions)
        for state in states:
            topic = self.topics_by_id.get(state.topic_id)
            if topic is None or topic.name != state.topic:
                return None
            partitions[(state.topic, state.partition)] = state
        return MetadataImage(version=version, brokers=self.brokers, topics=self.topics, topics_by_id=self.topics_by_id,
                             partitions=partitions, controller_id=self.controller_id)

    def leader_changes(self, states: Iterable[PartitionState]) -> int:
        """How many of ``states`` give their partition another leader than this image has (a partition
        the image does not know counts): what the controller's election metrics count."""
        partitions = self.partitions
        return sum(1 for state in states
                   if (known := partitions.get((state.topic, state.partition))) is None or known.leader != state.leader)

    def live_brokers(self) -> list[BrokerRegistration]:
        return [b for b in self.brokers.values() if b.state is BrokerState.RUNNING]

    def partitions_of(self, topic: str) -> list[PartitionState]:
        description = self.topics.get(topic)
        if description is None:
            return []
        return [self.partitions[(topic, p)] for p in range(description.num_partitions) if (topic, p) in self.partitions]
