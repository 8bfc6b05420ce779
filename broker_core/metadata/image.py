"""The broker's in-memory view of the cluster: one consistent snapshot from DynamoDB, indexed.

A `MetadataImage` is built from a `ClusterSnapshot` (brokers, topics, partition states, tagged with the
metadata version) plus the controller lease's holder, and is never changed afterwards: a broker that
reads a newer snapshot (or a delta of the change sequence, `with_delta`) builds a new image and
swaps it in whole, so a request handler that holds an
image sees one version of the cluster from start to end. Any task on the broker's event loop may read
it; nothing writes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from .state import (
    BrokerRegistration,
    BrokerState,
    ClusterSnapshot,
    MetadataDelta,
    PartitionState,
    TopicDescription,
)


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

    def with_delta(self, version: int, delta: MetadataDelta) -> MetadataImage | None:
        """A new image at ``version``: this one with ``delta`` applied (topics deleted with their
        partitions, topics created or changed, partition states replaced, broker registrations and
        states, the controller). None if the delta does not fit this image (a partition of a topic id
        it does not know, a topic name it holds under another id that the delta does not delete, a
        state change of a registration it does not hold): the caller then reads a whole snapshot."""
        topics = dict(self.topics)
        topics_by_id = dict(self.topics_by_id)
        partitions = dict(self.partitions)
        for topic_id in delta.deleted_topic_ids:
            gone = topics_by_id.pop(topic_id, None)
            if gone is None or topics.get(gone.name) is not gone:
                continue
            del topics[gone.name]
            for index in range(gone.num_partitions):
                partitions.pop((gone.name, index), None)
        for name, topic in delta.topics.items():
            held = topics.get(name)
            if held is not None and held.topic_id != topic.topic_id:
                return None
            topics[name] = topics_by_id[topic.topic_id] = topic
        for state in delta.partitions.values():
            topic = topics_by_id.get(state.topic_id)
            if topic is None or topic.name != state.topic:
                return None
            if state.partition < topic.num_partitions:
                partitions[(state.topic, state.partition)] = state
        brokers = self.brokers
        if delta.brokers or delta.broker_states:
            applied = delta.apply_to_brokers(self.brokers.values())
            if applied is None:
                return None
            brokers = {b: applied[b] for b in sorted(applied)}
        controller_id = self.controller_id if delta.controller_id is None else delta.controller_id
        return replace(self, version=version, brokers=brokers, topics=topics, topics_by_id=topics_by_id,
                       partitions=partitions, controller_id=controller_id)

    def to_snapshot(self) -> ClusterSnapshot:
        """This image as a `ClusterSnapshot` at its version: what a controller starting its term from
        the broker's own view of the cluster begins with (instead of reading every partition)."""
        grouped: dict[str, list[PartitionState]] = {name: [] for name in self.topics}
        for (name, _), state in self.partitions.items():
            if name in grouped:
                grouped[name].append(state)
        return ClusterSnapshot(version=self.version, brokers=tuple(self.brokers[b] for b in sorted(self.brokers)),
                               topics=dict(self.topics),
                               partitions={name: tuple(sorted(states, key=lambda p: p.partition))
                                           for name, states in grouped.items()},
                               broker_configs=self.broker_configs)

    def keys_changed_by(self, delta: MetadataDelta) -> set[tuple[str, int]]:
        """The (topic, partition) keys whose replica `delta` may change when applied to this image:
        its partition states, every partition of a topic it creates, changes (configs apply to every
        replica) or deletes."""
        keys = {(state.topic, state.partition) for state in delta.partitions.values()}
        for topic_id in delta.deleted_topic_ids:
            gone = self.topics_by_id.get(topic_id)
            if gone is not None:
                keys.update((gone.name, index) for index in range(gone.num_partitions))
        for name, topic in delta.topics.items():
            keys.update((name, index) for index in range(topic.num_partitions))
        return keys

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
