"""DynamoDB storage of the HTTP consumer groups: two tables of their own, apart from the brokers' groups.

``<prefix>http_groups`` (hash key ``group_id``, string): one item per group. ``state`` holds the
whole `functions.group_state.Group` as JSON (epochs, members, target assignment, partition counts);
``version`` is bumped by every write and every write is conditional on the version read, so two
front ends changing a group at once never both win (the loser re-reads and tries again).
``member_epochs`` (map of member id to member epoch) and ``member_count`` repeat what the JSON
says, for the condition of offset commits.

``<prefix>http_group_offsets`` (hash key ``group_id``; range key ``partition_key``,
``"<topic>:<partition>"``): ``topic``, ``partition``, ``committed_offset``, ``metadata``,
``commit_timestamp_ms``. A commit writes its offsets in transactions of at most 99 items, each with
a condition check on the group item: the member still holds the epoch it committed with (or, for
a commit without a member, the group has no members). A fenced member's commit therefore never
lands, whatever happened between its last read and its write.

Thread-safety: a GroupStore holds no mutable state; pynamodb is synchronous and the front ends
call it from the invocation's thread.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from botocore.exceptions import BotoCoreError
from pynamodb.attributes import MapAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.connection import Connection
from pynamodb.exceptions import PutError, PynamoDBException, TransactWriteError
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from broker_core.aws import AwsSettings
from broker_core.dynamodb_tables import bind_model, ensure_tables
from functions.group_state import Group, GroupStateError
from functions.runtime import HTTP_GROUP_OFFSETS_TABLE, HTTP_GROUPS_TABLE

_WRITE_ATTEMPTS = 12
_TRANSACTION_ITEMS = 99

_T = TypeVar("_T")


class GroupStoreError(Exception):
    """DynamoDB failed for a reason no condition explains; the request may be retried."""


class GroupBusyError(GroupStoreError):
    """Other writers kept changing the group; every attempt lost its conditional write."""


class CommitFencedError(GroupStateError):
    """The group changed under the commit: the member's epoch moved, or members appeared."""


class GroupItem(Model):
    group_id = UnicodeAttribute(hash_key=True)
    version = NumberAttribute()
    state = UnicodeAttribute()
    member_epochs = MapAttribute(default=dict)
    member_count = NumberAttribute(default=0)


class GroupOffsetItem(Model):
    group_id = UnicodeAttribute(hash_key=True)
    partition_key = UnicodeAttribute(range_key=True)
    topic = UnicodeAttribute()
    partition = NumberAttribute()
    committed_offset = NumberAttribute()
    metadata = UnicodeAttribute(default="")
    commit_timestamp_ms = NumberAttribute()


@dataclass(frozen=True)
class StoredGroup:
    group: Group
    version: int


@dataclass(frozen=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int
    metadata: str


def _is_condition_failure(error: PynamoDBException) -> bool:
    code = error.cause_response_code or ""
    reasons = getattr(error, "cancellation_reasons", None) or []
    return code == "ConditionalCheckFailedException" or any(
        reason is not None and reason.code == "ConditionalCheckFailed" for reason in reasons)


class GroupStore:
    def __init__(self, settings: AwsSettings) -> None:
        self.settings = settings
        self.groups: type[GroupItem] = bind_model(GroupItem, settings, HTTP_GROUPS_TABLE)
        self.offsets: type[GroupOffsetItem] = bind_model(GroupOffsetItem, settings, HTTP_GROUP_OFFSETS_TABLE)

    def ensure_tables(self) -> None:
        """Create the two tables if missing (on-demand billing) and wait until they are ACTIVE."""
        try:
            ensure_tables((self.groups, self.offsets), GroupStoreError)
        except (PynamoDBException, BotoCoreError) as error:
            raise GroupStoreError(f"cannot create the HTTP group tables: {error}") from error

    def load(self, group_id: str) -> StoredGroup | None:
        try:
            item = self.groups.get(group_id, consistent_read=True)
        except self.groups.DoesNotExist:
            return None
        except (PynamoDBException, BotoCoreError) as error:
            raise GroupStoreError(f"cannot read group {group_id!r}: {error}") from error
        return StoredGroup(Group.from_json(group_id, item.state), int(item.version))

    def _save(self, group: Group, read_version: int) -> bool:
        """Write ``group`` if it is still at ``read_version`` (0: not stored yet); False if it moved."""
        item = self.groups(group.group_id, version=read_version + 1, state=group.to_json(),
                           member_epochs={m.member_id: m.member_epoch for m in group.members.values()},
                           member_count=len(group.members))
        condition = (self.groups.group_id.does_not_exist() if read_version == 0
                     else self.groups.version == read_version)
        try:
            item.save(condition=condition)
        except PutError as error:
            if _is_condition_failure(error):
                return False
            raise GroupStoreError(f"cannot write group {group.group_id!r}: {error}") from error
        except BotoCoreError as error:
            raise GroupStoreError(f"cannot write group {group.group_id!r}: {error}") from error
        return True

    def update(self, group_id: str, change: Callable[[Group], _T], *, create: bool = True) -> _T:
        """Apply ``change`` to the group read fresh and write it back conditionally, again on a lost race.

        ``change`` may raise GroupStateError to refuse (nothing is written). With ``create=False`` a
        group that is not stored raises LookupError.
        """
        for attempt in range(_WRITE_ATTEMPTS):
            stored = self.load(group_id)
            if stored is None and not create:
                raise LookupError(group_id)
            group = stored.group if stored is not None else Group(group_id)
            result = change(group)
            if self._save(group, stored.version if stored is not None else 0):
                return result
            time.sleep(random.uniform(0, min(0.5, 0.01 * 2 ** attempt)))
        raise GroupBusyError(f"group {group_id!r} changed under every one of {_WRITE_ATTEMPTS} attempts")

    def commit(self, group_id: str, member_id: str | None, member_epoch: int | None,
               offsets: Iterable[CommittedOffset], now_ms: int) -> None:
        """Write offsets, each transaction conditional on the member's epoch (or on no members)."""
        if member_id is None:
            condition = self.groups.group_id.does_not_exist() | (self.groups.member_count == 0)
        else:
            condition = self.groups.member_epochs[member_id] == member_epoch
        items = [
            self.offsets(group_id, f"{o.topic}:{o.partition}", topic=o.topic, partition=o.partition,
                         committed_offset=o.offset, metadata=o.metadata, commit_timestamp_ms=now_ms)
            for o in offsets
        ]
        connection = Connection(region=self.settings.region, host=self.settings.endpoint_url)
        for start in range(0, len(items), _TRANSACTION_ITEMS):
            try:
                with TransactWrite(connection=connection) as transaction:
                    transaction.condition_check(self.groups, group_id, condition=condition)
                    for item in items[start:start + _TRANSACTION_ITEMS]:
                        transaction.save(item)
            except TransactWriteError as error:
                if _is_condition_failure(error):
                    raise CommitFencedError(f"group {group_id!r} changed under the commit (member {member_id!r}, "
                                            f"epoch {member_epoch}): heartbeat and commit again") from error
                raise GroupStoreError(f"cannot commit offsets of group {group_id!r}: {error}") from error
            except BotoCoreError as error:
                raise GroupStoreError(f"cannot commit offsets of group {group_id!r}: {error}") from error

    def committed(self, group_id: str, topic: str | None = None) -> list[CommittedOffset]:
        try:
            if topic is None:
                items = self.offsets.query(group_id, consistent_read=True)
            else:
                items = self.offsets.query(group_id, self.offsets.partition_key.startswith(f"{topic}:"),
                                           consistent_read=True)
            found = [CommittedOffset(i.topic, int(i.partition), int(i.committed_offset), i.metadata) for i in items]
        except (PynamoDBException, BotoCoreError) as error:
            raise GroupStoreError(f"cannot read offsets of group {group_id!r}: {error}") from error
        return sorted(found, key=lambda o: (o.topic, o.partition))
