"""Committed offsets of the groups this broker coordinates: OffsetCommit, TxnOffsetCommit, OffsetFetch
and expiry.

Offsets are one item per (group, topic, partition), written before the commit is acknowledged,
one at a time per partition in arrival order, conditional on the group's coordinator epoch, and
served from memory afterwards. Once a group has members only members of the current generation
may commit. Offsets of empty groups and standalone committers expire after
``offsets.retention.minutes`` (or the commit's own retention); an empty group left without
offsets is deleted, as Kafka's Dead state forgets it.

Authorization, as Kafka's: OffsetCommit needs READ on the group (else every partition is
GROUP_AUTHORIZATION_FAILED) and READ on each topic (else that topic's partitions are
TOPIC_AUTHORIZATION_FAILED); TxnOffsetCommit needs WRITE on the transactional id first (else every
partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then the same READs as OffsetCommit;
OffsetFetch needs DESCRIBE on the group (else the whole answer is GROUP_AUTHORIZATION_FAILED) and
DESCRIBE on each topic named (else TOPIC_AUTHORIZATION_FAILED); asked for all of a group's offsets,
it leaves out the topics the principal may not describe.

Offsets a transactional producer commits (TxnOffsetCommit) are pending: stored as their own items
(``GroupStore.put_pending_offset``), invisible to OffsetFetch (which answers UNSTABLE_OFFSET_COMMIT
for them when the consumer asks for stable offsets), until the transaction coordinator completes the
producer's transaction here (`complete_transaction`, or a WriteTxnMarkers for the group's marker
partition, `MARKER_TOPIC`): a commit makes them the group's committed offsets, an abort drops them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import zlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.clock import wall_clock_ms
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, respond
from broker_core.security.acls import AclOperation, ResourceType
from broker_core.server.authorization import allowed

from .consumer_protocol import ConsumerProtocolError, decode_subscription
from .errors import CoordinatorFencedError, GroupStoreUnavailableError
from .group import ConsumerGroup, GroupState, offset_expired
from .membership import millis, validate_member
from .ownership import GroupOwnership
from .store import CommittedOffset

if TYPE_CHECKING:
    from broker_core.server.context import BrokerContext

log = logging.getLogger(__name__)

# The transaction coordinator addresses a group's transaction marker to this topic, at the partition
# `marker_partition(group_id)`, as Kafka addresses it to the group's __consumer_offsets partition.
MARKER_TOPIC = "__consumer_offsets"


def marker_partition(group_id: str) -> int:
    """A group's marker partition: a 31-bit hash of its id, so that two groups seldom share one."""
    return zlib.crc32(group_id.encode()) & 0x7FFFFFFF


# Refusals that answer every partition of a commit, before its topics are looked at.
_REFUSED_WHOLE = frozenset({ErrorCode.group_authorization_failed, ErrorCode.transactional_id_authorization_failed})



class GroupOffsets:
    """OffsetCommit and OffsetFetch for the groups `GroupOwnership` holds, and their expiry.

    Commits of one partition are serialised by ``group.offset_locks``; the in-memory offset changes
    only after the store accepted the write. Called from the event loop only.
    """

    def __init__(self, ownership: GroupOwnership, context: BrokerContext) -> None:
        self.ownership = ownership
        self.context = context
        self.config = context.config

    async def offset_commit(self, request: Request) -> Any:
        body = request.body
        authorizer = self.context.authorizer
        if not allowed(authorizer, request, AclOperation.READ, ResourceType.GROUP, body.group_id):
            group, error = None, ErrorCode.group_authorization_failed
        else:
            group, error = self.ownership.owned(body.group_id)
        if group is not None:
            error = self._validate_commit(group, body)
        retention_ms = millis(getattr(body, "retention_time", None), -1)

        def write(topic: str, partition: int, committed: CommittedOffset, result: dict[str, Any]) -> Awaitable[None]:
            if retention_ms > 0:
                committed = dataclasses.replace(committed,
                                                expire_timestamp_ms=committed.commit_timestamp_ms + retention_ms)
            return self._commit_one(group, topic, partition, committed, result)

        topics = await self._commit_offsets(request, error, write)
        return respond(request, {"throttle_time": NO_THROTTLE, "topics": topics})

    async def _commit_offsets(self, request: Request, error: ErrorCode,
                              write: Callable[[str, int, CommittedOffset, dict[str, Any]], Awaitable[None]]
                              ) -> list[dict[str, Any]]:
        """The per-partition results of an OffsetCommit or TxnOffsetCommit: ``error`` for every
        partition when it is set, else each partition checked (READ on its topic first) and, if
        valid, written by ``write``."""
        now_ms = wall_clock_ms()
        authorizer = self.context.authorizer
        image = self.context.image
        max_metadata = self.config.get_int("offset.metadata.max.bytes")
        results, writes = [], []
        for topic in request.body.topics:
            partitions = []
            topic_error = error
            # As Kafka, topics are authorized before the coordinator answers (NOT_COORDINATOR and the like).
            if error not in _REFUSED_WHOLE and not allowed(authorizer, request, AclOperation.READ,
                                                           ResourceType.TOPIC, topic.name):
                topic_error = ErrorCode.topic_authorization_failed
            for p in topic.partitions:
                result = {"partition_index": p.partition_index, "error_code": topic_error}
                partitions.append(result)
                if topic_error != ErrorCode.none:
                    continue
                metadata = p.committed_metadata or ""
                if (topic.name, p.partition_index) not in image.partitions:
                    result["error_code"] = ErrorCode.unknown_topic_or_partition
                elif len(metadata.encode()) > max_metadata:
                    result["error_code"] = ErrorCode.offset_metadata_too_large
                else:
                    committed = CommittedOffset(offset=p.committed_offset,
                                                leader_epoch=getattr(p, "committed_leader_epoch", -1),
                                                metadata=metadata, commit_timestamp_ms=now_ms)
                    writes.append(write(topic.name, p.partition_index, committed, result))
            results.append({"name": topic.name, "partitions": partitions})
        if writes:
            await asyncio.gather(*writes)
        return results

    def _validate_commit(self, group: ConsumerGroup, body: Any) -> ErrorCode:
        generation = body.generation_id_or_member_epoch
        instance_id = getattr(body, "group_instance_id", None)
        if generation >= 0 or body.member_id or instance_id is not None:
            error = validate_member(group, body.member_id, instance_id, generation)
            if error != ErrorCode.none:
                return error
        elif not group.is_(GroupState.EMPTY):
            # Once a group has members, only members may commit.
            return ErrorCode.unknown_member_id
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    async def _commit_one(self, group: ConsumerGroup, topic: str, partition: int, committed: CommittedOffset,
                          result: dict[str, Any]) -> None:
        key = (topic, partition)
        lock = group.offset_locks.setdefault(key, asyncio.Lock())
        async with lock:
            if group.unloaded:
                result["error_code"] = ErrorCode.not_coordinator
                return
            try:
                await self.ownership.io(self.ownership.store.put_offset, group.group_id, topic, partition, committed,
                               group.coordinator_epoch)
            except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
                result["error_code"] = await self.ownership.lost(group, exc)
                return
            group.offsets[key] = committed

    async def txn_offset_commit(self, request: Request) -> Any:
        """Offsets committed inside a transaction: stored pending, visible once the transaction commits."""
        body = request.body
        authorizer = self.context.authorizer
        group: ConsumerGroup | None = None
        if not allowed(authorizer, request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
            error = ErrorCode.transactional_id_authorization_failed
        elif not allowed(authorizer, request, AclOperation.READ, ResourceType.GROUP, body.group_id):
            error = ErrorCode.group_authorization_failed
        else:
            group, error = self.ownership.owned(body.group_id)
        if group is not None:
            error = self._validate_txn_commit(group, body)

        def write(topic: str, partition: int, committed: CommittedOffset, result: dict[str, Any]) -> Awaitable[None]:
            return self._commit_pending(group, body.producer_id, topic, partition, committed, result)

        topics = await self._commit_offsets(request, error, write)
        return respond(request, {"throttle_time": NO_THROTTLE, "topics": topics})

    @staticmethod
    def _validate_txn_commit(group: ConsumerGroup, body: Any) -> ErrorCode:
        generation = getattr(body, "generation_id", -1)
        member_id = getattr(body, "member_id", "")
        instance_id = getattr(body, "group_instance_id", None)
        if generation >= 0 or member_id or instance_id is not None:
            # KIP-447: a member's commit is checked against the group's generation, as OffsetCommit's is.
            return validate_member(group, member_id, instance_id, generation)
        return ErrorCode.none

    async def _commit_pending(self, group: ConsumerGroup, producer_id: int, topic: str, partition: int,
                              committed: CommittedOffset, result: dict[str, Any]) -> None:
        async with group.offset_locks.setdefault((topic, partition), asyncio.Lock()):
            if group.unloaded:
                result["error_code"] = ErrorCode.not_coordinator
                return
            try:
                await self.ownership.io(self.ownership.store.put_pending_offset, group.group_id, producer_id, topic,
                                        partition, committed, group.coordinator_epoch)
            except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
                result["error_code"] = await self.ownership.lost(group, exc)
                return
            group.pending_offsets.setdefault(producer_id, {})[(topic, partition)] = committed

    async def complete_transaction(self, group_id: str, producer_id: int, commit: bool) -> int | None:
        """The transaction coordinator ends ``producer_id``'s transaction in ``group_id``: None when
        done here, else the broker to send the group's marker to (-1: nobody can take it now)."""
        group, _ = self.ownership.owned(group_id)
        if group is None:
            try:
                error, node = await self.ownership.locate(group_id)
            except GroupStoreUnavailableError as exc:
                log.warning("group %s: cannot end producer %d's transaction now: %s", group_id, producer_id, exc)
                return -1
            if error != ErrorCode.none:
                return -1
            if node != self.ownership.broker_id:
                return node
            group, _ = self.ownership.owned(group_id)
            if group is None:
                return -1
        return None if await self._end_pending(group, producer_id, commit) else -1

    async def complete_marker(self, partition: int, producer_id: int, commit: bool) -> ErrorCode:
        """A WriteTxnMarkers for ``MARKER_TOPIC``: end the producer's transaction in every group held
        here whose marker partition this is (NOT_COORDINATOR when this broker holds none)."""
        held = [g for g in list(self.ownership.groups.values())
                if marker_partition(g.group_id) == partition and self.ownership.owned(g.group_id)[0] is g]
        if not held:
            return ErrorCode.not_coordinator
        done = await asyncio.gather(*(self._end_pending(g, producer_id, commit) for g in held))
        return ErrorCode.none if all(done) else ErrorCode.coordinator_not_available

    async def _end_pending(self, group: ConsumerGroup, producer_id: int, commit: bool) -> bool:
        """Commit or drop the producer's pending offsets of ``group``; False if the store failed."""
        pending = dict(group.pending_offsets.get(producer_id, {}))

        async def end_one(key: tuple[str, int], committed: CommittedOffset) -> None:
            async with group.offset_locks.setdefault(key, asyncio.Lock()):
                io, store, epoch = self.ownership.io, self.ownership.store, group.coordinator_epoch
                if commit:
                    await io(store.put_offset, group.group_id, key[0], key[1], committed, epoch)
                    group.offsets[key] = committed
                await io(store.delete_pending_offset, group.group_id, producer_id, key[0], key[1], epoch)
                group.pending_offsets.get(producer_id, {}).pop(key, None)

        try:
            await asyncio.gather(*(end_one(key, committed) for key, committed in pending.items()))
        except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
            await self.ownership.lost(group, exc)
            return False
        if not group.pending_offsets.get(producer_id, True):
            del group.pending_offsets[producer_id]
        return True

    async def offset_fetch(self, request: Request) -> Any:
        body = request.body
        authorizer = self.context.authorizer
        if not allowed(authorizer, request, AclOperation.DESCRIBE, ResourceType.GROUP, body.group_id):
            error = ErrorCode.group_authorization_failed
            return respond(request, {"throttle_time": NO_THROTTLE, "topics": [], "error_code": error})
        group, error = self.ownership.owned(body.group_id)
        topics = []
        if body.topics is None:
            wanted: dict[str, list[int]] = {}
            if group is not None:
                for topic, partition in sorted(group.offsets):
                    if allowed(authorizer, request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic, log_denial=False):
                        wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in body.topics}
        require_stable = getattr(body, "require_stable", False)
        unstable = ({key for pending in group.pending_offsets.values() for key in pending}
                    if group is not None and require_stable else set())
        for name, partitions in wanted.items():
            results = []
            if body.topics is not None and not allowed(authorizer, request, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                                       name):
                topics.append({"name": name, "partitions": [
                    {"partition_index": partition, "committed_offset": -1, "committed_leader_epoch": -1,
                     "metadata": "", "error_code": ErrorCode.topic_authorization_failed} for partition in partitions]})
                continue
            for partition in partitions:
                committed = group.offsets.get((name, partition)) if group is not None else None
                results.append({
                    "partition_index": partition,
                    "committed_offset": committed.offset if committed else -1,
                    "committed_leader_epoch": committed.leader_epoch if committed else -1,
                    "metadata": committed.metadata if committed else "",
                    "error_code": ErrorCode.unstable_offset_commit if (name, partition) in unstable else error,
                })
            topics.append({"name": name, "partitions": results})
        return respond(request, {"throttle_time": NO_THROTTLE, "topics": topics, "error_code": error})

    async def offset_delete(self, request: Request) -> Any:
        """OffsetDelete (API 47): forget a group's committed offsets of some partitions, as Kafka does.

        DELETE on the group is needed (else GROUP_AUTHORIZATION_FAILED for the whole answer) and READ on
        each topic (else its partitions are TOPIC_AUTHORIZATION_FAILED); a group this broker does not
        coordinate, or that does not exist, is the whole answer's error. While members of the group
        consume a topic its partitions are GROUP_SUBSCRIBED_TO_TOPIC and keep their offsets. Deleting an
        offset the group never committed succeeds.
        """
        body = request.body
        authorizer = self.context.authorizer

        def answer(error: ErrorCode, topics: list[dict[str, Any]]) -> Any:
            return respond(request, {"throttle_time": NO_THROTTLE, "error_code": error, "topics": topics})

        if not allowed(authorizer, request, AclOperation.DELETE, ResourceType.GROUP, body.group_id):
            return answer(ErrorCode.group_authorization_failed, [])
        group, error = self.ownership.owned(body.group_id)
        if group is None:
            return answer(error, [])
        async with group.lock:
            if group.unloaded:
                return answer(ErrorCode.not_coordinator, [])
            if not group.exists:
                return answer(ErrorCode.group_id_not_found, [])
            subscribed = subscribed_topics(group)
            topics, removable = [], []
            for topic in body.topics:
                if not allowed(authorizer, request, AclOperation.READ, ResourceType.TOPIC, topic.name):
                    code = ErrorCode.topic_authorization_failed
                elif topic.name in subscribed:
                    code = ErrorCode.group_subscribed_to_topic
                else:
                    code = ErrorCode.none
                    removable += [(topic.name, p.partition_index) for p in topic.partitions]
                topics.append({"name": topic.name, "partitions": [
                    {"partition_index": p.partition_index, "error_code": code} for p in topic.partitions]})
            try:
                await self.remove_offsets(group, removable)
            except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
                return answer(await self.ownership.lost(group, exc), [])
        if removable:
            log.info("principal %s from %s deleted offsets of group %s: %s", request.principal, request.client_host,
                     body.group_id, removable)
        return answer(ErrorCode.none, topics)

    async def remove_offsets(self, group: ConsumerGroup, keys: list[tuple[str, int]]) -> None:
        async def remove(key: tuple[str, int]) -> None:
            async with group.offset_locks.setdefault(key, asyncio.Lock()):
                await self.ownership.io(self.ownership.store.delete_offset, group.group_id, key[0], key[1], group.coordinator_epoch)
                group.offsets.pop(key, None)

        await asyncio.gather(*(remove(key) for key in keys))

    async def expire_offsets(self) -> None:
        retention_ms = self.config.get_int("offsets.retention.minutes") * 60_000
        for group in list(self.ownership.groups.values()):
            if group.loading or group.unloaded or not group.is_(GroupState.EMPTY):
                continue
            async with group.lock:
                if group.unloaded or not group.is_(GroupState.EMPTY):
                    continue
                now_ms = wall_clock_ms()
                expired = [key for key, committed in group.offsets.items()
                           if offset_expired(group, committed, now_ms, retention_ms)]
                try:
                    if expired:
                        log.info("group %s: %d committed offsets expired", group.group_id, len(expired))
                        await self.remove_offsets(group, expired)
                    if not group.offsets and not group.members and not group.pending_offsets:
                        # Kafka's Dead: an empty group without offsets is forgotten.
                        await self.ownership.io(self.ownership.store.delete_group, group.group_id, self.ownership.broker_id,
                                       group.coordinator_epoch)
                        self.ownership.unload(group)
                except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
                    await self.ownership.lost(group, exc)


def subscribed_topics(group: ConsumerGroup) -> set[str]:
    """The topics the group's current members subscribe to (consumer groups only; others name none)."""
    if group.protocol_type != "consumer" or group.protocol is None:
        return set()
    topics: set[str] = set()
    for member in group.members.values():
        for name, metadata in member.protocols:
            if name == group.protocol:
                try:
                    topics.update(decode_subscription(metadata).topics)
                except ConsumerProtocolError:
                    continue
    return topics

