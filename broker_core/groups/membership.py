"""The classic group membership protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers.

The state machine follows Kafka's GroupCoordinator: MEMBER_ID_REQUIRED for JoinGroup v4+,
generation fencing, session and rebalance timeouts, an initial rebalance delay, and static
membership (KIP-345). Group metadata (generation, protocol, leader, members, assignments) is
written when a rebalance completes its join phase, when the leader's assignment arrives and when
static members are replaced, conditional on the lease and the generation last written
(`GroupOwnership.persist`).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.clock import wall_clock_ms
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, respond

from .errors import CoordinatorFencedError, GroupStoreUnavailableError
from .group import ConsumerGroup, GroupState, Member, join_error, sync_error
from .ownership import GroupOwnership

if TYPE_CHECKING:
    from broker_core.server.config import BrokerConfig

log = logging.getLogger(__name__)

MEMBER_ID_REQUIRED_MIN_VERSION = 4
JOIN_GROUP_NULLABLE_PROTOCOL_VERSION = 7


def millis(value: datetime.timedelta | int | None, default: int) -> int:
    """A request's duration field in milliseconds (kio gives timedelta or int; None when absent)."""
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def validate_member(group: ConsumerGroup, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
    """The error for a request naming this member and generation (NONE when both are current)."""
    if group.static_member_fenced(instance_id, member_id):
        return ErrorCode.fenced_instance_id
    if member_id not in group.members:
        return ErrorCode.unknown_member_id
    if generation != group.generation:
        return ErrorCode.illegal_generation
    return ErrorCode.none


class GroupMembership:
    """Runs the join/sync/heartbeat/leave protocol of the groups `GroupOwnership` holds.

    Every change to a group that must be persisted happens under ``group.lock``; waiting JoinGroup
    and SyncGroup requests park on their member's futures. Called from the event loop only.
    """

    def __init__(self, ownership: GroupOwnership, config: BrokerConfig) -> None:
        self.ownership = ownership
        self.config = config

    def _now(self) -> float:
        return self.ownership.now()

    async def join_group(self, request: Request) -> Any:
        body = request.body
        response = await self._join(request, body)
        if isinstance(response, asyncio.Future):
            response = await response
        if response["protocol_name"] is None and request.api_version < JOIN_GROUP_NULLABLE_PROTOCOL_VERSION:
            response = {**response, "protocol_name": ""}
        return respond(request, {"throttle_time": NO_THROTTLE, **response})

    async def _join(self, request: Request, body: Any) -> dict[str, Any] | asyncio.Future:
        member_id = body.member_id
        group, error = self.ownership.owned(body.group_id)
        if group is None:
            return join_error(error, member_id)
        session_ms = millis(body.session_timeout, 0)
        rebalance_ms = millis(getattr(body, "rebalance_timeout", None), -1)
        if rebalance_ms < 0:
            rebalance_ms = session_ms
        if not (self.config.get_int("group.min.session.timeout.ms") <= session_ms
                <= self.config.get_int("group.max.session.timeout.ms")):
            return join_error(ErrorCode.invalid_session_timeout, member_id)
        instance_id = getattr(body, "group_instance_id", None)
        protocols = [(p.name, bytes(p.metadata)) for p in body.protocols]
        names = [name for name, _ in protocols]
        async with group.lock:
            if group.unloaded:
                return join_error(ErrorCode.not_coordinator, member_id)
            if not group.supports(body.protocol_type, names):
                return join_error(ErrorCode.inconsistent_group_protocol, member_id)
            now = self._now()
            if not member_id:
                if instance_id is not None and instance_id in group.static_members:
                    return await self._rejoin_static(group, group.members[group.static_members[instance_id]],
                                                     request, protocols, session_ms, rebalance_ms)
                new_id = f"{instance_id or request.client_id or 'member'}-{uuid.uuid4()}"
                if instance_id is None and request.api_version >= MEMBER_ID_REQUIRED_MIN_VERSION:
                    # KIP-394: hand out the id first, so a client that dies before it can learn the
                    # id does not leave a member behind that the whole group waits for.
                    group.pending_members[new_id] = now + session_ms / 1000
                    return join_error(ErrorCode.member_id_required, new_id)
                return await self._add_member(group, request, new_id, instance_id, body.protocol_type, protocols,
                                        session_ms, rebalance_ms)
            if group.static_member_fenced(instance_id, member_id):
                return join_error(ErrorCode.fenced_instance_id, member_id)
            if member_id in group.pending_members:
                del group.pending_members[member_id]
                return await self._add_member(group, request, member_id, instance_id, body.protocol_type, protocols,
                                        session_ms, rebalance_ms)
            member = group.members.get(member_id)
            if member is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
                return join_error(ErrorCode.unknown_member_id, member_id)
            changed = member.protocols != protocols
            member.heartbeat_deadline = now + session_ms / 1000
            if group.is_(GroupState.COMPLETING_REBALANCE) and not changed:
                return group.join_response(member)
            if group.is_(GroupState.STABLE) and not changed and member.member_id != group.leader_id:
                return group.join_response(member)
            member.protocols = protocols
            member.session_timeout_ms, member.rebalance_timeout_ms = session_ms, rebalance_ms
            waiter = self._await_join(member)
            if not group.is_(GroupState.PREPARING_REBALANCE):
                self._prepare_rebalance(group, f"member {member_id} rejoined")
            await self._maybe_complete_join(group)
            return waiter

    def _await_join(self, member: Member) -> asyncio.Future:
        if member.awaiting_join:
            # The same member joined again (a retry on a new connection): the older request loses.
            member.answer_join(join_error(ErrorCode.rebalance_in_progress, member.member_id))
        member.join_waiter = asyncio.get_running_loop().create_future()
        return member.join_waiter

    async def _add_member(self, group: ConsumerGroup, request: Request, member_id: str, instance_id: str | None,
                          protocol_type: str, protocols: list[tuple[str, bytes]], session_ms: int,
                          rebalance_ms: int) -> dict[str, Any] | asyncio.Future:
        if len(group.members) >= self.config.get_int("group.max.size"):
            return join_error(ErrorCode.group_max_size_reached, member_id)
        member = Member(member_id=member_id, group_instance_id=instance_id, client_id=request.client_id or "",
                        client_host="", session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
                        protocol_type=protocol_type, protocols=protocols,
                        heartbeat_deadline=self._now() + session_ms / 1000)
        was_empty = group.is_(GroupState.EMPTY)
        group.add(member)
        waiter = self._await_join(member)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._extend_initial_delay(group)
        else:
            self._prepare_rebalance(group, f"member {member_id} joined", initial=was_empty)
        await self._maybe_complete_join(group)
        return waiter

    async def _rejoin_static(self, group: ConsumerGroup, old: Member, request: Request,
                             protocols: list[tuple[str, bytes]], session_ms: int,
                             rebalance_ms: int) -> dict[str, Any] | asyncio.Future:
        """A static member came back without its member id (a restart): it gets a new id, KIP-345."""
        old_leader = group.leader_id
        new_id = f"{old.group_instance_id}-{uuid.uuid4()}"
        member = group.replace_static_member(old, new_id)
        member.client_id = request.client_id or member.client_id
        member.session_timeout_ms, member.rebalance_timeout_ms = session_ms, rebalance_ms
        member.heartbeat_deadline = self._now() + session_ms / 1000
        old_protocols = member.protocols
        member.protocols = protocols
        if group.is_(GroupState.STABLE) and group.select_protocol() == group.protocol:
            try:
                await self.ownership.persist(group)
            except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
                # Undo, so the member that still holds the old id stays valid.
                member.protocols = old_protocols
                restored = group.replace_static_member(member, old.member_id)
                restored.join_waiter = restored.sync_waiter = None
                return join_error(await self.ownership.lost(group, exc), "")
            # The old leader id goes back, so a restarted leader does not recompute an assignment
            # that a Stable group would never hand out; it syncs and gets its old one.
            return group.join_response(member, leader_id=old_leader) | {"members": []}
        waiter = self._await_join(member)
        if not group.is_(GroupState.PREPARING_REBALANCE):
            self._prepare_rebalance(group, f"static member {old.group_instance_id} rejoined")
        await self._maybe_complete_join(group)
        return waiter

    def _prepare_rebalance(self, group: ConsumerGroup, reason: str, initial: bool = False) -> None:
        delay_s = self.config.get_int("group.initial.rebalance.delay.ms") / 1000 if initial else 0.0
        group.prepare_rebalance(reason, self._now(), initial_delay_s=delay_s)

    def _extend_initial_delay(self, group: ConsumerGroup) -> None:
        now = self._now()
        if now < group.initial_join_deadline:
            delay_s = self.config.get_int("group.initial.rebalance.delay.ms") / 1000
            group.initial_join_deadline = min(now + delay_s, group.rebalance_deadline)

    async def _maybe_complete_join(self, group: ConsumerGroup) -> None:
        """Finish the join phase if every member is in (and any initial delay is over) or time is up.

        The caller holds ``group.lock``.
        """
        if group.unloaded or not group.is_(GroupState.PREPARING_REBALANCE):
            return
        now = self._now()
        if (group.all_members_joined() and now >= group.initial_join_deadline) or now >= group.rebalance_deadline:
            await self._complete_join(group)

    async def _complete_join(self, group: ConsumerGroup) -> None:
        """End the join phase: drop members that did not rejoin, start the next generation, answer joins."""
        for member in list(group.members.values()):
            if not member.awaiting_join:
                log.info("group %s: member %s did not rejoin in time", group.group_id, member.member_id)
                group.remove(member, ErrorCode.unknown_member_id)
        group.pending_members.clear()
        group.generation += 1
        now = self._now()
        if not group.members:
            group.protocol = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, wall_clock_ms())
        else:
            group.protocol = group.select_protocol()
            if group.leader_id not in group.members:
                group.leader_id = next(iter(group.members))
            group.transition(GroupState.COMPLETING_REBALANCE, wall_clock_ms())
            group.sync_deadline = now + group.max_rebalance_timeout_ms() / 1000
        try:
            await self.ownership.persist(group)
        except CoordinatorFencedError as exc:
            await self.ownership.lost(group, exc)
            return
        except GroupStoreUnavailableError as exc:
            # The generation still moves on in memory; the next write names the last one written.
            log.warning("group %s: generation %d not persisted: %s", group.group_id, group.generation, exc)
        log.info("group %s: generation %d with %d members, protocol %s", group.group_id, group.generation,
                 len(group.members), group.protocol)
        for member in group.members.values():
            member.heartbeat_deadline = now + member.session_timeout_ms / 1000
            member.answer_join(group.join_response(member))

    async def sync_group(self, request: Request) -> Any:
        response = await self._sync(request.body)
        if isinstance(response, asyncio.Future):
            response = await response
        return respond(request, {"throttle_time": NO_THROTTLE, **response})

    async def _sync(self, body: Any) -> dict[str, Any] | asyncio.Future:
        group, error = self.ownership.owned(body.group_id)
        if group is None:
            return sync_error(error)
        async with group.lock:
            if group.unloaded:
                return sync_error(ErrorCode.not_coordinator)
            error = validate_member(group, body.member_id, getattr(body, "group_instance_id", None),
                                          body.generation_id)
            if error != ErrorCode.none:
                return sync_error(error)
            protocol_type = getattr(body, "protocol_type", None)
            protocol_name = getattr(body, "protocol_name", None)
            if ((protocol_type is not None and protocol_type != group.protocol_type)
                    or (protocol_name is not None and protocol_name != group.protocol)):
                return sync_error(ErrorCode.inconsistent_group_protocol)
            member = group.members[body.member_id]
            if group.is_(GroupState.PREPARING_REBALANCE):
                return sync_error(ErrorCode.rebalance_in_progress)
            if group.is_(GroupState.STABLE):
                member.heartbeat_deadline = self._now() + member.session_timeout_ms / 1000
                return group.sync_response(member)
            member.sync_waiter = asyncio.get_running_loop().create_future()
            waiter = member.sync_waiter
            if member.member_id == group.leader_id:
                await self._install_assignment(group, {a.member_id: bytes(a.assignment) for a in body.assignments})
            return waiter

    async def _install_assignment(self, group: ConsumerGroup, assignments: dict[str, bytes]) -> None:
        previous = {m.member_id: m.assignment for m in group.members.values()}
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        group.transition(GroupState.STABLE, wall_clock_ms())
        try:
            await self.ownership.persist(group)
        except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
            for member in group.members.values():
                member.assignment = previous.get(member.member_id, b"")
            group.state = GroupState.COMPLETING_REBALANCE
            error = await self.ownership.lost(group, exc)
            if not group.unloaded:
                for member in group.members.values():
                    member.answer_sync(sync_error(error))
                self._prepare_rebalance(group, "the assignment could not be stored")
            return
        now = self._now()
        for member in group.members.values():
            member.heartbeat_deadline = now + member.session_timeout_ms / 1000
            member.answer_sync(group.sync_response(member))

    async def heartbeat(self, request: Request) -> Any:
        body = request.body
        group, error = self.ownership.owned(body.group_id)
        if group is not None:
            error = self._heartbeat(group, body)
        return respond(request, {"throttle_time": NO_THROTTLE, "error_code": error})

    def _heartbeat(self, group: ConsumerGroup, body: Any) -> ErrorCode:
        instance_id = getattr(body, "group_instance_id", None)
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        error = validate_member(group, body.member_id, instance_id, body.generation_id)
        if error != ErrorCode.none:
            return error
        member = group.members[body.member_id]
        member.heartbeat_deadline = self._now() + member.session_timeout_ms / 1000
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    async def leave_group(self, request: Request) -> Any:
        body = request.body
        if hasattr(body, "members"):
            identities = [(m.member_id, m.group_instance_id) for m in body.members]
        else:
            identities = [(body.member_id, None)]
        group, error = self.ownership.owned(body.group_id)
        results = []
        if group is not None:
            async with group.lock:
                if group.unloaded:
                    error = ErrorCode.not_coordinator
                else:
                    results = [self._leave(group, member_id, instance_id) for member_id, instance_id in identities]
                    if any(code == ErrorCode.none for _, _, code in results):
                        await self._after_departure(group, "members left")
        members = [{"member_id": m, "group_instance_id": i, "error_code": code} for m, i, code in results]
        if error == ErrorCode.none and not hasattr(body, "members") and results:
            error = results[0][2]
        return respond(request, {"throttle_time": NO_THROTTLE, "error_code": error, "members": members})

    def _leave(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> tuple[str, str | None, ErrorCode]:
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return member_id, instance_id, ErrorCode.unknown_member_id
            if member_id and current != member_id:
                return member_id, instance_id, ErrorCode.fenced_instance_id
            member_id = current
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return member_id, instance_id, ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return member_id, instance_id, ErrorCode.unknown_member_id
        log.info("group %s: member %s left", group.group_id, member_id)
        group.remove(member, ErrorCode.unknown_member_id)
        return member_id, instance_id, ErrorCode.none

    async def _after_departure(self, group: ConsumerGroup, reason: str) -> None:
        """After members were removed: rebalance a settled group, or let a running join phase finish."""
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
        await self._maybe_complete_join(group)

    async def tick(self) -> None:
        now = self._now()
        for group in list(self.ownership.groups.values()):
            if group.loading or group.unloaded:
                continue
            if now > group.lease_valid_until:
                log.warning("group %s: lease epoch %d not renewed in time; giving the group up",
                            group.group_id, group.coordinator_epoch)
                self.ownership.unload(group)
                continue
            if self._timer_due(group, now):
                async with group.lock:
                    if not group.unloaded:
                        await self._run_timers(group, self._now())

    def _timer_due(self, group: ConsumerGroup, now: float) -> bool:
        if any(deadline <= now for deadline in group.pending_members.values()):
            return True
        if group.is_(GroupState.PREPARING_REBALANCE):
            if now >= group.rebalance_deadline or (group.all_members_joined() and now >= group.initial_join_deadline):
                return True
        if group.is_(GroupState.COMPLETING_REBALANCE) and now >= group.sync_deadline:
            return True
        return any(self._session_expired(group, m, now) for m in group.members.values())

    def _session_expired(self, group: ConsumerGroup, member: Member, now: float) -> bool:
        # A member parked in JoinGroup cannot heartbeat; the rebalance timeout bounds its wait instead.
        return member.heartbeat_deadline <= now and not member.awaiting_join

    async def _run_timers(self, group: ConsumerGroup, now: float) -> None:
        for member_id, deadline in list(group.pending_members.items()):
            if deadline <= now:
                del group.pending_members[member_id]
        departed = False
        for member in list(group.members.values()):
            if self._session_expired(group, member, now):
                log.info("group %s: member %s session timed out", group.group_id, member.member_id)
                group.remove(member, ErrorCode.unknown_member_id)
                departed = True
        if group.is_(GroupState.COMPLETING_REBALANCE) and now >= group.sync_deadline:
            for member in list(group.members.values()):
                if not member.awaiting_sync:
                    log.info("group %s: member %s did not sync in time", group.group_id, member.member_id)
                    group.remove(member, ErrorCode.unknown_member_id)
            departed = True
        if departed:
            await self._after_departure(group, "members timed out")
        else:
            await self._maybe_complete_join(group)
