"""TopicCatalog: topics, their configs and their partitions' leader, epochs, ISR and replicas.

Topic creation writes the partition items under a fresh topic id first and then commits the topic
item with ``attribute_not_exists(name)``; the topic item is the commit point, readers reach
partitions only through it, and the loser of a concurrent create gets TopicExistsError and removes
its partition items. Deletion removes the topic item first and its partitions after. A process
that dies between the two steps leaves partition items under a topic id no topic refers to; they
are invisible to readers. Topic configs are written read-merge-write, conditional on the topic's
``config_version`` (a lost race merges again, bounded by ``broker_core.retry``); partition updates
are conditional on the partition epoch and, for controller writes, on the controller epoch. New
topics' replicas are placed on the RUNNING brokers, which is why this class builds on
BrokerRegistry.

Thread-safety: as ``broker_core.metadata.tables``: shareable, synchronous, called from worker threads.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from pynamodb.exceptions import PutError
from pynamodb.transactions import TransactWrite

from broker_core.clock import wall_clock_ms
from broker_core.dynamodb_tables import CONDITION_FAILED, condition_failed
from broker_core.metadata.assignment import assign_replicas_rack_unaware
from broker_core.metadata.brokers import BrokerRegistry
from broker_core.metadata.errors import (
    FencedControllerError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidPartitionStateError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    MetadataConflictError,
    PartitionCountError,
    PartitionEpochConflictError,
    PolicyViolationError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from broker_core.metadata.models import PartitionItem, TopicItem
from broker_core.metadata.state import NO_LEADER, BrokerState, PartitionState, TopicDescription
from broker_core.metadata.tables import PARTITION_PAGE_SIZE, encode_topic_changes, metadata_failures
from broker_core.retry import LostRace, retry_lost_races

MAX_TOPIC_NAME_LENGTH = 249
# DynamoDB's TransactWriteItems takes 100 items: these partitions, the lease check, the version and the change item.
PARTITIONS_PER_TRANSACTION = 97
# DynamoDB's BatchWriteItem takes 25 items; a new topic's partition items go in this many requests at once.
BATCH_WRITE_ITEMS = 25
PARALLEL_BATCH_WRITES = 4
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError unless ``name`` is a legal Kafka topic name."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError(str(name), "the name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(name, "'.' and '..' are not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(name, f"longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopicError(name, "legal characters are ASCII letters, digits, '.', '_' and '-'")


@dataclass(frozen=True, slots=True)
class PartitionLimits:
    """How many partitions the cluster may hold: ``floe.max.partitions`` in all, and
    ``floe.max.replicas.per.broker`` partition replicas per live broker on average (replicas are
    spread evenly, so the average is what each broker carries).

    Checked against the metadata image before anything is written, by arithmetic only, so a request
    for a million partitions costs nothing. The image may lag a concurrent create by one metadata
    poll, so two creates racing may together pass a limit by their sizes; the limit guards against
    mistakes and runaway automation, not against a determined race. CreatePartitions, when it
    exists, must call `check_new_partitions` with the partitions it adds.
    """

    max_partitions: int
    max_replicas_per_broker: int

    def check_new_partitions(
        self,
        *,
        existing_partitions: int,
        existing_replicas: int,
        live_brokers: int,
        new_partitions: int,
        replication_factor: int,
    ) -> None:
        """Raise PolicyViolationError if adding ``new_partitions`` x ``replication_factor`` replicas passes a limit."""
        total = existing_partitions + new_partitions
        if total > self.max_partitions:
            raise PolicyViolationError(
                "floe.max.partitions",
                f"{new_partitions} new partitions would bring the cluster to {total} partitions; "
                f"floe.max.partitions is {self.max_partitions} ({existing_partitions} exist)",
            )
        if live_brokers <= 0:
            return  # the replication factor check refuses this create
        replicas = existing_replicas + new_partitions * replication_factor
        allowed = self.max_replicas_per_broker * live_brokers
        if replicas > allowed:
            raise PolicyViolationError(
                "floe.max.replicas.per.broker",
                f"{new_partitions} new partitions x {replication_factor} replicas would bring the cluster to "
                f"{replicas} partition replicas on {live_brokers} live brokers; floe.max.replicas.per.broker "
                f"is {self.max_replicas_per_broker}, so at most {allowed} ({existing_replicas} exist)",
            )


def _validate_configs(configs: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(configs, Mapping):
        raise InvalidConfigError(configs, "configs must be a mapping of strings to strings")
    for key, value in configs.items():
        if not isinstance(key, str) or not key:
            raise InvalidConfigError(key, "config names must be non-empty strings")
        if not isinstance(value, str):
            raise InvalidConfigError(key, "config values must be strings")
    return dict(configs)


def _check_assignments(assignments: Sequence[Sequence[int]], added: int, replication: int,
                       registered: set[int]) -> list[list[int]]:
    """Kafka's checks of CreatePartitions' manual assignments; InvalidReplicaAssignmentError says which failed."""
    if len(assignments) != added:
        raise InvalidReplicaAssignmentError(
            f"Increasing the number of partitions by {added} but {len(assignments)} assignments provided.")
    placed = []
    for number, replicas in enumerate(assignments):
        replicas = [int(r) for r in replicas]
        if len(replicas) != replication:
            raise InvalidReplicaAssignmentError(
                f"Inconsistent replication factor between partitions: the topic has {replication} replicas per "
                f"partition but assignment {number} has {len(replicas)}.")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"Duplicate brokers not allowed in replica assignment: {', '.join(map(str, replicas))} "
                f"(assignment {number}).")
        unknown = sorted(set(replicas) - registered)
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
        placed.append(replicas)
    return placed


def _topic_from_item(item: TopicItem) -> TopicDescription:
    return TopicDescription(
        name=item.name,
        topic_id=item.topic_id,
        num_partitions=int(item.num_partitions),
        replication_factor=int(item.replication_factor),
        configs=dict(item.configs.as_dict()) if item.configs is not None else {},
        created_at_ms=int(item.created_at_ms),
        config_version=int(item.config_version),
    )


def partition_key(topic_id: str, partition: int) -> str:
    """How the change sequence names a partition: ``<topic id>:<partition>``."""
    return f"{topic_id}:{partition}"


def partition_from_item(item: PartitionItem) -> PartitionState:
    return PartitionState(
        topic=item.topic,
        topic_id=item.topic_id,
        partition=int(item.partition),
        replicas=tuple(int(r) for r in item.replicas),
        leader=int(item.leader),
        leader_epoch=int(item.leader_epoch),
        partition_epoch=int(item.partition_epoch),
        isr=tuple(int(r) for r in item.isr),
        adding_replicas=tuple(int(r) for r in item.adding_replicas or ()),
        removing_replicas=tuple(int(r) for r in item.removing_replicas or ()),
    )


def _check_partition_state(state: PartitionState) -> None:
    def invalid(reason: str) -> InvalidPartitionStateError:
        return InvalidPartitionStateError(state.topic, state.partition, reason)

    if not state.replicas or len(set(state.replicas)) != len(state.replicas):
        raise invalid(f"replicas {list(state.replicas)} must be non-empty and distinct")
    if not state.isr or len(set(state.isr)) != len(state.isr):
        raise invalid(f"ISR {list(state.isr)} must be non-empty and distinct")
    if not set(state.isr) <= set(state.replicas):
        raise invalid(f"ISR {list(state.isr)} is not a subset of replicas {list(state.replicas)}")
    if state.leader != NO_LEADER and state.leader not in state.isr:
        raise invalid(f"leader {state.leader} is not in the ISR {list(state.isr)}")
    if state.leader_epoch < 0:
        raise invalid(f"leader epoch {state.leader_epoch} is negative")
    adding, removing = set(state.adding_replicas), set(state.removing_replicas)
    if not (adding | removing) <= set(state.replicas) or adding & removing:
        raise invalid(f"adding {list(state.adding_replicas)} and removing {list(state.removing_replicas)} must be "
                      f"disjoint subsets of replicas {list(state.replicas)}")


def _as_written(state: PartitionState, expected_partition_epoch: int) -> PartitionState:
    return replace(state, replicas=tuple(state.replicas), isr=tuple(state.isr),
                   adding_replicas=tuple(state.adding_replicas), removing_replicas=tuple(state.removing_replicas),
                   partition_epoch=expected_partition_epoch + 1)


@dataclass(frozen=True)
class PartitionBatchResult:
    """What `TopicCatalog.update_partitions` wrote, and the proposals whose partition epoch had moved on."""

    written: tuple[PartitionState, ...]
    conflicted: tuple[PartitionState, ...]


class TopicCatalog(BrokerRegistry):
    """The topics and partitions tables: create, delete, describe and configure topics; update partitions."""

    @metadata_failures
    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str] | None = None,
    ) -> TopicDescription:
        """Create a topic with replicas spread over the RUNNING brokers (Kafka's rack-unaware scheme).

        Each partition starts with leader = first replica, ISR = replicas, leader epoch 0 and
        partition epoch 0. Raises InvalidTopicError, InvalidPartitionsError,
        InvalidReplicationFactorError (RF above the number of RUNNING brokers), InvalidConfigError
        or TopicExistsError; in every failure no topic is visible.
        """
        validate_topic_name(name)
        topic_configs = _validate_configs(configs or {})
        if not isinstance(num_partitions, int) or num_partitions < 1:
            raise InvalidPartitionsError(num_partitions)
        live = [b.broker_id for b in self.list_brokers() if b.state is BrokerState.RUNNING]
        if not isinstance(replication_factor, int) or not 1 <= replication_factor <= len(live):
            raise InvalidReplicationFactorError(replication_factor, len(live))
        if self._get_topic_item(name) is not None:
            raise TopicExistsError(name)
        assignment = assign_replicas_rack_unaware(num_partitions, replication_factor, live)
        topic_id = str(uuid.uuid4())
        partition_model = self.models.partition
        partition_items = [
            partition_model(
                topic_id,
                index,
                topic=name,
                replicas=replicas,
                leader=replicas[0],
                leader_epoch=0,
                partition_epoch=0,
                isr=replicas,
            )
            for index, replicas in enumerate(assignment)
        ]
        self._put_partition_items(partition_items)
        topic = self.models.topic
        topic_item = topic(
            name,
            topic_id=topic_id,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            configs=topic_configs,
            config_version=0,
            created_at_ms=wall_clock_ms(),
        )

        description = _topic_from_item(topic_item)

        def build(transaction: TransactWrite) -> None:
            transaction.save(topic_item, condition=topic.name.does_not_exist())

        # Numbered in the change sequence with the topic and its assignment: brokers and the
        # controller add the topic from the change item instead of reading every partition.
        if self.transact_change(f"create topic {name}", build,
                                topics=encode_topic_changes([(description, 0, assignment)])) is not None:
            self._delete_partition_items(partition_items)
            raise TopicExistsError(name)
        return description

    @metadata_failures
    def add_partitions(self, name: str, total: int, assignments: Sequence[Sequence[int]] | None = None,
                       *, validate_only: bool = False) -> TopicDescription:
        """CreatePartitions: grow the topic to ``total`` partitions, the new ones placed as given in
        ``assignments`` (one replica list per new partition) or spread over the RUNNING brokers as
        new topics are (continuing from the last partition).

        The new partition items are written first, each only if absent, then the topic's partition
        count, conditional on the count read, in a transaction that bumps the metadata version;
        snapshots leave out partitions at or above a topic's count, so no broker sees a new partition
        before the count says it exists. A lost race deletes what it wrote and raises
        MetadataConflictError. Raises UnknownTopicError, PartitionCountError,
        InvalidReplicaAssignmentError, InvalidReplicationFactorError; nothing is written on a refusal
        or with ``validate_only``.
        """
        item = self._get_topic_item(name)
        if item is None:
            raise UnknownTopicError(name)
        current, replication = int(item.num_partitions), int(item.replication_factor)
        if not isinstance(total, int) or total <= current:
            raise PartitionCountError(name, current, total)
        added = total - current
        brokers = self.list_brokers()
        if assignments is not None:
            placed = _check_assignments(assignments, added, replication, {b.broker_id for b in brokers})
        else:
            live = [b.broker_id for b in brokers if b.state is BrokerState.RUNNING]
            if replication > len(live):
                raise InvalidReplicationFactorError(replication, len(live))
            placed = assign_replicas_rack_unaware(added, replication, live, start_partition=current)
        description = _topic_from_item(item)
        if validate_only:
            return description
        partition_model = self.models.partition
        written: list[PartitionItem] = []
        what = f"add partitions {current}..{total - 1} to topic {name}"
        try:
            for index, replicas in enumerate(placed, start=current):
                partition_item = partition_model(
                    item.topic_id, index, topic=name, replicas=list(replicas), leader=replicas[0], leader_epoch=0,
                    partition_epoch=0, isr=list(replicas))
                try:
                    partition_item.save(condition=partition_model.topic_id.does_not_exist())
                except PutError as err:
                    if condition_failed(err):
                        raise MetadataConflictError(what, 1) from err
                    raise
                written.append(partition_item)
            topic = self.models.topic

            def build(transaction: TransactWrite) -> None:
                transaction.update(topic(name), actions=[topic.num_partitions.set(total)],
                                   condition=(topic.topic_id == item.topic_id) & (topic.num_partitions == current))

            grown = replace(description, num_partitions=total)
            if self.transact_change(what, build, topics=encode_topic_changes([(grown, current, placed)])) is not None:
                raise MetadataConflictError(what, 1)
        except BaseException:
            self._delete_partition_items(written)
            raise
        return grown

    @metadata_failures
    def delete_topic(self, name: str) -> None:
        """Delete a topic and its partition items; UnknownTopicError if it does not exist."""
        item = self._get_topic_item(name)
        if item is None:
            raise UnknownTopicError(name)
        topic = self.models.topic
        topic_id = item.topic_id

        def build(transaction: TransactWrite) -> None:
            transaction.delete(topic(name), condition=topic.topic_id == topic_id)

        if self.transact_change(f"delete topic {name}", build, topics=encode_topic_changes(deleted=[topic_id])) is not None:
            raise UnknownTopicError(name)
        self._delete_partition_items(list(self.models.partition.query(topic_id, consistent_read=True)))

    def _put_partition_items(self, items: Sequence[PartitionItem]) -> None:
        """BatchWriteItem requests (25 items each) of several threads at once: a topic of 1,000
        partitions is 40 requests, which one after another took seconds of the CreateTopics answer
        (the local stack's moto answers each in tens of milliseconds; DynamoDB serves them in parallel)."""
        chunks = [items[i:i + BATCH_WRITE_ITEMS] for i in range(0, len(items), BATCH_WRITE_ITEMS)]

        def put(chunk: Sequence[PartitionItem]) -> None:
            with self.models.partition.batch_write() as batch:
                for item in chunk:
                    batch.save(item)

        if len(chunks) <= 1:
            for chunk in chunks:
                put(chunk)
            return
        with ThreadPoolExecutor(max_workers=min(PARALLEL_BATCH_WRITES, len(chunks)),
                                thread_name_prefix="partition-items") as pool:
            for done in [pool.submit(put, chunk) for chunk in chunks]:
                done.result()

    def _delete_partition_items(self, items: Iterable[PartitionItem]) -> None:
        with self.models.partition.batch_write() as batch:
            for item in items:
                batch.delete(item)

    def _get_topic_item(self, name: str) -> TopicItem | None:
        try:
            return self.models.topic.get(name, consistent_read=True)
        except self.models.topic.DoesNotExist:
            return None

    @metadata_failures
    def get_topic(self, name: str) -> TopicDescription:
        """The topic (consistent read); UnknownTopicError if it does not exist."""
        item = self._get_topic_item(name)
        if item is None:
            raise UnknownTopicError(name)
        return _topic_from_item(item)

    @metadata_failures
    def list_topics(self) -> list[TopicDescription]:
        """Every topic, sorted by name (consistent read)."""
        items = self.models.topic.scan(consistent_read=True)
        return sorted((_topic_from_item(i) for i in items), key=lambda t: t.name)

    @metadata_failures
    def describe_topic_configs(self, name: str) -> dict[str, str]:
        """The configs set on the topic (defaults are the broker's to add); UnknownTopicError if absent."""
        return dict(self.get_topic(name).configs)

    @metadata_failures
    def alter_topic_configs(
        self, name: str, set_configs: Mapping[str, str] | None = None, delete_configs: Iterable[str] = ()
    ) -> TopicDescription:
        """Set and remove topic configs in one step (the IncrementalAlterConfigs shape).

        Read-merge-write conditional on the topic's ``config_version``; a lost race re-reads and
        merges again (bounded). Raises UnknownTopicError, InvalidConfigError.
        """
        updates = _validate_configs(set_configs or {})
        removals = list(delete_configs)
        _validate_configs({key: "" for key in removals})
        what = f"alter configs of topic {name}"

        def attempt() -> TopicDescription:
            item = self._get_topic_item(name)
            if item is None:
                raise UnknownTopicError(name)
            configs = dict(item.configs.as_dict()) if item.configs is not None else {}
            configs.update(updates)
            for key in removals:
                configs.pop(key, None)
            changed = replace(_topic_from_item(item), configs=configs, config_version=int(item.config_version) + 1)
            if not self._write_topic_configs(changed):
                raise LostRace(what)
            return changed

        return retry_lost_races(attempt, lambda attempts: MetadataConflictError(what, attempts))

    def _write_topic_configs(self, changed: TopicDescription) -> bool:
        topic = self.models.topic

        def build(transaction: TransactWrite) -> None:
            transaction.update(
                topic(changed.name),
                actions=[topic.configs.set(dict(changed.configs)), topic.config_version.set(changed.config_version)],
                condition=(topic.config_version == changed.config_version - 1) & (topic.topic_id == changed.topic_id),
            )

        return self.transact_change(f"alter configs of topic {changed.name}", build,
                                    topics=encode_topic_changes([(changed, changed.num_partitions, [])])) is None

    # -- partitions --------------------------------------------------------------------------

    @metadata_failures
    def get_partitions(self, topic: str) -> list[PartitionState]:
        """All partitions of the topic, by partition number; UnknownTopicError if it does not exist."""
        item = self._get_topic_item(topic)
        if item is None:
            raise UnknownTopicError(topic)
        items = self.models.partition.query(item.topic_id, consistent_read=True, page_size=PARTITION_PAGE_SIZE)
        return sorted((partition_from_item(i) for i in items), key=lambda p: p.partition)

    @metadata_failures
    def get_partition(self, topic: str, partition: int) -> PartitionState:
        """One partition (consistent read); UnknownTopicError / UnknownPartitionError if absent."""
        item = self._get_topic_item(topic)
        if item is None:
            raise UnknownTopicError(topic)
        try:
            return partition_from_item(
                self.models.partition.get(item.topic_id, partition, consistent_read=True)
            )
        except self.models.partition.DoesNotExist:
            raise UnknownPartitionError(topic, partition) from None

    @metadata_failures
    def update_partitions(
        self,
        changes: Sequence[tuple[PartitionState, int]],
        controller_epoch: int | None = None,
    ) -> PartitionBatchResult:
        """`update_partition` for many partitions, in as few DynamoDB transactions as fit them.

        ``changes`` holds (new state, expected partition epoch) pairs. They are written in
        transactions of up to `PARTITIONS_PER_TRANSACTION` partitions, each with one metadata
        version bump (and, with ``controller_epoch``, one check of the controller lease): a broker
        re-reads once per transaction, not once per partition. Each partition's write is still
        conditional on its own partition epoch; a partition whose condition fails is left out and
        returned in ``conflicted`` (its epoch moved on, or it was deleted) and the rest of its
        transaction is written without it. Raises InvalidPartitionStateError before writing
        anything if a state is invalid, FencedControllerError if the lease moved on (partitions of
        earlier transactions may then be written already, each a complete, valid change).
        """
        for state, _ in changes:
            _check_partition_state(state)
        written: list[PartitionState] = []
        conflicted: list[PartitionState] = []
        for start in range(0, len(changes), PARTITIONS_PER_TRANSACTION):
            chunk = list(changes[start:start + PARTITIONS_PER_TRANSACTION])
            while chunk:
                codes = self.transact_partition_change(
                    f"update {len(chunk)} partitions", self._partition_updates(chunk, controller_epoch),
                    [partition_key(state.topic_id, state.partition) for state, _ in chunk],
                    [_as_written(state, epoch) for state, epoch in chunk])
                if codes is None:
                    written.extend(_as_written(state, epoch) for state, epoch in chunk)
                    break
                if controller_epoch is not None:
                    if codes[0] == CONDITION_FAILED:
                        raise FencedControllerError(controller_epoch)
                    codes = codes[1:]
                failed = {i for i, code in enumerate(codes[:len(chunk)]) if code == CONDITION_FAILED}
                conflicted.extend(chunk[i][0] for i in sorted(failed))
                chunk = [change for i, change in enumerate(chunk) if i not in failed]
        return PartitionBatchResult(written=tuple(written), conflicted=tuple(conflicted))

    def _partition_updates(self, chunk: Sequence[tuple[PartitionState, int]],
                           controller_epoch: int | None) -> Callable[[TransactWrite], None]:
        partition = self.models.partition

        def build(transaction: TransactWrite) -> None:
            if controller_epoch is not None:
                self.add_controller_check(transaction, controller_epoch)
            for state, expected in chunk:
                # A whole-item Put (every attribute of a partition is in its state) rather than an
                # UpdateItem of seven SET actions: the same write for DynamoDB, and a third of the
                # work for moto, which parses and validates each update expression per item.
                transaction.save(partition(
                    state.topic_id, state.partition, topic=state.topic, replicas=list(state.replicas),
                    leader=state.leader, leader_epoch=state.leader_epoch, partition_epoch=expected + 1,
                    isr=list(state.isr), adding_replicas=list(state.adding_replicas),
                    removing_replicas=list(state.removing_replicas),
                ), condition=partition.partition_epoch == expected)

        return build

    @metadata_failures
    def update_partition(
        self,
        new_state: PartitionState,
        expected_partition_epoch: int,
        controller_epoch: int | None = None,
    ) -> PartitionState:
        """Write leader, leader epoch, ISR and replicas of ``new_state`` if the partition epoch matches.

        The stored partition epoch becomes ``expected_partition_epoch + 1`` (whatever
        ``new_state.partition_epoch`` says); bumping the leader epoch on a leader change is the
        caller's, through ``PartitionState.with_leader``. With ``controller_epoch`` the write is
        also conditional on the controller lease. Raises InvalidPartitionStateError,
        PartitionEpochConflictError, FencedControllerError, UnknownPartitionError.
        """
        _check_partition_state(new_state)
        partition = self.models.partition
        key = partition(new_state.topic_id, new_state.partition)
        condition = partition.partition_epoch == expected_partition_epoch
        next_epoch = expected_partition_epoch + 1
        actions = [
            partition.replicas.set(list(new_state.replicas)),
            partition.leader.set(new_state.leader),
            partition.leader_epoch.set(new_state.leader_epoch),
            partition.isr.set(list(new_state.isr)),
            partition.partition_epoch.set(next_epoch),
            partition.adding_replicas.set(list(new_state.adding_replicas)),
            partition.removing_replicas.set(list(new_state.removing_replicas)),
        ]

        def build(transaction: TransactWrite) -> None:
            if controller_epoch is not None:
                self.add_controller_check(transaction, controller_epoch)
            transaction.update(key, actions=actions, condition=condition)

        codes = self.transact_partition_change(f"update partition {new_state.topic}-{new_state.partition}", build,
                                               [partition_key(new_state.topic_id, new_state.partition)],
                                               [_as_written(new_state, expected_partition_epoch)])
        if codes is None:
            return _as_written(new_state, expected_partition_epoch)
        if controller_epoch is not None and codes[0] == CONDITION_FAILED:
            raise FencedControllerError(controller_epoch)
        try:
            partition.get(new_state.topic_id, new_state.partition, consistent_read=True)
        except partition.DoesNotExist:
            raise UnknownPartitionError(new_state.topic, new_state.partition) from None
        raise PartitionEpochConflictError(new_state.topic, new_state.partition, expected_partition_epoch)
