"""MetadataStore: every read and conditional write of cluster metadata in DynamoDB.

Brokers, front ends and the controller all go through this class; it hands out the frozen
dataclasses of ``broker_core.metadata.state`` and never pynamodb items. Every write that can race
is conditional on an integer: broker epoch for broker writes, partition epoch for partition
updates, controller epoch (checked on the lease item in the same transaction) for controller
writes, ``config_version`` for topic configs, ``version`` for producer-id blocks. Each metadata
change bumps the metadata version in the same DynamoDB transaction, so a broker that sees the
version unchanged knows nothing it caches has changed.

Topic creation writes the partition items under a fresh topic id first and then commits the topic
item with ``attribute_not_exists(name)``; the topic item is the commit point, readers reach
partitions only through it, and the loser of a concurrent create gets TopicExistsError and removes
its partition items. Deletion removes the topic item first and its partitions after. A process
that dies between the two steps leaves partition items under a topic id no topic refers to; they
are invisible to readers and are skipped by ``snapshot()``.

Thread-safety: a MetadataStore holds no mutable state of its own and may be shared by threads;
pynamodb is synchronous, so brokers call it from worker threads, never from the event loop.
Conditional writes that are safe to retry (transaction conflicts, throttling, read-merge-write of
configs and producer ids) are retried with bounded, jittered backoff; DynamoDB being unreachable
surfaces as MetadataUnavailableError. botocore gives each TransactWriteItems call an idempotency
token that its own network retries reuse, so a commit whose reply was lost is not mistaken for a
failed condition on the retry.
"""

from __future__ import annotations

import functools
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import ParamSpec, TypeVar

from botocore.exceptions import BotoCoreError
from pynamodb.exceptions import PynamoDBException, TransactWriteError
from pynamodb.expressions.condition import Condition
from pynamodb.transactions import TransactWrite

from broker_core.aws import AwsSettings
from broker_core.dynamodb_tables import ensure_tables
from broker_core.metadata.assignment import assign_replicas_rack_unaware
from broker_core.metadata.errors import (
    BrokerFencedError,
    FencedControllerError,
    InvalidBrokerRegistrationError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidPartitionStateError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    MetadataConflictError,
    MetadataError,
    MetadataUnavailableError,
    PartitionEpochConflictError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from broker_core.metadata.models import (
    BROKER_EPOCH_ITEM,
    CONTROLLER_ITEM,
    METADATA_VERSION_ITEM,
    PRODUCER_IDS_ITEM,
    BoundModels,
    BrokerItem,
    PartitionItem,
    TopicItem,
    bind_models,
)
from broker_core.metadata.state import (
    NO_LEADER,
    BrokerRegistration,
    BrokerState,
    ClusterSnapshot,
    PartitionState,
    ProducerIdBlock,
    TopicDescription,
)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
DEFAULT_PRODUCER_ID_BLOCK_SIZE = 1000

_CONDITION_FAILED = "ConditionalCheckFailed"
_RETRIABLE_CANCELLATIONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)
_RETRY_ATTEMPTS = 40
_BACKOFF_BASE_S = 0.005
_BACKOFF_CAP_S = 0.2

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _backoff(attempt: int) -> None:
    time.sleep(min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**attempt) * random.uniform(0.5, 1.0))


def _dynamodb_errors_as_unavailable(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Turn pynamodb/botocore failures that no condition explains into MetadataUnavailableError."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except MetadataError:
            raise
        except (PynamoDBException, BotoCoreError) as err:
            raise MetadataUnavailableError(f"{method.__name__}: {err}") from err

    return wrapper


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


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


def _validate_configs(configs: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(configs, Mapping):
        raise InvalidConfigError(configs, "configs must be a mapping of strings to strings")
    for key, value in configs.items():
        if not isinstance(key, str) or not key:
            raise InvalidConfigError(key, "config names must be non-empty strings")
        if not isinstance(value, str):
            raise InvalidConfigError(key, "config values must be strings")
    return dict(configs)


def _broker_from_item(item: BrokerItem) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id=int(item.broker_id),
        broker_epoch=int(item.broker_epoch),
        host=item.host,
        port=int(item.port),
        rack=item.rack,
        state=BrokerState(item.state),
        heartbeat=int(item.heartbeat),
        registered_at_ms=int(item.registered_at_ms),
    )


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


def _partition_from_item(item: PartitionItem) -> PartitionState:
    return PartitionState(
        topic=item.topic,
        topic_id=item.topic_id,
        partition=int(item.partition),
        replicas=tuple(int(r) for r in item.replicas),
        leader=int(item.leader),
        leader_epoch=int(item.leader_epoch),
        partition_epoch=int(item.partition_epoch),
        isr=tuple(int(r) for r in item.isr),
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


class MetadataStore:
    """Cluster metadata in four DynamoDB tables named ``settings.table_prefix`` + base name."""

    def __init__(self, settings: AwsSettings) -> None:
        self.settings = settings
        self.models: BoundModels = bind_models(settings)

    # -- tables ------------------------------------------------------------------------------

    @_dynamodb_errors_as_unavailable
    def ensure_tables(self) -> None:
        """Create any missing metadata table (on-demand billing) and wait until all are ACTIVE.

        Safe to call from several brokers at once: a table another broker is creating is waited for.
        """
        ensure_tables(self.models.one_model_per_table(), MetadataUnavailableError)

    def table_names(self) -> list[str]:
        return [model.Meta.table_name for model in self.models.one_model_per_table()]

    # -- transactions ------------------------------------------------------------------------

    def transact(self, what: str, build: Callable[[TransactWrite], None]) -> list[str | None] | None:
        """Run the transaction ``build`` fills; None when it committed.

        When a condition failed, returns the cancellation code of each item in the order ``build``
        added them ("ConditionalCheckFailed" for the failed ones, None for the others); nothing was
        written. Conflicts with other transactions and throttling are retried with backoff.
        """
        for attempt in range(_RETRY_ATTEMPTS):
            try:
                with TransactWrite(connection=self.models.connection) as transaction:
                    build(transaction)
                return None
            except TransactWriteError as err:
                if err.cause_response_code != "TransactionCanceledException":
                    raise
                codes = [reason.code if reason is not None else None for reason in err.cancellation_reasons]
                if _CONDITION_FAILED in codes:
                    return codes
                if not _RETRIABLE_CANCELLATIONS.intersection(c for c in codes if c is not None):
                    raise
                _backoff(attempt)
        raise MetadataConflictError(what, _RETRY_ATTEMPTS)

    def add_controller_check(self, transaction: TransactWrite, controller_epoch: int) -> None:
        """Make ``transaction`` conditional on the controller lease still carrying ``controller_epoch``."""
        lease = self.models.controller_lease
        transaction.condition_check(
            lease, CONTROLLER_ITEM, condition=lease.controller_epoch == controller_epoch
        )

    def add_version_bump(self, transaction: TransactWrite) -> None:
        version = self.models.metadata_version
        transaction.update(version(METADATA_VERSION_ITEM), actions=[version.version.add(1)])

    # -- metadata version --------------------------------------------------------------------

    @_dynamodb_errors_as_unavailable
    def metadata_version(self) -> int:
        """The current metadata version (consistent read); 0 before the first change."""
        version = self.models.metadata_version
        try:
            return int(version.get(METADATA_VERSION_ITEM, consistent_read=True).version)
        except version.DoesNotExist:
            return 0

    @_dynamodb_errors_as_unavailable
    def bump_metadata_version(self) -> int:
        """Bump the metadata version on its own (atomic ADD) and return the new value."""
        version = self.models.metadata_version
        item = version(METADATA_VERSION_ITEM)
        item.update(actions=[version.version.add(1)])
        return int(item.version)

    # -- brokers -----------------------------------------------------------------------------

    @_dynamodb_errors_as_unavailable
    def register_broker(self, broker_id: int, host: str, port: int, rack: str | None = None) -> int:
        """Register (or re-register) a broker as RUNNING and return its new broker epoch.

        The epoch comes from a cluster-wide counter, so it is larger than any epoch this broker id
        had before; the previous registration, if any, is replaced and thereby fenced. If a
        concurrent registration of the same id drew a larger epoch, this one raises BrokerFencedError.
        """
        if not isinstance(broker_id, int) or broker_id < 0:
            raise InvalidBrokerRegistrationError(broker_id, "broker id must be a non-negative integer")
        if not isinstance(host, str) or not host:
            raise InvalidBrokerRegistrationError(broker_id, "host must be a non-empty string")
        if not isinstance(port, int) or not 1 <= port <= 65535:
            raise InvalidBrokerRegistrationError(broker_id, f"port {port} is outside 1..65535")
        counter_model = self.models.broker_epoch_counter
        counter = counter_model(BROKER_EPOCH_ITEM)
        counter.update(actions=[counter_model.last_epoch.add(1)])
        broker_epoch = int(counter.last_epoch)
        broker = self.models.broker
        item = broker(
            broker_id,
            broker_epoch=broker_epoch,
            host=host,
            port=port,
            rack=rack,
            state=BrokerState.RUNNING.value,
            heartbeat=0,
            registered_at_ms=_now_ms(),
        )
        condition = broker.broker_id.does_not_exist() | (broker.broker_epoch < broker_epoch)

        def build(transaction: TransactWrite) -> None:
            transaction.save(item, condition=condition)
            self.add_version_bump(transaction)

        if self.transact(f"register broker {broker_id}", build) is not None:
            raise BrokerFencedError(broker_id, broker_epoch)
        return broker_epoch

    @_dynamodb_errors_as_unavailable
    def heartbeat_broker(self, broker_id: int, broker_epoch: int) -> None:
        """Bump the broker's heartbeat counter; BrokerFencedError if fenced or its epoch is stale."""
        broker = self.models.broker
        item = broker(broker_id)
        condition = (broker.broker_epoch == broker_epoch) & (broker.state != BrokerState.FENCED.value)
        try:
            item.update(actions=[broker.heartbeat.add(1)], condition=condition)
        except PynamoDBException as err:
            if err.cause_response_code == "ConditionalCheckFailedException":
                raise BrokerFencedError(broker_id, broker_epoch) from err
            raise

    @_dynamodb_errors_as_unavailable
    def set_broker_state(self, broker_id: int, broker_epoch: int, state: BrokerState) -> None:
        """Move the broker's registration to ``state``; BrokerFencedError if fenced or stale.

        A fenced registration cannot be revived: the broker registers again for a new epoch.
        """
        broker = self.models.broker
        condition = (broker.broker_epoch == broker_epoch) & (broker.state != BrokerState.FENCED.value)

        def build(transaction: TransactWrite) -> None:
            transaction.update(
                broker(broker_id), actions=[broker.state.set(state.value)], condition=condition
            )
            self.add_version_bump(transaction)

        if self.transact(f"set state of broker {broker_id}", build) is not None:
            raise BrokerFencedError(broker_id, broker_epoch)

    @_dynamodb_errors_as_unavailable
    def fence_broker(
        self, broker_id: int, broker_epoch: int, observed_heartbeat: int, controller_epoch: int
    ) -> bool:
        """Controller write: fence the registration if it still has ``observed_heartbeat``.

        Returns False (and writes nothing) if the broker heartbeated, re-registered or was already
        fenced since it was observed; raises FencedControllerError if ``controller_epoch`` is stale.
        """
        broker = self.models.broker
        condition = (
            (broker.broker_epoch == broker_epoch)
            & (broker.heartbeat == observed_heartbeat)
            & (broker.state != BrokerState.FENCED.value)
        )

        def build(transaction: TransactWrite) -> None:
            self.add_controller_check(transaction, controller_epoch)
            transaction.update(
                broker(broker_id), actions=[broker.state.set(BrokerState.FENCED.value)], condition=condition
            )
            self.add_version_bump(transaction)

        codes = self.transact(f"fence broker {broker_id}", build)
        if codes is None:
            return True
        if codes[0] == _CONDITION_FAILED:
            raise FencedControllerError(controller_epoch)
        return False

    @_dynamodb_errors_as_unavailable
    def get_broker(self, broker_id: int) -> BrokerRegistration | None:
        try:
            return _broker_from_item(self.models.broker.get(broker_id, consistent_read=True))
        except self.models.broker.DoesNotExist:
            return None

    @_dynamodb_errors_as_unavailable
    def list_brokers(self) -> list[BrokerRegistration]:
        """Every registration, in any state, sorted by broker id (consistent read)."""
        items = self.models.broker.scan(consistent_read=True)
        return sorted((_broker_from_item(i) for i in items), key=lambda b: b.broker_id)

    # -- topics ------------------------------------------------------------------------------

    @_dynamodb_errors_as_unavailable
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
        with partition_model.batch_write() as batch:
            for partition_item in partition_items:
                batch.save(partition_item)
        topic = self.models.topic
        topic_item = topic(
            name,
            topic_id=topic_id,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            configs=topic_configs,
            config_version=0,
            created_at_ms=_now_ms(),
        )

        def build(transaction: TransactWrite) -> None:
            transaction.save(topic_item, condition=topic.name.does_not_exist())
            self.add_version_bump(transaction)

        if self.transact(f"create topic {name}", build) is not None:
            self._delete_partition_items(partition_items)
            raise TopicExistsError(name)
        return _topic_from_item(topic_item)

    @_dynamodb_errors_as_unavailable
    def delete_topic(self, name: str) -> None:
        """Delete a topic and its partition items; UnknownTopicError if it does not exist."""
        item = self._get_topic_item(name)
        if item is None:
            raise UnknownTopicError(name)
        topic = self.models.topic
        topic_id = item.topic_id

        def build(transaction: TransactWrite) -> None:
            transaction.delete(topic(name), condition=topic.topic_id == topic_id)
            self.add_version_bump(transaction)

        if self.transact(f"delete topic {name}", build) is not None:
            raise UnknownTopicError(name)
        self._delete_partition_items(list(self.models.partition.query(topic_id, consistent_read=True)))

    def _delete_partition_items(self, items: Iterable[PartitionItem]) -> None:
        with self.models.partition.batch_write() as batch:
            for item in items:
                batch.delete(item)

    def _get_topic_item(self, name: str) -> TopicItem | None:
        try:
            return self.models.topic.get(name, consistent_read=True)
        except self.models.topic.DoesNotExist:
            return None

    @_dynamodb_errors_as_unavailable
    def get_topic(self, name: str) -> TopicDescription:
        """The topic (consistent read); UnknownTopicError if it does not exist."""
        item = self._get_topic_item(name)
        if item is None:
            raise UnknownTopicError(name)
        return _topic_from_item(item)

    @_dynamodb_errors_as_unavailable
    def list_topics(self) -> list[TopicDescription]:
        """Every topic, sorted by name (consistent read)."""
        items = self.models.topic.scan(consistent_read=True)
        return sorted((_topic_from_item(i) for i in items), key=lambda t: t.name)

    @_dynamodb_errors_as_unavailable
    def describe_topic_configs(self, name: str) -> dict[str, str]:
        """The configs set on the topic (defaults are the broker's to add); UnknownTopicError if absent."""
        return dict(self.get_topic(name).configs)

    @_dynamodb_errors_as_unavailable
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
        for attempt in range(_RETRY_ATTEMPTS):
            item = self._get_topic_item(name)
            if item is None:
                raise UnknownTopicError(name)
            configs = dict(item.configs.as_dict()) if item.configs is not None else {}
            configs.update(updates)
            for key in removals:
                configs.pop(key, None)
            if self._write_topic_configs(name, configs, int(item.config_version)):
                return self.get_topic(name)
            _backoff(attempt)
        raise MetadataConflictError(f"alter configs of topic {name}", _RETRY_ATTEMPTS)

    def _write_topic_configs(self, name: str, configs: dict[str, str], config_version: int) -> bool:
        topic = self.models.topic

        def build(transaction: TransactWrite) -> None:
            transaction.update(
                topic(name),
                actions=[topic.configs.set(configs), topic.config_version.set(config_version + 1)],
                condition=topic.config_version == config_version,
            )
            self.add_version_bump(transaction)

        return self.transact(f"alter configs of topic {name}", build) is None

    # -- partitions --------------------------------------------------------------------------

    @_dynamodb_errors_as_unavailable
    def get_partitions(self, topic: str) -> list[PartitionState]:
        """All partitions of the topic, by partition number; UnknownTopicError if it does not exist."""
        item = self._get_topic_item(topic)
        if item is None:
            raise UnknownTopicError(topic)
        items = self.models.partition.query(item.topic_id, consistent_read=True)
        return sorted((_partition_from_item(i) for i in items), key=lambda p: p.partition)

    @_dynamodb_errors_as_unavailable
    def get_partition(self, topic: str, partition: int) -> PartitionState:
        """One partition (consistent read); UnknownTopicError / UnknownPartitionError if absent."""
        item = self._get_topic_item(topic)
        if item is None:
            raise UnknownTopicError(topic)
        try:
            return _partition_from_item(
                self.models.partition.get(item.topic_id, partition, consistent_read=True)
            )
        except self.models.partition.DoesNotExist:
            raise UnknownPartitionError(topic, partition) from None

    @_dynamodb_errors_as_unavailable
    def partitions_led_by(self, broker_id: int) -> list[PartitionState]:
        """Partitions of existing topics whose leader is ``broker_id``."""
        snapshot = self.snapshot()
        return [p for partitions in snapshot.partitions.values() for p in partitions if p.leader == broker_id]

    @_dynamodb_errors_as_unavailable
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
        ]

        def build(transaction: TransactWrite) -> None:
            if controller_epoch is not None:
                self.add_controller_check(transaction, controller_epoch)
            transaction.update(key, actions=actions, condition=condition)
            self.add_version_bump(transaction)

        codes = self.transact(f"update partition {new_state.topic}-{new_state.partition}", build)
        if codes is None:
            return PartitionState(
                topic=new_state.topic,
                topic_id=new_state.topic_id,
                partition=new_state.partition,
                replicas=tuple(new_state.replicas),
                leader=new_state.leader,
                leader_epoch=new_state.leader_epoch,
                partition_epoch=next_epoch,
                isr=tuple(new_state.isr),
            )
        if controller_epoch is not None and codes[0] == _CONDITION_FAILED:
            raise FencedControllerError(controller_epoch)
        try:
            partition.get(new_state.topic_id, new_state.partition, consistent_read=True)
        except partition.DoesNotExist:
            raise UnknownPartitionError(new_state.topic, new_state.partition) from None
        raise PartitionEpochConflictError(new_state.topic, new_state.partition, expected_partition_epoch)

    # -- snapshot ----------------------------------------------------------------------------

    @_dynamodb_errors_as_unavailable
    def snapshot(self) -> ClusterSnapshot:
        """Brokers, topics and partitions with consistent reads, tagged with the metadata version.

        The version is read first, so the snapshot holds at least every change up to it.
        """
        version = self.metadata_version()
        brokers = tuple(self.list_brokers())
        topics = {t.name: t for t in self.list_topics()}
        names_by_id = {t.topic_id: t.name for t in topics.values()}
        grouped: dict[str, list[PartitionState]] = {name: [] for name in topics}
        for item in self.models.partition.scan(consistent_read=True):
            name = names_by_id.get(item.topic_id)
            if name is not None:
                grouped[name].append(_partition_from_item(item))
        partitions = {
            name: tuple(sorted(states, key=lambda p: p.partition)) for name, states in grouped.items()
        }
        return ClusterSnapshot(version=version, brokers=brokers, topics=topics, partitions=partitions)

    # -- producer ids ------------------------------------------------------------------------

    @_dynamodb_errors_as_unavailable
    def allocate_producer_id_block(self, size: int = DEFAULT_PRODUCER_ID_BLOCK_SIZE) -> ProducerIdBlock:
        """Reserve ``size`` producer ids no other caller ever gets: ``range(block.start, block.end)``.

        Read-then-write conditional on the allocator item's ``version``; lost races retry (bounded).
        """
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"producer id block size must be a positive integer, got {size}")
        allocator = self.models.producer_id_block
        for attempt in range(_RETRY_ATTEMPTS):
            try:
                current = allocator.get(PRODUCER_IDS_ITEM, consistent_read=True)
                start, version = int(current.next_start), int(current.version)
                condition: Condition = allocator.version == version
            except allocator.DoesNotExist:
                start, version = 0, 0
                condition = allocator.item.does_not_exist()
            item = allocator(PRODUCER_IDS_ITEM, next_start=start + size, version=version + 1)
            try:
                item.save(condition=condition)
                return ProducerIdBlock(start, start + size)
            except PynamoDBException as err:
                if err.cause_response_code != "ConditionalCheckFailedException":
                    raise
            _backoff(attempt)
        raise MetadataConflictError("allocate producer id block", _RETRY_ATTEMPTS)
