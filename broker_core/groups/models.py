"""pynamodb models of consumer groups: two DynamoDB tables, named table prefix + base name.

``<prefix>groups`` (hash key ``group_id``, string): one item per group holding both its coordinator
lease and its metadata, so that one conditional write can check the lease and change the metadata.

- Lease, in the style of dynamodb-lock-client: ``holder`` (broker id, -1 once released),
  ``coordinator_epoch`` (bumped by every acquisition; the coordinator's fencing token),
  ``heartbeat`` (counter bumped by the holder), ``lease_duration_ms``.
- Metadata: ``generation``, ``state`` (Kafka's group state name), ``protocol_type``,
  ``protocol`` (the selected protocol name), ``leader`` (member id), ``members`` (a list of maps,
  one per member: ids, client id and host, timeouts, the metadata of every protocol it offered
  and its assignment), ``state_timestamp_ms`` (wall clock of the last state change; the base of
  offset expiry once the group is empty). Every metadata write is conditional on the holder, the
  coordinator epoch and the generation last written.

``<prefix>group_offsets`` (hash key ``group_id``, string; range key ``partition_key``, string,
``"<topic>:<partition>"``; ``:`` cannot occur in a topic name): one committed offset per
(group, topic, partition): ``topic``, ``partition``, ``committed_offset``, ``leader_epoch``
(-1 when unknown), ``metadata`` (the client's string, "" when none), ``commit_timestamp_ms``,
``expire_timestamp_ms`` (only for OffsetCommit v2-v4 requests that set a retention time) and
``coordinator_epoch`` of the coordinator that wrote it; a write is conditional on that epoch not
being newer than the writer's.

The HTTP consumer groups of the front ends (KIP-848 style, ``functions.group_state``) have two
tables of their own, apart from the brokers' groups:

``<prefix>http_groups`` (hash key ``group_id``, string): one item per group. ``state`` holds the
whole group as JSON (epochs, members, target assignment, partition counts); ``version`` is bumped
by every write and every write is conditional on the version read, so two front ends changing a
group at once never both win (the loser re-reads and tries again). ``member_epochs`` (map of
member id to member epoch) and ``member_count`` repeat what the JSON says, for the condition of
offset commits.

``<prefix>http_group_offsets`` (hash key ``group_id``; range key ``partition_key``,
``"<topic>:<partition>"``): ``topic``, ``partition``, ``committed_offset``, ``metadata``,
``commit_timestamp_ms``. A commit writes its offsets in transactions of at most 99 items, each with
a condition check on the group item: the member still holds the epoch it committed with (or, for
a commit without a member, the group has no members).

As in ``broker_core.metadata.models``, ``bind_group_models(settings)`` and
``bind_http_group_models(settings)`` build subclasses bound to one prefix, region and endpoint
that share one pynamodb Connection (one botocore client).
"""

from __future__ import annotations

from dataclasses import dataclass

from pynamodb.attributes import (
    BinaryAttribute,
    ListAttribute,
    MapAttribute,
    NumberAttribute,
    UnicodeAttribute,
)
from pynamodb.connection import Connection
from pynamodb.models import Model

from broker_core.aws import AwsSettings
from broker_core.dynamodb_tables import bind_model, share_connection

GROUPS_TABLE = "groups"
OFFSETS_TABLE = "group_offsets"
HTTP_GROUPS_TABLE = "http_groups"
HTTP_GROUP_OFFSETS_TABLE = "http_group_offsets"

# botocore's default pool of 10 connections would make coordinator threads queue for a socket.
_MAX_POOL_CONNECTIONS = 32


def offset_partition_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def pending_offset_key(producer_id: int, topic: str, partition: int) -> str:
    # Topic names hold no ':', so a committed offset's key never has three of them.
    return f"txn:{producer_id}:{topic}:{partition}"


class ProtocolAttribute(MapAttribute):
    """One (name, metadata) pair a member offered in JoinGroup."""

    name = UnicodeAttribute()
    metadata = BinaryAttribute(legacy_encoding=False)


class MemberAttribute(MapAttribute):
    member_id = UnicodeAttribute()
    group_instance_id = UnicodeAttribute(null=True)
    client_id = UnicodeAttribute()
    client_host = UnicodeAttribute()
    session_timeout_ms = NumberAttribute()
    rebalance_timeout_ms = NumberAttribute()
    protocols = ListAttribute(of=ProtocolAttribute)
    assignment = BinaryAttribute(legacy_encoding=False)


class GroupItem(Model):
    group_id = UnicodeAttribute(hash_key=True)
    holder = NumberAttribute()
    coordinator_epoch = NumberAttribute()
    heartbeat = NumberAttribute()
    lease_duration_ms = NumberAttribute()
    generation = NumberAttribute(default=0)
    state = UnicodeAttribute(default="Empty")
    protocol_type = UnicodeAttribute(null=True)
    protocol = UnicodeAttribute(null=True)
    leader = UnicodeAttribute(null=True)
    members = ListAttribute(of=MemberAttribute, default=list)
    state_timestamp_ms = NumberAttribute(default=0)


class OffsetItem(Model):
    group_id = UnicodeAttribute(hash_key=True)
    partition_key = UnicodeAttribute(range_key=True)
    topic = UnicodeAttribute()
    partition = NumberAttribute()
    committed_offset = NumberAttribute()
    leader_epoch = NumberAttribute(default=-1)
    metadata = UnicodeAttribute(default="")
    commit_timestamp_ms = NumberAttribute()
    expire_timestamp_ms = NumberAttribute(null=True)
    coordinator_epoch = NumberAttribute()
    # Set on an offset a transaction committed (TxnOffsetCommit) that waits for its marker; its
    # partition_key is then `pending_offset_key`.
    pending_producer_id = NumberAttribute(null=True)


class HttpGroupItem(Model):
    group_id = UnicodeAttribute(hash_key=True)
    version = NumberAttribute()
    state = UnicodeAttribute()
    member_epochs = MapAttribute(default=dict)
    member_count = NumberAttribute(default=0)


class HttpGroupOffsetItem(Model):
    group_id = UnicodeAttribute(hash_key=True)
    partition_key = UnicodeAttribute(range_key=True)
    topic = UnicodeAttribute()
    partition = NumberAttribute()
    committed_offset = NumberAttribute()
    metadata = UnicodeAttribute(default="")
    commit_timestamp_ms = NumberAttribute()


@dataclass(frozen=True)
class GroupModels:
    """The group models bound to one table prefix, region and endpoint, and their connection."""

    group: type[GroupItem]
    offset: type[OffsetItem]
    connection: Connection

    def all_models(self) -> tuple[type[Model], ...]:
        return (self.group, self.offset)


def bind_group_models(settings: AwsSettings) -> GroupModels:
    """Subclasses of the group models whose Meta points at ``settings``' tables, on one Connection."""
    group = bind_model(GroupItem, settings, GROUPS_TABLE, max_pool_connections=_MAX_POOL_CONNECTIONS)
    offset = bind_model(OffsetItem, settings, OFFSETS_TABLE, max_pool_connections=_MAX_POOL_CONNECTIONS)
    connection = share_connection((group, offset), settings, max_pool_connections=_MAX_POOL_CONNECTIONS)
    return GroupModels(group=group, offset=offset, connection=connection)


@dataclass(frozen=True)
class HttpGroupModels:
    """The HTTP group models bound to one table prefix, region and endpoint, and their connection."""

    group: type[HttpGroupItem]
    offset: type[HttpGroupOffsetItem]
    connection: Connection

    def all_models(self) -> tuple[type[Model], ...]:
        return (self.group, self.offset)


def bind_http_group_models(settings: AwsSettings) -> HttpGroupModels:
    """Subclasses of the HTTP group models whose Meta points at ``settings``' tables, on one Connection."""
    group = bind_model(HttpGroupItem, settings, HTTP_GROUPS_TABLE)
    offset = bind_model(HttpGroupOffsetItem, settings, HTTP_GROUP_OFFSETS_TABLE)
    return HttpGroupModels(group=group, offset=offset, connection=share_connection((group, offset), settings))
