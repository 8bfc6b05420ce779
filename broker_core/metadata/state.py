"""Plain, immutable views of cluster metadata handed out by the metadata store.

These frozen dataclasses are what brokers cache and pass around; they never hold a DynamoDB
connection, so they are safe to share between threads and the event loop. The pynamodb items they
are read from stay inside ``broker_core.metadata``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from broker_core.security.principal import ANONYMOUS

NO_LEADER = -1
NO_HOLDER = -1
UNCLEAN_LEADER_ELECTION_CONFIG = "unclean.leader.election.enable"


class BrokerState(enum.Enum):
    """Lifecycle of one broker registration (one broker epoch)."""

    RUNNING = "RUNNING"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    FENCED = "FENCED"


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    broker_epoch: int
    host: str
    port: int
    rack: str | None
    state: BrokerState
    heartbeat: int
    registered_at_ms: int
    # Every listener's advertised endpoint, (name, host, port); host and port above are the
    # inter-broker listener's. Empty for a registration written before listeners were named.
    endpoints: tuple[tuple[str, str, int], ...] = ()
    # The principal the broker authenticates as to its peers: with an authorizer, the only one whose
    # replica requests naming this broker id are trusted (trusted replication, docs/security.md).
    principal: str = ANONYMOUS

    def endpoint(self, listener_name: str) -> tuple[str, int]:
        """(host, port) on the listener named, falling back to the inter-broker one."""
        for name, host, port in self.endpoints:
            if name == listener_name:
                return host, port
        return self.host, self.port


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: str
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str]
    created_at_ms: int
    config_version: int = 0


@dataclass(frozen=True)
class PartitionState:
    """Replica assignment, leadership and ISR of one partition.

    ``leader_epoch`` changes only when the leader changes; ``partition_epoch`` changes on every
    update and is the version a conditional update must name. ``leader`` is NO_LEADER (-1) when no
    replica may lead. During a reassignment (KIP-455) ``replicas`` holds the target replicas followed
    by those being removed; ``adding_replicas`` are the targets not yet fully in the ISR and
    ``removing_replicas`` those that leave when the move completes; both are empty otherwise.
    """

    topic: str
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas the partition has once an ongoing reassignment completes (``replicas`` otherwise)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas the partition had before an ongoing reassignment (what a cancel goes back to)."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    def with_leader(self, leader: int, isr: Iterable[int]) -> PartitionState:
        """A proposed state with a new leader and ISR; bumps the leader epoch if the leader changes."""
        new_isr = tuple(isr)
        if leader == self.leader:
            return replace(self, isr=new_isr)
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=new_isr)

    def with_isr(self, isr: Iterable[int]) -> PartitionState:
        """A proposed state with the same leader and a new ISR (the AlterPartition shape)."""
        return replace(self, isr=tuple(isr))


@dataclass(frozen=True)
class MetadataDelta:
    """What a run of metadata versions changed, as the change sequence carries it: topics created or
    changed (by name, each as of the last version), topic ids deleted, partition states (by topic
    id and partition, each as of the last version), broker registrations and broker state changes
    (fencing, controlled shutdown), and the broker that took the controller lease. A new topic's or CreatePartitions' partitions are
    in ``partitions`` too, so a reader never reads a partition item for them.

    `then` appends a later version's delta; `ClusterSnapshot.with_delta` and
    ``MetadataImage.with_delta`` apply one. Sans-I/O: the store reads and decodes the change items.
    """

    topics: Mapping[str, TopicDescription] = field(default_factory=dict)
    deleted_topic_ids: frozenset[str] = frozenset()
    partitions: Mapping[tuple[str, int], PartitionState] = field(default_factory=dict)
    # Broker registrations written (a broker registering), by broker id.
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=dict)
    # Registrations moved to another state (fenced, shutting down): broker id -> (broker epoch, state).
    broker_states: Mapping[int, tuple[int, BrokerState]] = field(default_factory=dict)
    # The broker that took the controller lease, when one did.
    controller_id: int | None = None

    def then(self, later: MetadataDelta) -> MetadataDelta:
        """This delta followed by ``later``: a topic deleted by ``later`` drops what this one says of
        it, and what ``later`` says of a topic, partition or broker replaces what this one says."""
        gone = later.deleted_topic_ids
        topics = {name: t for name, t in self.topics.items() if t.topic_id not in gone}
        topics.update(later.topics)
        partitions = {key: s for key, s in self.partitions.items() if s.topic_id not in gone}
        partitions.update(later.partitions)
        brokers = {b: r for b, r in self.brokers.items() if b not in later.brokers}
        broker_states = {b: s for b, s in self.broker_states.items() if b not in later.brokers}
        brokers.update(later.brokers)
        for broker_id, (epoch, state) in later.broker_states.items():
            registered = brokers.get(broker_id)
            if registered is not None and registered.broker_epoch == epoch:
                brokers[broker_id] = replace(registered, state=state)
            else:
                broker_states[broker_id] = (epoch, state)
        return MetadataDelta(topics=topics, deleted_topic_ids=self.deleted_topic_ids | gone, partitions=partitions,
                             brokers=brokers, broker_states=broker_states,
                             controller_id=self.controller_id if later.controller_id is None else later.controller_id)

    def apply_to_brokers(self, held: Iterable[BrokerRegistration]) -> dict[int, BrokerRegistration] | None:
        """The registrations ``held`` (by broker id) with this delta's applied; None when a state
        change names a registration not held at that broker epoch (the caller reads everything)."""
        brokers = {b.broker_id: b for b in held}
        brokers.update(self.brokers)
        for broker_id, (epoch, state) in self.broker_states.items():
            registered = brokers.get(broker_id)
            if registered is None or registered.broker_epoch != epoch:
                return None
            brokers[broker_id] = replace(registered, state=state)
        return brokers


@dataclass(frozen=True)
class ClusterSnapshot:
    """Brokers, topics and partitions read together with consistent reads.

    Every change made up to and including metadata ``version`` is visible; changes made after the
    version was read may be visible too, and they bump the version, so a cache that re-reads when
    the version moves past ``version`` never misses one.
    """

    version: int
    brokers: tuple[BrokerRegistration, ...]
    topics: Mapping[str, TopicDescription]
    partitions: Mapping[str, tuple[PartitionState, ...]] = field(default_factory=dict)
    # Dynamic broker configs: "<default>" and broker ids (as strings) to their settings.
    broker_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def live_brokers(self) -> tuple[BrokerRegistration, ...]:
        return tuple(b for b in self.brokers if b.state is BrokerState.RUNNING)

    def with_delta(self, version: int, delta: MetadataDelta) -> ClusterSnapshot | None:
        """This snapshot at ``version`` with ``delta`` applied: deleted topics gone with their
        partitions, created or changed topics in place, partition states replaced. None when the delta
        does not fit this snapshot (a partition of a topic id it does not hold, a topic name held
        under another id that the delta does not delete): the caller reads a whole snapshot."""
        topics = {name: t for name, t in self.topics.items() if t.topic_id not in delta.deleted_topic_ids}
        for name, topic in delta.topics.items():
            held = topics.get(name)
            if held is not None and held.topic_id != topic.topic_id:
                return None
            topics[name] = topic
        # A topic's partitions stay only while the topic is held under the same id.
        partitions = {name: states for name, states in self.partitions.items()
                      if name in topics and all(p.topic_id == topics[name].topic_id for p in states[:1])}
        grouped: dict[str, dict[int, PartitionState]] = {}
        for state in delta.partitions.values():
            topic = topics.get(state.topic)
            if topic is None or topic.topic_id != state.topic_id:
                return None
            if state.topic not in grouped:
                grouped[state.topic] = {p.partition: p for p in partitions.get(state.topic, ())}
            grouped[state.topic][state.partition] = state
        for name in delta.topics:
            grouped.setdefault(name, {p.partition: p for p in partitions.get(name, ())})
        for name, by_index in grouped.items():
            # A partition at or above its topic's count is one CreatePartitions is still adding.
            count = topics[name].num_partitions
            partitions[name] = tuple(by_index[i] for i in sorted(by_index) if i < count)
        for name in topics:
            partitions.setdefault(name, ())
        brokers = self.brokers
        if delta.brokers or delta.broker_states:
            applied = delta.apply_to_brokers(self.brokers)
            if applied is None:
                return None
            brokers = tuple(applied[b] for b in sorted(applied))
        return replace(self, version=version, brokers=brokers, topics=topics, partitions=partitions)


@dataclass(frozen=True)
class ControllerLeaseState:
    """The controller lease item as last read; ``holder`` is NO_HOLDER (-1) once released."""

    holder: int
    controller_epoch: int
    heartbeat: int
    lease_duration_ms: int


class ProducerIdBlock(NamedTuple):
    """Producer ids ``range(start, end)``: start inclusive, end exclusive."""

    start: int
    end: int
