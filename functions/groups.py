"""Consumer groups over HTTP: join, heartbeat and leave with server-side assignment, and offsets.

The membership rules are in `functions.group_state` (KIP-848 style: member epochs, the server
computes the assignment, two-step handover); the read-change-write cycle in `functions.group_store`,
over the one group store (``broker_core.groups.store.HttpGroupStore``). Every request reads the
group, applies one change and writes it back conditionally, so any front-end container can serve
any request. Partition counts of subscribed topics come from the cluster metadata in
DynamoDB (a topic that does not exist counts zero partitions until it is created).

    POST   /v1/groups/{group}/members                       join      -> member id, epoch, assignment
    POST   /v1/groups/{group}/members/{member}/heartbeat    heartbeat -> epoch, assignment
    DELETE /v1/groups/{group}/members/{member}              leave
    GET    /v1/groups/{group}                               describe
    POST   /v1/groups/{group}/offsets                       commit (fenced by member epoch)
    GET    /v1/groups/{group}/offsets                       committed offsets
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Annotated, TypeVar

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from broker_core.clock import wall_clock_ms
from broker_core.groups.errors import GroupStoreUnavailableError
from broker_core.groups.store import HttpCommittedOffset, HttpGroupStore
from broker_core.metadata.errors import MetadataUnavailableError, UnknownTopicError
from broker_core.security.acls import AclOperation, ResourceType
from functions import group_state, group_store, runtime
from functions.errors import ApiError, hidden, responses
from functions.group_state import (
    FencedMemberEpochError,
    Group,
    GroupStateError,
    Member,
    TopicPartition,
    UnknownMemberError,
)
from functions.models import (
    GROUP_ID_PATTERN,
    MEMBER_ID_PATTERN,
    TOPIC_NAME_PATTERN,
    CommitRequest,
    CommittedOffsets,
    GroupDescription,
    HeartbeatRequest,
    JoinRequest,
    MemberAssignment,
    MemberDescription,
    TopicPartitions,
)
from functions.models import CommittedOffset as CommittedOffsetModel

router = Router()

GroupId = Annotated[str, Path(pattern=GROUP_ID_PATTERN)]
MemberId = Annotated[str, Path(pattern=MEMBER_ID_PATTERN)]

_T = TypeVar("_T")


@functools.cache
def _store() -> HttpGroupStore:
    return HttpGroupStore(runtime.settings().aws)


def _partition_counts(topics: Iterable[str]) -> dict[str, int]:
    container = runtime.current()
    counts = {}
    for topic in sorted(set(topics)):
        count = container.recall(("partitions", topic))
        if count is None:
            try:
                count = container.metadata.get_topic(topic).num_partitions
            except UnknownTopicError:
                count = 0
            except MetadataUnavailableError as error:
                raise hidden(HTTPStatus.SERVICE_UNAVAILABLE, "cluster metadata is unavailable; retry later",
                             error) from error
            container.remember(("partitions", topic), count)
        counts[topic] = count
    return counts


def _grouped(partitions: Iterable[TopicPartition]) -> list[TopicPartitions]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return [TopicPartitions(topic=topic, partitions=ps) for topic, ps in by_topic.items()]


def _assignment(group: Group, member: Member) -> MemberAssignment:
    return MemberAssignment(group_id=group.group_id, member_id=member.member_id, member_epoch=member.member_epoch,
                            heartbeat_interval_ms=member.heartbeat_interval_ms, assignment=_grouped(member.assigned))


def _update(group_id: str, change: Callable[[Group], _T], *, create: bool = True) -> _T:
    try:
        return group_store.update(_store(), group_id, change, create=create)
    except LookupError as error:
        raise ApiError(HTTPStatus.NOT_FOUND, f"group {group_id!r} does not exist") from error
    except UnknownMemberError as error:
        raise ApiError(HTTPStatus.NOT_FOUND, str(error)) from error
    except FencedMemberEpochError as error:
        raise ApiError(HTTPStatus.CONFLICT, str(error), member_epoch=error.member_epoch) from error
    except GroupStoreUnavailableError as error:
        raise hidden(HTTPStatus.SERVICE_UNAVAILABLE, "the group store is unavailable; retry later", error) from error


@router.post(
    "/v1/groups/<group_id>/members",
    summary="Join a group; the answer holds the member id, its epoch and its first assignment",
    tags=["groups"],
    responses=responses(MemberAssignment, 403, 400, 415, 422, 503),
)
def join_group(group_id: GroupId, body: Annotated[JoinRequest, Body()]) -> MemberAssignment:
    runtime.require(AclOperation.READ, ResourceType.GROUP, group_id)
    member_id = uuid.uuid4().hex

    def change(group: Group) -> MemberAssignment:
        counts = _partition_counts(group.subscribed_topics | set(body.topics))
        member = group_state.join(group, member_id, body.topics, body.session_timeout_ms, wall_clock_ms(), counts)
        return _assignment(group, member)

    return _update(group_id, change)


@router.post(
    "/v1/groups/<group_id>/members/<member_id>/heartbeat",
    summary="Heartbeat: stay in the group, acknowledge revocations, get the current assignment",
    tags=["groups"],
    responses=responses(MemberAssignment, 403, 400, 404, 409, 415, 422, 503),
)
def heartbeat(group_id: GroupId, member_id: MemberId, body: Annotated[HeartbeatRequest, Body()]) -> MemberAssignment:
    runtime.require(AclOperation.READ, ResourceType.GROUP, group_id)
    owned = None
    if body.owned is not None:
        owned = frozenset((tp.topic, p) for tp in body.owned for p in tp.partitions)

    def change(group: Group) -> MemberAssignment:
        counts = _partition_counts(group.subscribed_topics | set(body.topics or ()))
        member = group_state.heartbeat(group, member_id, body.member_epoch, owned, body.topics, wall_clock_ms(), counts)
        return _assignment(group, member)

    return _update(group_id, change, create=False)


@router.delete(
    "/v1/groups/<group_id>/members/<member_id>",
    summary="Leave a group; the member's partitions go to the others at once",
    tags=["groups"],
    responses=responses(None, 403, 404, 422, 503, status=HTTPStatus.NO_CONTENT),
)
def leave_group(group_id: GroupId, member_id: MemberId) -> Response[None]:
    runtime.require(AclOperation.READ, ResourceType.GROUP, group_id)
    _update(group_id, lambda group: group_state.leave(group, member_id, wall_clock_ms()), create=False)
    return Response(status_code=HTTPStatus.NO_CONTENT)


@router.get(
    "/v1/groups/<group_id>",
    summary="Describe a group: epochs, members and their assignments",
    tags=["groups"],
    responses=responses(GroupDescription, 403, 404, 422, 503),
)
def describe_group(group_id: GroupId) -> GroupDescription:
    runtime.require(AclOperation.DESCRIBE, ResourceType.GROUP, group_id)
    try:
        group = group_store.load(_store(), group_id)
    except GroupStoreUnavailableError as error:
        raise hidden(HTTPStatus.SERVICE_UNAVAILABLE, "the group store is unavailable; retry later", error) from error
    if group is None:
        raise ApiError(HTTPStatus.NOT_FOUND, f"group {group_id!r} does not exist")
    group_state.expire(group, wall_clock_ms())
    return GroupDescription(
        group_id=group_id, group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
        members=[
            MemberDescription(member_id=m.member_id, member_epoch=m.member_epoch, topics=list(m.topics),
                              assignment=_grouped(m.assigned), revoking=_grouped(m.revoking))
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ],
    )


@router.post(
    "/v1/groups/<group_id>/offsets",
    summary="Commit offsets (the next offset to read, as in Kafka), fenced by the member's epoch",
    tags=["groups"],
    responses=responses(CommittedOffsets, 403, 400, 404, 409, 415, 422, 503),
)
def commit_offsets(group_id: GroupId, body: Annotated[CommitRequest, Body()]) -> CommittedOffsets:
    runtime.require(AclOperation.READ, ResourceType.GROUP, group_id)
    for topic in sorted({o.topic for o in body.offsets}):
        runtime.require(AclOperation.READ, ResourceType.TOPIC, topic)
    store = _store()
    try:
        group = group_store.load(store, group_id) or Group(group_id)
        group_state.expire(group, wall_clock_ms())
        group_state.check_commit(group, body.member_id, body.member_epoch)
        offsets = [HttpCommittedOffset(o.topic, o.partition_id, o.offset, o.metadata) for o in body.offsets]
        group_store.commit(store, group_id, body.member_id, body.member_epoch, offsets, wall_clock_ms())
    except UnknownMemberError as error:
        raise ApiError(HTTPStatus.NOT_FOUND, str(error)) from error
    except GroupStateError as error:  # a stale epoch, members present, or fenced while writing
        raise ApiError(HTTPStatus.CONFLICT, str(error)) from error
    except GroupStoreUnavailableError as error:
        raise hidden(HTTPStatus.SERVICE_UNAVAILABLE, "the group store is unavailable; retry later", error) from error
    return CommittedOffsets(group_id=group_id, offsets=[
        CommittedOffsetModel(topic=o.topic, partition_id=o.partition, offset=o.offset, metadata=o.metadata)
        for o in offsets])


@router.get(
    "/v1/groups/<group_id>/offsets",
    summary="The group's committed offsets (of one topic, or all)",
    tags=["groups"],
    responses=responses(CommittedOffsets, 403, 422, 503),
)
def committed_offsets(
    group_id: GroupId,
    topic: Annotated[str | None, Query(pattern=TOPIC_NAME_PATTERN)] = None,
) -> CommittedOffsets:
    runtime.require(AclOperation.DESCRIBE, ResourceType.GROUP, group_id)
    try:
        found = _store().committed(group_id, topic)
    except GroupStoreUnavailableError as error:
        raise hidden(HTTPStatus.SERVICE_UNAVAILABLE, "the group store is unavailable; retry later", error) from error
    return CommittedOffsets(group_id=group_id, offsets=[
        CommittedOffsetModel(topic=o.topic, partition_id=o.partition, offset=o.offset, metadata=o.metadata)
        for o in found if runtime.allows(AclOperation.DESCRIBE, ResourceType.TOPIC, o.topic)])
