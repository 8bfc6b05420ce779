"""TransactionStore: one DynamoDB item per transactional id, in ``<prefix>transactions``.

Item layout (hash key ``transactional_id``):
- the coordinator lease, as a group item has it (``broker_core.groups.lease``): ``holder`` (broker id,
  -1 once released), ``coordinator_epoch`` (bumped by every acquisition: the fencing token of every
  write), ``heartbeat`` (counter bumped by the holder), ``lease_duration_ms``;
- the transaction (absent until the first InitProducerId): ``producer_id``, ``producer_epoch``,
  ``state`` (Kafka's state names), ``partitions`` (``topic/partition`` strings), ``groups``,
  ``timeout_ms``, ``start_ms``, ``last_update_ms`` and ``version``, bumped by every state write.

Every state write is conditional on the writer's holder and coordinator epoch and on the version it
read, so a coordinator that lost the id, or two writers racing, can never overwrite a newer state;
a failed condition raises TransactionCoordinatorFencedError, any other DynamoDB failure
TransactionStoreUnavailableError. Thread-safety: no mutable state; pynamodb is synchronous, so the
coordinator calls it from worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pynamodb.attributes import ListAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import PutError, PynamoDBException, UpdateError
from pynamodb.models import Model

from broker_core.aws import AwsSettings
from broker_core.dynamodb_tables import (
    bind_model,
    condition_failed,
    ensure_tables,
    failures_as,
    share_connection,
)
from broker_core.groups.lease import NO_HOLDER, Lease

from .errors import TransactionCoordinatorFencedError, TransactionError, TransactionStoreUnavailableError
from .state import TopicPartition, TransactionState, TxnState

TRANSACTIONS_TABLE = "transactions"

_unavailable_on_error = failures_as(TransactionStoreUnavailableError, TransactionError)


class TransactionItem(Model):
    transactional_id = UnicodeAttribute(hash_key=True)
    holder = NumberAttribute()
    coordinator_epoch = NumberAttribute()
    heartbeat = NumberAttribute()
    lease_duration_ms = NumberAttribute()
    producer_id = NumberAttribute(null=True)
    producer_epoch = NumberAttribute(null=True)
    state = UnicodeAttribute(null=True)
    partitions = ListAttribute(of=UnicodeAttribute, null=True)
    groups = ListAttribute(of=UnicodeAttribute, null=True)
    timeout_ms = NumberAttribute(null=True)
    start_ms = NumberAttribute(null=True)
    last_update_ms = NumberAttribute(null=True)
    version = NumberAttribute(default=0)


@dataclass(frozen=True)
class StoredTransaction:
    lease: Lease
    state: TransactionState | None


def _lease(item: TransactionItem) -> Lease:
    return Lease(item.transactional_id, int(item.holder), int(item.coordinator_epoch),
                            int(item.heartbeat), int(item.lease_duration_ms))


def _state(item: TransactionItem) -> TransactionState | None:
    if item.producer_id is None or item.state is None:
        return None
    return TransactionState(
        transactional_id=item.transactional_id,
        producer_id=int(item.producer_id),
        producer_epoch=int(item.producer_epoch),
        state=TxnState(item.state),
        timeout_ms=int(item.timeout_ms),
        partitions=frozenset(TopicPartition.parse(p) for p in item.partitions or ()),
        groups=frozenset(item.groups or ()),
        start_ms=int(item.start_ms if item.start_ms is not None else -1),
        last_update_ms=int(item.last_update_ms if item.last_update_ms is not None else -1),
        version=int(item.version or 0),
    )


class TransactionStore:
    """Transaction leases and states in one DynamoDB table."""

    def __init__(self, settings: AwsSettings) -> None:
        self.model: type[TransactionItem] = bind_model(TransactionItem, settings, TRANSACTIONS_TABLE)
        # one observed client: its calls count in the DynamoDB call metrics (broker_core.metrics.aws_calls)
        share_connection([self.model], settings)

    @_unavailable_on_error
    def ensure_table(self) -> None:
        """Create the table if missing and wait until it is ACTIVE; safe from several brokers at once."""
        ensure_tables([self.model], TransactionStoreUnavailableError)

    @_unavailable_on_error
    def read(self, transactional_id: str) -> StoredTransaction | None:
        try:
            item = self.model.get(transactional_id, consistent_read=True)
        except self.model.DoesNotExist:
            return None
        return StoredTransaction(_lease(item), _state(item))

    @_unavailable_on_error
    def scan(self) -> list[StoredTransaction]:
        """Every transactional id with a transaction (a consistent scan: for listing, not a hot path)."""
        stored = [StoredTransaction(_lease(item), _state(item)) for item in self.model.scan(consistent_read=True)]
        return [s for s in stored if s.state is not None]

    @_unavailable_on_error
    def create_lease(self, transactional_id: str, holder: int, lease_duration_ms: int) -> Lease | None:
        """Take the lease of a transactional id no item exists for; None if another broker created it first."""
        item = self.model(transactional_id, holder=holder, coordinator_epoch=1, heartbeat=0,
                          lease_duration_ms=lease_duration_ms)
        try:
            item.save(condition=self.model.transactional_id.does_not_exist())
        except PutError as err:
            if condition_failed(err):
                return None
            raise
        return Lease(transactional_id, holder, 1, 0, lease_duration_ms)

    @_unavailable_on_error
    def take_lease(self, seen: Lease, holder: int, lease_duration_ms: int) -> Lease | None:
        """Take over a lease that is free or lapsed, conditional on it being unchanged since ``seen``."""
        epoch = seen.coordinator_epoch + 1
        item = self.model(seen.key)
        try:
            item.update(
                actions=[self.model.holder.set(holder), self.model.coordinator_epoch.set(epoch),
                         self.model.heartbeat.set(0), self.model.lease_duration_ms.set(lease_duration_ms)],
                condition=(self.model.holder == seen.holder) & (self.model.coordinator_epoch == seen.coordinator_epoch)
                & (self.model.heartbeat == seen.heartbeat),
            )
        except UpdateError as err:
            if condition_failed(err):
                return None
            raise
        return Lease(seen.key, holder, epoch, 0, lease_duration_ms)

    @_unavailable_on_error
    def heartbeat_lease(self, transactional_id: str, holder: int, coordinator_epoch: int) -> None:
        self._conditional_update(transactional_id, holder, coordinator_epoch, [self.model.heartbeat.add(1)],
                                 None, "lease heartbeat")

    @_unavailable_on_error
    def release_lease(self, transactional_id: str, holder: int, coordinator_epoch: int) -> None:
        self._conditional_update(transactional_id, holder, coordinator_epoch, [self.model.holder.set(NO_HOLDER)],
                                 None, "lease release")

    @_unavailable_on_error
    def write(self, state: TransactionState, holder: int, coordinator_epoch: int) -> TransactionState:
        """Store ``state`` over the version it was derived from; returns it with its new version."""
        m = self.model
        actions = [
            m.producer_id.set(state.producer_id), m.producer_epoch.set(state.producer_epoch),
            m.state.set(state.state.value), m.timeout_ms.set(state.timeout_ms), m.start_ms.set(state.start_ms),
            m.last_update_ms.set(state.last_update_ms), m.version.set(state.version + 1),
            m.partitions.set(sorted(p.key() for p in state.partitions)), m.groups.set(sorted(state.groups)),
        ]
        version_holds = (m.version == state.version) if state.version else m.version.does_not_exist() | (m.version == 0)
        self._conditional_update(state.transactional_id, holder, coordinator_epoch, actions, version_holds,
                                 f"state write over version {state.version}")
        return replace(state, version=state.version + 1)

    def _conditional_update(self, transactional_id: str, holder: int, coordinator_epoch: int, actions: list,
                            extra_condition: object, what: str) -> None:
        condition = (self.model.holder == holder) & (self.model.coordinator_epoch == coordinator_epoch)
        if extra_condition is not None:
            condition = condition & extra_condition
        try:
            self.model(transactional_id).update(actions=actions, condition=condition)
        except PynamoDBException as err:
            if condition_failed(err):
                raise TransactionCoordinatorFencedError(transactional_id, coordinator_epoch, what) from err
            raise
