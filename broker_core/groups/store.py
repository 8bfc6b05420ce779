"""Every read and conditional write of consumer-group state in DynamoDB, for brokers and front ends.

Two stores, one per kind of group, each over its own two tables (``broker_core.groups.models``):
``GroupStore`` holds the Kafka-protocol groups of the brokers' coordinators, ``HttpGroupStore`` the
HTTP consumer groups of the front ends, whose membership rules (``functions.group_state``) stay
above it in ``functions``. Both hand out frozen dataclasses, never pynamodb items, and share the
conditional-failure check and error mapping of ``broker_core.dynamodb_tables``.

GroupStore: the coordinator goes through this class.
Lease writes are conditional on the (coordinator epoch, heartbeat) the writer observed, or on the
item not existing yet; group metadata writes on holder, coordinator epoch and the generation last
written; offset writes on the stored offset's coordinator epoch not being newer than the
writer's. A failed condition raises CoordinatorFencedError (the caller lost the group), anything
else from pynamodb or botocore GroupStoreUnavailableError.

HttpGroupStore: every write of a group is conditional on the version it read (a lost race returns
False; the caller reads again and retries), an offset commit on the member's epoch (or on the
group having no members). DynamoDB failures that no condition explains raise
GroupStoreUnavailableError.

Thread-safety: neither store holds mutable state; both may be shared by threads. pynamodb is
synchronous: the coordinator calls GroupStore from worker threads, never from the event loop; the
front ends call HttpGroupStore from the invocation's thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from botocore.exceptions import BotoCoreError
from pynamodb.exceptions import PutError, PynamoDBException, TransactWriteError
from pynamodb.transactions import TransactWrite

from broker_core.aws import AwsSettings
from broker_core.clock import wall_clock_ms
from broker_core.dynamodb_tables import (
    CONDITION_FAILED,
    condition_failed,
    ensure_tables,
    failures_as,
    transact,
)

from .errors import CoordinatorFencedError, GroupError, GroupStoreUnavailableError
from .lease import NO_HOLDER, Lease
from .models import (
    GroupItem,
    GroupModels,
    HttpGroupModels,
    HttpGroupOffsetItem,
    MemberAttribute,
    OffsetItem,
    ProtocolAttribute,
    bind_group_models,
    bind_http_group_models,
    offset_partition_key,
    pending_offset_key,
)

_TRANSACTION_ITEMS = 99  # one transaction item is the condition check on the group
_unavailable_on_error = failures_as(GroupStoreUnavailableError, GroupError)


@dataclass(frozen=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes


@dataclass(frozen=True)
class GroupRecord:
    """The metadata part of a group item: what survives a change of coordinator."""

    generation: int
    state: str
    protocol_type: str | None
    protocol: str | None
    leader: str | None
    members: tuple[StoredMember, ...]
    state_timestamp_ms: int


EMPTY_RECORD = GroupRecord(generation=0, state="Empty", protocol_type=None, protocol=None, leader=None,
                           members=(), state_timestamp_ms=0)


@dataclass(frozen=True)
class StoredGroup:
    group_id: str
    lease: Lease
    record: GroupRecord


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


def _lease_from_item(item: GroupItem) -> Lease:
    return Lease(
        key=item.group_id,
        holder=int(item.holder),
        coordinator_epoch=int(item.coordinator_epoch),
        heartbeat=int(item.heartbeat),
        lease_duration_ms=int(item.lease_duration_ms),
    )


def _member_from_attribute(attr: MemberAttribute) -> StoredMember:
    return StoredMember(
        member_id=attr.member_id,
        group_instance_id=attr.group_instance_id,
        client_id=attr.client_id,
        client_host=attr.client_host,
        session_timeout_ms=int(attr.session_timeout_ms),
        rebalance_timeout_ms=int(attr.rebalance_timeout_ms),
        protocols=tuple((p.name, bytes(p.metadata or b"")) for p in attr.protocols or ()),
        assignment=bytes(attr.assignment or b""),
    )


def _member_attribute(member: StoredMember) -> MemberAttribute:
    return MemberAttribute(
        member_id=member.member_id,
        group_instance_id=member.group_instance_id,
        client_id=member.client_id,
        client_host=member.client_host,
        session_timeout_ms=member.session_timeout_ms,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        protocols=[ProtocolAttribute(name=name, metadata=metadata) for name, metadata in member.protocols],
        assignment=member.assignment,
    )


def _group_from_item(item: GroupItem) -> StoredGroup:
    record = GroupRecord(
        generation=int(item.generation or 0),
        state=item.state or "Empty",
        protocol_type=item.protocol_type,
        protocol=item.protocol,
        leader=item.leader,
        members=tuple(_member_from_attribute(m) for m in item.members or ()),
        state_timestamp_ms=int(item.state_timestamp_ms or 0),
    )
    return StoredGroup(item.group_id, _lease_from_item(item), record)


def _offset_from_item(item: OffsetItem) -> CommittedOffset:
    return CommittedOffset(
        offset=int(item.committed_offset),
        leader_epoch=int(item.leader_epoch if item.leader_epoch is not None else -1),
        metadata=item.metadata or "",
        commit_timestamp_ms=int(item.commit_timestamp_ms),
        expire_timestamp_ms=int(item.expire_timestamp_ms) if item.expire_timestamp_ms is not None else None,
    )


class GroupStore:
    """Group leases, group metadata and committed offsets in two DynamoDB tables."""

    def __init__(self, settings: AwsSettings) -> None:
        self.settings = settings
        self.models: GroupModels = bind_group_models(settings)

    # tables -------------------------------------------------------------------------------------

    @_unavailable_on_error
    def ensure_tables(self) -> None:
        """Create the group tables if missing (on-demand billing) and wait until they are ACTIVE.

        Safe to call from several brokers at once: a table another broker is creating is waited for.
        """
        ensure_tables(self.models.all_models(), GroupStoreUnavailableError)

    # groups and leases --------------------------------------------------------------------------

    @_unavailable_on_error
    def read_group(self, group_id: str) -> StoredGroup | None:
        """The group item as stored now (consistent read), or None if no broker ever took its lease."""
        model = self.models.group
        try:
            return _group_from_item(model.get(group_id, consistent_read=True))
        except model.DoesNotExist:
            return None

    @_unavailable_on_error
    def list_groups(self) -> list[StoredGroup]:
        """Every group item (consistent scan); for listing groups, not for the request path."""
        return [_group_from_item(item) for item in self.models.group.scan(consistent_read=True)]

    @_unavailable_on_error
    def create_lease(self, group_id: str, broker_id: int, lease_duration_ms: int) -> Lease | None:
        """Create the item of a group nobody has held, held by ``broker_id`` at epoch 1.

        None when another broker created it first.
        """
        model = self.models.group
        item = model(
            group_id, holder=broker_id, coordinator_epoch=1, heartbeat=0, lease_duration_ms=lease_duration_ms,
            generation=0, state="Empty", members=[], state_timestamp_ms=wall_clock_ms(),
        )
        try:
            item.save(condition=model.group_id.does_not_exist())
        except PynamoDBException as err:
            if condition_failed(err):
                return None
            raise
        return _lease_from_item(item)

    @_unavailable_on_error
    def take_lease(self, seen: Lease, broker_id: int, lease_duration_ms: int) -> Lease | None:
        """Take the lease ``seen`` describes (released, lapsed, or left by an earlier incarnation).

        The write is conditional on the epoch and heartbeat in ``seen`` and bumps the epoch, so at
        most one contender wins and the old holder's writes fail from then on. None if lost.
        """
        model = self.models.group
        condition = (model.coordinator_epoch == seen.coordinator_epoch) & (model.heartbeat == seen.heartbeat)
        actions = [
            model.holder.set(broker_id),
            model.coordinator_epoch.set(seen.coordinator_epoch + 1),
            model.heartbeat.add(1),
            model.lease_duration_ms.set(lease_duration_ms),
        ]
        try:
            model(seen.key).update(actions, condition)
        except PynamoDBException as err:
            if condition_failed(err):
                return None
            raise
        return Lease(seen.key, broker_id, seen.coordinator_epoch + 1, seen.heartbeat + 1, lease_duration_ms)

    @_unavailable_on_error
    def heartbeat_lease(self, group_id: str, broker_id: int, coordinator_epoch: int) -> None:
        """Bump the heartbeat counter; CoordinatorFencedError if the lease moved on."""
        model = self.models.group
        condition = (model.coordinator_epoch == coordinator_epoch) & (model.holder == broker_id)
        try:
            model(group_id).update([model.heartbeat.add(1)], condition)
        except PynamoDBException as err:
            if condition_failed(err):
                raise CoordinatorFencedError(group_id, coordinator_epoch, "lease heartbeat") from err
            raise

    @_unavailable_on_error
    def release_lease(self, group_id: str, broker_id: int, coordinator_epoch: int) -> None:
        """Give the lease up so that any broker may take it at once (no-op if already lost)."""
        model = self.models.group
        condition = (model.coordinator_epoch == coordinator_epoch) & (model.holder == broker_id)
        try:
            model(group_id).update([model.holder.set(NO_HOLDER), model.heartbeat.add(1)], condition)
        except PynamoDBException as err:
            if not condition_failed(err):
                raise

    @_unavailable_on_error
    def write_group(self, group_id: str, broker_id: int, coordinator_epoch: int, expected_generation: int,
                    record: GroupRecord) -> None:
        """Replace the group's metadata, conditional on the lease and on ``expected_generation``."""
        model = self.models.group
        condition = (
            (model.coordinator_epoch == coordinator_epoch)
            & (model.holder == broker_id)
            & (model.generation == expected_generation)
        )
        actions = [
            model.generation.set(record.generation),
            model.state.set(record.state),
            model.members.set([_member_attribute(m) for m in record.members]),
            model.state_timestamp_ms.set(record.state_timestamp_ms),
        ]
        for attribute, value in ((model.protocol_type, record.protocol_type), (model.protocol, record.protocol),
                                 (model.leader, record.leader)):
            actions.append(attribute.set(value) if value is not None else attribute.remove())
        try:
            model(group_id).update(actions, condition)
        except PynamoDBException as err:
            if condition_failed(err):
                raise CoordinatorFencedError(
                    group_id, coordinator_epoch, f"write generation {record.generation}") from err
            raise

    @_unavailable_on_error
    def delete_group(self, group_id: str, broker_id: int, coordinator_epoch: int) -> None:
        """Delete the group item (and with it the lease), conditional on holding the lease."""
        model = self.models.group
        condition = (model.coordinator_epoch == coordinator_epoch) & (model.holder == broker_id)
        try:
            model(group_id).delete(condition)
        except PynamoDBException as err:
            if condition_failed(err):
                raise CoordinatorFencedError(group_id, coordinator_epoch, "delete group") from err
            raise

    # offsets ------------------------------------------------------------------------------------

    @_unavailable_on_error
    def load_offsets(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        """Every committed offset of the group (consistent query), without transactions' pending ones."""
        return {
            (item.topic, int(item.partition)): _offset_from_item(item)
            for item in self._offset_items(group_id) if item.pending_producer_id is None
        }

    @_unavailable_on_error
    def load_pending_offsets(self, group_id: str) -> dict[int, dict[tuple[str, int], CommittedOffset]]:
        """The offsets open transactions committed to the group, by producer id."""
        pending: dict[int, dict[tuple[str, int], CommittedOffset]] = {}
        for item in self._offset_items(group_id):
            if item.pending_producer_id is not None:
                offsets = pending.setdefault(int(item.pending_producer_id), {})
                offsets[(item.topic, int(item.partition))] = _offset_from_item(item)
        return pending

    @_unavailable_on_error
    def put_pending_offset(self, group_id: str, producer_id: int, topic: str, partition: int,
                           committed: CommittedOffset, coordinator_epoch: int) -> None:
        """Write an offset a transaction committed, to become a committed offset on its commit marker."""
        model = self.models.offset
        item = model(
            group_id, pending_offset_key(producer_id, topic, partition), topic=topic, partition=partition,
            committed_offset=committed.offset, leader_epoch=committed.leader_epoch, metadata=committed.metadata,
            commit_timestamp_ms=committed.commit_timestamp_ms, coordinator_epoch=coordinator_epoch,
            pending_producer_id=producer_id,
        )
        condition = model.group_id.does_not_exist() | (model.coordinator_epoch <= coordinator_epoch)
        try:
            item.save(condition=condition)
        except PynamoDBException as err:
            if condition_failed(err):
                raise CoordinatorFencedError(group_id, coordinator_epoch, f"pending {topic}-{partition}") from err
            raise

    @_unavailable_on_error
    def delete_pending_offset(self, group_id: str, producer_id: int, topic: str, partition: int,
                              coordinator_epoch: int) -> None:
        model = self.models.offset
        condition = model.group_id.does_not_exist() | (model.coordinator_epoch <= coordinator_epoch)
        try:
            model(group_id, pending_offset_key(producer_id, topic, partition)).delete(condition)
        except PynamoDBException as err:
            if condition_failed(err):
                raise CoordinatorFencedError(group_id, coordinator_epoch, f"pending {topic}-{partition}") from err
            raise

    def _offset_items(self, group_id: str) -> Iterator[OffsetItem]:
        return self.models.offset.query(group_id, consistent_read=True)

    @_unavailable_on_error
    def put_offset(self, group_id: str, topic: str, partition: int, committed: CommittedOffset,
                   coordinator_epoch: int) -> None:
        """Write one committed offset unless a coordinator with a newer epoch already wrote it."""
        model = self.models.offset
        item = model(
            group_id, offset_partition_key(topic, partition), topic=topic, partition=partition,
            committed_offset=committed.offset, leader_epoch=committed.leader_epoch, metadata=committed.metadata,
            commit_timestamp_ms=committed.commit_timestamp_ms, expire_timestamp_ms=committed.expire_timestamp_ms,
            coordinator_epoch=coordinator_epoch,
        )
        condition = model.group_id.does_not_exist() | (model.coordinator_epoch <= coordinator_epoch)
        try:
            item.save(condition=condition)
        except PynamoDBException as err:
            if condition_failed(err):
                raise CoordinatorFencedError(group_id, coordinator_epoch, f"commit {topic}-{partition}") from err
            raise

    @_unavailable_on_error
    def delete_offset(self, group_id: str, topic: str, partition: int, coordinator_epoch: int) -> None:
        """Delete one committed offset unless a coordinator with a newer epoch wrote it."""
        model = self.models.offset
        condition = model.group_id.does_not_exist() | (model.coordinator_epoch <= coordinator_epoch)
        try:
            model(group_id, offset_partition_key(topic, partition)).delete(condition)
        except PynamoDBException as err:
            if condition_failed(err):
                raise CoordinatorFencedError(group_id, coordinator_epoch, f"delete {topic}-{partition}") from err
            raise


@dataclass(frozen=True)
class StoredHttpGroup:
    """An HTTP group as stored: its state as JSON, and the version every write bumps (0: not stored)."""

    state: str
    version: int


@dataclass(frozen=True)
class HttpCommittedOffset:
    topic: str
    partition: int
    offset: int
    metadata: str


class HttpGroupStore:
    """HTTP consumer groups (one JSON document per group, versioned) and their offsets in two tables."""

    def __init__(self, settings: AwsSettings) -> None:
        self.settings = settings
        self.models: HttpGroupModels = bind_http_group_models(settings)

    def ensure_tables(self) -> None:
        """Create the two tables if missing (on-demand billing) and wait until they are ACTIVE."""
        try:
            ensure_tables(self.models.all_models(), GroupStoreUnavailableError)
        except (PynamoDBException, BotoCoreError) as error:
            raise GroupStoreUnavailableError(f"cannot create the HTTP group tables: {error}") from error

    def load(self, group_id: str) -> StoredHttpGroup | None:
        """The group as stored now (consistent read), None if it is not stored."""
        model = self.models.group
        try:
            item = model.get(group_id, consistent_read=True)
        except model.DoesNotExist:
            return None
        except (PynamoDBException, BotoCoreError) as error:
            raise GroupStoreUnavailableError(f"cannot read group {group_id!r}: {error}") from error
        return StoredHttpGroup(item.state, int(item.version))

    def save(self, group_id: str, state: str, member_epochs: Mapping[str, int], read_version: int) -> bool:
        """Write the group if it is still at ``read_version`` (0: not stored yet); False if it moved."""
        model = self.models.group
        item = model(group_id, version=read_version + 1, state=state, member_epochs=dict(member_epochs),
                     member_count=len(member_epochs))
        condition = model.group_id.does_not_exist() if read_version == 0 else model.version == read_version
        try:
            item.save(condition=condition)
        except PutError as error:
            if condition_failed(error):
                return False
            raise GroupStoreUnavailableError(f"cannot write group {group_id!r}: {error}") from error
        except BotoCoreError as error:
            raise GroupStoreUnavailableError(f"cannot write group {group_id!r}: {error}") from error
        return True

    def commit(self, group_id: str, member_id: str | None, member_epoch: int | None,
               offsets: Iterable[HttpCommittedOffset], now_ms: int) -> bool:
        """Write offsets, each transaction conditional on the member's epoch (or on no members).

        False when the condition failed: the member's epoch moved, or members appeared; the
        transactions before the failed one have committed.
        """
        group, offset = self.models.group, self.models.offset
        if member_id is None:
            condition = group.group_id.does_not_exist() | (group.member_count == 0)
        else:
            condition = group.member_epochs[member_id] == member_epoch
        items = [
            offset(group_id, offset_partition_key(o.topic, o.partition), topic=o.topic, partition=o.partition,
                   committed_offset=o.offset, metadata=o.metadata, commit_timestamp_ms=now_ms)
            for o in offsets
        ]
        for start in range(0, len(items), _TRANSACTION_ITEMS):
            chunk = items[start:start + _TRANSACTION_ITEMS]

            def build(transaction: TransactWrite, chunk: list[HttpGroupOffsetItem] = chunk) -> None:
                transaction.condition_check(group, group_id, condition=condition)
                for item in chunk:
                    transaction.save(item)

            try:
                codes = transact(self.models.connection, build, lambda attempts: GroupStoreUnavailableError(
                    f"cannot commit offsets of group {group_id!r}: still conflicting after {attempts} attempts"))
            except (TransactWriteError, BotoCoreError) as error:
                raise GroupStoreUnavailableError(f"cannot commit offsets of group {group_id!r}: {error}") from error
            if codes is not None and CONDITION_FAILED in codes:
                return False
        return True

    def committed(self, group_id: str, topic: str | None = None) -> list[HttpCommittedOffset]:
        """The group's committed offsets (of one topic, or all), by topic and partition."""
        model = self.models.offset
        try:
            if topic is None:
                items = model.query(group_id, consistent_read=True)
            else:
                items = model.query(group_id, model.partition_key.startswith(f"{topic}:"), consistent_read=True)
            found = [HttpCommittedOffset(i.topic, int(i.partition), int(i.committed_offset), i.metadata)
                     for i in items]
        except (PynamoDBException, BotoCoreError) as error:
            raise GroupStoreUnavailableError(f"cannot read offsets of group {group_id!r}: {error}") from error
        return sorted(found, key=lambda o: (o.topic, o.partition))
