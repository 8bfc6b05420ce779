"""MetadataTables: the four cluster-metadata tables, their transactions and the metadata version.

The base of every part of the metadata store (``broker_core.metadata.brokers``, ``.topics``,
``.producer_ids``, assembled in ``broker_core.metadata.store``): it binds the pynamodb models to one
deployment, creates the tables, and runs transactions. Every metadata change bumps the metadata
version in the same DynamoDB transaction (`add_version_bump`), so a broker that sees the version
unchanged knows nothing it caches has changed; controller writes also carry a condition check on the
controller lease's epoch (`add_controller_check`). Transactions that conflict with others or are
throttled are retried with bounded, jittered backoff (``broker_core.retry``) and surface as
MetadataConflictError when the retries run out; DynamoDB failures that no condition explains surface
as MetadataUnavailableError (`metadata_failures`).

Thread-safety: holds no mutable state of its own and may be shared by threads; pynamodb is
synchronous, so brokers call it from worker threads, never from the event loop.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

from pynamodb.transactions import TransactWrite

from broker_core.aws import AwsSettings
from broker_core.dynamodb_tables import CONDITION_FAILED, ensure_tables, failures_as, transact
from broker_core.metadata.errors import MetadataConflictError, MetadataError, MetadataUnavailableError
from broker_core.metadata.models import (
    CHANGE_ITEM_PREFIX,
    CONTROLLER_ITEM,
    METADATA_VERSION_ITEM,
    BoundModels,
    bind_models,
)
from broker_core.metadata.state import (
    BrokerRegistration,
    BrokerState,
    MetadataDelta,
    PartitionState,
    TopicDescription,
)
from broker_core.retry import LostRace, retry_lost_races

# Partition items per Scan/Query page (about 60 KB): many short requests rather than one that runs into
# the client's read timeout when the store answers slowly (the local stack's moto under load).
PARTITION_PAGE_SIZE = 250
# How long change items stay (DynamoDB TTL); a broker further behind than that reads everything.
CHANGE_RETENTION_S = 3600
# A broker more than this many versions behind reads everything rather than that many change items.
MAX_DELTA_VERSIONS = 100
# A change whose item would be larger (DynamoDB's item limit is 400 KB) writes none: readers read everything.
MAX_CHANGE_ITEM_BYTES = 350_000

metadata_failures = failures_as(MetadataUnavailableError, MetadataError)


def encode_partition_states(states: Sequence[PartitionState]) -> str:
    """The ``states`` of a change item: one JSON list of fields per partition state."""
    return json.dumps([[s.topic, s.topic_id, s.partition, list(s.replicas), s.leader, s.leader_epoch,
                        s.partition_epoch, list(s.isr), list(s.adding_replicas), list(s.removing_replicas)]
                       for s in states], separators=(",", ":"))


def encode_topic_changes(changed: Sequence[tuple[TopicDescription, int, Sequence[Sequence[int]]]] = (),
                         deleted: Sequence[str] = ()) -> str:
    """The ``topics`` of a change item: each topic created or changed, with the partition number its
    new partitions start at and their replica lists (none for a config change), and the topic ids
    deleted."""
    return json.dumps({"set": [[t.name, t.topic_id, t.num_partitions, t.replication_factor, dict(t.configs),
                                t.created_at_ms, t.config_version, first, [list(r) for r in replicas]]
                               for t, first, replicas in changed],
                       "deleted": list(deleted)}, separators=(",", ":"))


def decode_topic_changes(text: str) -> MetadataDelta:
    decoded = json.loads(text)
    topics: dict[str, TopicDescription] = {}
    partitions: dict[tuple[str, int], PartitionState] = {}
    for name, topic_id, count, replication, configs, created_at_ms, config_version, first, assigned in decoded["set"]:
        topics[name] = TopicDescription(name=name, topic_id=topic_id, num_partitions=count,
                                        replication_factor=replication, configs=configs,
                                        created_at_ms=created_at_ms, config_version=config_version)
        for index, replicas in enumerate(assigned, start=first):
            partitions[(topic_id, index)] = PartitionState(
                topic=name, topic_id=topic_id, partition=index, replicas=tuple(replicas), leader=replicas[0],
                leader_epoch=0, partition_epoch=0, isr=tuple(replicas))
    return MetadataDelta(topics=topics, deleted_topic_ids=frozenset(decoded["deleted"]), partitions=partitions)


def encode_broker_changes(registered: Sequence[BrokerRegistration] = (),
                          states: Sequence[tuple[int, int, BrokerState]] = (), controller: int | None = None) -> str:
    """The ``brokers`` of a change item: registrations written (every field), state changes (broker id,
    broker epoch, state) and the broker that took the controller lease (or null)."""
    return json.dumps({"registered": [[b.broker_id, b.broker_epoch, b.host, b.port, b.rack, b.state.value, b.heartbeat,
                                       b.registered_at_ms, [list(e) for e in b.endpoints], b.principal]
                                      for b in registered],
                       "states": [[broker_id, epoch, state.value] for broker_id, epoch, state in states],
                       "controller": controller}, separators=(",", ":"))


def decode_broker_changes(text: str) -> MetadataDelta:
    decoded = json.loads(text)
    brokers = {broker_id: BrokerRegistration(
        broker_id=broker_id, broker_epoch=epoch, host=host, port=port, rack=rack, state=BrokerState(state),
        heartbeat=heartbeat, registered_at_ms=registered_at_ms, endpoints=tuple(tuple(e) for e in endpoints),
        principal=principal)
        for broker_id, epoch, host, port, rack, state, heartbeat, registered_at_ms, endpoints, principal
        in decoded["registered"]}
    states = {broker_id: (epoch, BrokerState(state)) for broker_id, epoch, state in decoded["states"]}
    return MetadataDelta(brokers=brokers, broker_states=states, controller_id=decoded["controller"])


def decode_partition_states(text: str) -> list[PartitionState]:
    return [PartitionState(topic=topic, topic_id=topic_id, partition=partition, replicas=tuple(replicas),
                           leader=leader, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                           isr=tuple(isr), adding_replicas=tuple(adding), removing_replicas=tuple(removing))
            for topic, topic_id, partition, replicas, leader, leader_epoch, partition_epoch, isr, adding, removing
            in json.loads(text)]
"""Decorator of store methods: pynamodb/botocore failures become MetadataUnavailableError."""


class MetadataTables:
    """Cluster metadata in four DynamoDB tables named ``settings.table_prefix`` + base name."""

    def __init__(self, settings: AwsSettings) -> None:
        self.settings = settings
        self.models: BoundModels = bind_models(settings)

    # -- tables ------------------------------------------------------------------------------

    @metadata_failures
    def ensure_tables(self) -> None:
        """Create any missing metadata table (on-demand billing) and wait until all are ACTIVE.

        Safe to call from several brokers at once: a table another broker is creating is waited for.
        """
        ensure_tables(self.models.one_model_per_table(), MetadataUnavailableError)

    # -- transactions ------------------------------------------------------------------------

    def transact(self, what: str, build: Callable[[TransactWrite], None]) -> list[str | None] | None:
        """Run the transaction ``build`` fills; None when it committed.

        When a condition failed, returns the cancellation code of each item in the order ``build``
        added them ("ConditionalCheckFailed" for the failed ones, None for the others); nothing was
        written. Conflicts with other transactions and throttling are retried with backoff; when
        they outlast the retries, MetadataConflictError names ``what``.
        """
        return transact(self.models.connection, build, lambda attempts: MetadataConflictError(what, attempts))

    def add_controller_check(self, transaction: TransactWrite, controller_epoch: int) -> None:
        """Make ``transaction`` conditional on the controller lease still carrying ``controller_epoch``."""
        lease = self.models.controller_lease
        transaction.condition_check(
            lease, CONTROLLER_ITEM, condition=lease.controller_epoch == controller_epoch
        )

    def add_version_bump(self, transaction: TransactWrite) -> None:
        version = self.models.metadata_version
        transaction.update(version(METADATA_VERSION_ITEM), actions=[version.version.add(1)])

    def transact_partition_change(self, what: str, build: Callable[[TransactWrite], None],
                                  keys: Sequence[str], states: Sequence[PartitionState] | None = None
                                  ) -> list[str | None] | None:
        """Run a transaction that changes only the partitions named by ``keys`` (``<topic id>:<n>``),
        numbered in the change sequence (`transact_change`), its change item naming ``keys`` and
        carrying ``states`` (the states ``build`` writes, one per key), so brokers need not read the
        partitions at all."""
        return self.transact_change(what, build, keys=keys,
                                    states=encode_partition_states(states) if states is not None else None)

    def transact_change(self, what: str, build: Callable[[TransactWrite], None], *, keys: Sequence[str] = (),
                        states: str | None = None, topics: str | None = None,
                        brokers: str | None = None) -> list[str | None] | None:
        """Run ``build``'s transaction as the next version of the change sequence (see
        ``broker_core.metadata.models``): it reads the version v, then commits ``build``'s items with
        the version set to v + 1 (conditional on v) and the change item ``change#<v+1>`` holding
        ``keys``, ``states`` (`encode_partition_states`), ``topics`` (`encode_topic_changes`) and
        ``brokers`` (`encode_broker_changes`), so
        brokers apply the change from that item. A change too large for one item
        (`MAX_CHANGE_ITEM_BYTES`) bumps the version without one, and readers read everything.

        Returns None when it committed, else the cancellation codes of ``build``'s own items (as
        `transact`). A concurrent change that moved the version first is a lost race: it is retried
        with a fresh read of the version (bounded, ``broker_core.retry``).
        """
        size = len(states or "") + len(topics or "") + len(brokers or "") + sum(len(k) + 3 for k in keys)
        if size > MAX_CHANGE_ITEM_BYTES:
            def unnumbered(transaction: TransactWrite) -> None:
                build(transaction)
                self.add_version_bump(transaction)

            codes = self.transact(what, unnumbered)
            return None if codes is None else codes[:-1]
        version_model = self.models.metadata_version
        change_model = self.models.metadata_change

        def attempt() -> list[str | None] | None:
            current = self.metadata_version()
            condition = (version_model.version == current if current
                         else version_model.version.does_not_exist() | (version_model.version == 0))

            def full(transaction: TransactWrite) -> None:
                build(transaction)
                # Both updates: pynamodb sends updates after every other kind of item, so these two
                # are the last items of the transaction and their cancellation codes the last two.
                transaction.update(version_model(METADATA_VERSION_ITEM),
                                   actions=[version_model.version.set(current + 1)], condition=condition)
                actions = [change_model.version.set(current + 1), change_model.partitions.set(list(keys)),
                           change_model.expires_at.set(int(time.time()) + CHANGE_RETENTION_S)]
                if states is not None:
                    actions.append(change_model.states.set(states))
                if topics is not None:
                    actions.append(change_model.topics.set(topics))
                if brokers is not None:
                    actions.append(change_model.brokers.set(brokers))
                transaction.update(change_model(f"{CHANGE_ITEM_PREFIX}{current + 1}"), actions=actions)

            codes = self.transact(what, full)
            if codes is None:
                return None
            if codes[-2] == CONDITION_FAILED:
                raise LostRace(f"{what}: metadata version {current} moved on")
            return codes[:-2]

        return retry_lost_races(attempt, lambda attempts: MetadataConflictError(what, attempts))

    @metadata_failures
    def metadata_delta(self, since: int, until: int) -> MetadataDelta | None:
        """What versions since+1 .. until changed, from the change items alone; None when the caller
        must read everything: a version with no change item (a cluster or broker config change, a
        change too large for an item, an expired item), a change item without the states it names
        (written before change items carried them), or more than `MAX_DELTA_VERSIONS` versions."""
        if until <= since:
            return MetadataDelta()
        if since < 0 or until - since > MAX_DELTA_VERSIONS:
            return None
        change_model = self.models.metadata_change
        wanted = [f"{CHANGE_ITEM_PREFIX}{v}" for v in range(since + 1, until + 1)]
        found = sorted(change_model.batch_get(wanted, consistent_read=True), key=lambda item: int(item.version))
        if len(found) != len(wanted):
            return None
        delta = MetadataDelta()
        for item in found:  # in version order: a later change replaces an earlier one
            if item.states is None and item.partitions:
                return None
            if item.topics is not None:
                delta = delta.then(decode_topic_changes(item.topics))
            if item.brokers is not None:
                delta = delta.then(decode_broker_changes(item.brokers))
            if item.states is not None:
                delta = delta.then(MetadataDelta(partitions={
                    (s.topic_id, s.partition): s for s in decode_partition_states(item.states)}))
        return delta

    # -- metadata version --------------------------------------------------------------------

    @metadata_failures
    def metadata_version(self) -> int:
        """The current metadata version (consistent read); 0 before the first change."""
        version = self.models.metadata_version
        try:
            return int(version.get(METADATA_VERSION_ITEM, consistent_read=True).version)
        except version.DoesNotExist:
            return 0

    @metadata_failures
    def bump_metadata_version(self) -> int:
        """Bump the metadata version on its own (atomic ADD) and return the new value."""
        version = self.models.metadata_version
        item = version(METADATA_VERSION_ITEM)
        item.update(actions=[version.version.add(1)])
        return int(item.version)
