"""The group coordinator: the ten classic consumer-group APIs, served by the broker holding a group's lease.

Which broker coordinates a group is decided in DynamoDB, not by hashing onto a partition: the
group's item carries a lease in the style of dynamodb-lock-client. FindCoordinator, on any
broker, answers with the live holder; if nobody holds the lease, or it was released, the broker
asked takes it; a holder that stopped heartbeating loses it once its (holder, epoch, heartbeat)
has not changed for a whole lease duration, timed on the observer's own monotonic clock. Each
acquisition bumps the coordinator epoch, the fencing token every group write is conditional on.
The holder heartbeats every lease third and treats the lease as its own only until the last
successful heartbeat's send time plus the lease duration, so it stops serving the group before
any contender can take it. A broker that lost (or never had) a group answers NOT_COORDINATOR;
one still reading the group after taking its lease answers COORDINATOR_LOAD_IN_PROGRESS.

Group metadata (generation, protocol, leader, members, assignments) is written when a rebalance
completes its join phase, when the leader's assignment arrives and when static members are
replaced, conditional on the lease and the generation last written. Offsets are one item per
(group, topic, partition), written before the commit is acknowledged, one at a time per
partition in arrival order, and served from memory afterwards.

The state machine follows Kafka's GroupCoordinator: MEMBER_ID_REQUIRED for JoinGroup v4+,
generation fencing, session and rebalance timeouts, static membership (KIP-345), and offset
expiry (``offsets.retention.minutes``) for empty groups and standalone committers.

pynamodb is synchronous: every DynamoDB call runs on the coordinator's own worker threads, so
group I/O never starves the broker's own heartbeats of threads, and never on the event loop.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import build_entity, response_class

from .errors import CoordinatorFencedError, GroupStoreUnavailableError
from .group import ConsumerGroup, GroupState, Member, join_error, offset_expired, sync_error
from .lease import LeaseObserver
from .store import NO_HOLDER, CommittedOffset, GroupLease, GroupStore, StoredGroup, wall_clock_ms

if TYPE_CHECKING:
    from broker_core.server.context import BrokerContext

log = logging.getLogger(__name__)

ZERO = datetime.timedelta(0)
GROUP_KEY_TYPE = 0
TICK_S = 0.1
# The holder trusts its lease for this share of the duration after a heartbeat's send time; the
# rest absorbs clock-rate differences between holder and contenders.
LEASE_TRUST = 0.9
MEMBER_ID_REQUIRED_MIN_VERSION = 4
JOIN_GROUP_NULLABLE_PROTOCOL_VERSION = 7
_IO_THREADS = 16

_R = TypeVar("_R")


def _respond(request: Request, data: dict[str, Any]) -> Any:
    return build_entity(response_class(request.api_key, request.api_version), data)


def _millis(value: datetime.timedelta | int | None, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


class GroupCoordinator:
    """A BrokerService: registers the group APIs and runs lease heartbeats, timers and offset expiry."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context
        self.config = context.config
        self.broker_id = context.config.broker_id
        self.store = GroupStore(context.config.aws)
        self.lease_duration_ms = self.config.get_int("broker.session.timeout.ms")
        self.groups: dict[str, ConsumerGroup] = {}
        self._observer = LeaseObserver()
        self._acquiring: dict[str, tuple[asyncio.Lock, int]] = {}
        self._tasks: list[asyncio.Task] = []
        self._executor: ThreadPoolExecutor | None = None
        self._stopped = False

    # service ------------------------------------------------------------------------------------

    def api_handlers(self) -> dict[ApiKey, Callable[[Request], Awaitable[Any]]]:
        """The group APIs this service serves, for the broker's request handlers."""
        return {
            ApiKey.FIND_COORDINATOR: self.find_coordinator, ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group, ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group, ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch, ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.LIST_GROUPS: self.list_groups, ApiKey.DELETE_GROUPS: self.delete_groups,
        }

    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=_IO_THREADS, thread_name_prefix="group-dynamodb")
        await self._io(self.store.ensure_tables)
        self._tasks = [
            asyncio.create_task(self._every(TICK_S, self._tick), name="group-timers"),
            asyncio.create_task(self._every(self.lease_duration_ms / 3000, self._heartbeat_leases),
                                name="group-lease-heartbeat"),
            asyncio.create_task(self._every(self.config.get_int("offsets.retention.check.interval.ms") / 1000,
                                            self._expire_offsets), name="group-offset-expiry"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        held = list(self.groups.values())
        for group in held:
            self._unload(group)
        if self._executor is not None:
            await asyncio.gather(
                *(self._io(self.store.release_lease, g.group_id, self.broker_id, g.coordinator_epoch) for g in held),
                return_exceptions=True,
            )
            self._stopped = True
            self._executor.shutdown(wait=False)

    async def _io(self, fn: Callable[..., _R], *args: Any) -> _R:
        """Run a GroupStore call on the coordinator's threads; after stop(), fail like an unreachable store."""
        if self._executor is None or self._stopped:
            raise GroupStoreUnavailableError("the group coordinator is not running")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))

    async def _every(self, interval_s: float, duty: Callable[[], Any]) -> None:
        while True:
            try:
                await duty()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed", duty.__name__)
            await asyncio.sleep(interval_s)

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    # leases -------------------------------------------------------------------------------------

    def _owned(self, group_id: str) -> tuple[ConsumerGroup | None, ErrorCode]:
        """The group if this broker coordinates it now, else the error to answer with."""
        if not group_id:
            return None, ErrorCode.invalid_group_id
        group = self.groups.get(group_id)
        if group is None:
            return None, ErrorCode.not_coordinator
        if group.loading:
            return None, ErrorCode.coordinator_load_in_progress
        if self._now() > group.lease_valid_until:
            log.warning("group %s: lease epoch %d not renewed in time; giving the group up",
                        group_id, group.coordinator_epoch)
            self._unload(group)
            return None, ErrorCode.not_coordinator
        return group, ErrorCode.none

    def _unload(self, group: ConsumerGroup) -> None:
        """Stop coordinating ``group``: waiting requests are told to look for the coordinator again."""
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        group.unloaded = True
        group.answer_all(ErrorCode.not_coordinator)

    async def _locate(self, group_id: str) -> tuple[ErrorCode, int]:
        """(error, coordinator broker id) for FindCoordinator, taking the lease when it is free or lapsed."""
        held = self.groups.get(group_id)
        if held is not None and self._now() <= held.lease_valid_until:
            return ErrorCode.none, self.broker_id
        # One acquisition at a time per group on this broker, or two concurrent lookups could each
        # see the other's fresh lease as a stale one of this broker and take it over.
        lock, users = self._acquiring.get(group_id, (asyncio.Lock(), 0))
        self._acquiring[group_id] = (lock, users + 1)
        try:
            async with lock:
                return await self._locate_locked(group_id)
        finally:
            lock, users = self._acquiring[group_id]
            if users == 1:
                del self._acquiring[group_id]
            else:
                self._acquiring[group_id] = (lock, users - 1)

    async def _locate_locked(self, group_id: str) -> tuple[ErrorCode, int]:
        held = self.groups.get(group_id)
        if held is not None and self._now() <= held.lease_valid_until:
            return ErrorCode.none, self.broker_id
        if held is not None:
            self._unload(held)
        for _ in range(3):
            sent_at = self._now()
            stored = await self._io(self.store.read_group, group_id)
            if stored is None:
                lease = await self._io(self.store.create_lease, group_id, self.broker_id, self.lease_duration_ms)
            elif stored.lease.holder in (NO_HOLDER, self.broker_id) or self._observer.lapsed(stored.lease, sent_at):
                # Free, released, lapsed, or left by an earlier run of this broker (which is dead:
                # the broker registration fences it): take it with a write conditional on what we saw.
                lease = await self._io(self.store.take_lease, stored.lease, self.broker_id, self.lease_duration_ms)
            else:
                holder = stored.lease.holder
                live = {b.broker_id for b in self.context.image.live_brokers()}
                return (ErrorCode.none, holder) if holder in live else (ErrorCode.coordinator_not_available, -1)
            if lease is not None:
                self._observer.forget(group_id)
                log.info("broker %d coordinates group %s at epoch %d", self.broker_id, group_id,
                         lease.coordinator_epoch)
                await self._load(lease, sent_at)
                return ErrorCode.none, self.broker_id
        return ErrorCode.coordinator_not_available, -1

    async def _load(self, lease: GroupLease, acquired_at: float) -> None:
        group = ConsumerGroup(group_id=lease.group_id, coordinator_epoch=lease.coordinator_epoch,
                              lease_valid_until=acquired_at + LEASE_TRUST * self.lease_duration_ms / 1000)
        self.groups[lease.group_id] = group
        try:
            stored: StoredGroup | None = await self._io(self.store.read_group, lease.group_id)
            offsets = await self._io(self.store.load_offsets, lease.group_id)
        except GroupStoreUnavailableError:
            self._unload(group)
            raise
        if stored is None or stored.lease.coordinator_epoch != lease.coordinator_epoch:
            self._unload(group)
            return
        group.restore(stored.record, self._now())
        group.offsets = offsets
        group.loading = False
        if group.members and stored.record.state != GroupState.STABLE.value:
            # The previous coordinator stopped between a rebalance's join and sync phases.
            async with group.lock:
                self._prepare_rebalance(group, "coordinator moved during a rebalance")

    async def _heartbeat_leases(self) -> None:
        groups = list(self.groups.values())
        if groups:
            await asyncio.gather(*(self._heartbeat_lease(g) for g in groups))

    async def _heartbeat_lease(self, group: ConsumerGroup) -> None:
        sent_at = self._now()
        try:
            await self._io(self.store.heartbeat_lease, group.group_id, self.broker_id, group.coordinator_epoch)
        except CoordinatorFencedError:
            log.warning("group %s: lease epoch %d was taken over", group.group_id, group.coordinator_epoch)
            self._unload(group)
            return
        except GroupStoreUnavailableError as exc:
            log.warning("group %s: lease heartbeat failed: %s", group.group_id, exc)
            return
        group.lease_valid_until = max(group.lease_valid_until,
                                      sent_at + LEASE_TRUST * self.lease_duration_ms / 1000)

    async def _lost(self, group: ConsumerGroup, exc: Exception) -> ErrorCode:
        """The error to answer after a failed group write; a fenced coordinator gives the group up."""
        if isinstance(exc, CoordinatorFencedError):
            log.warning("%s", exc)
            self._unload(group)
            return ErrorCode.not_coordinator
        log.warning("group %s: %s", group.group_id, exc)
        return ErrorCode.coordinator_not_available

    async def _persist(self, group: ConsumerGroup) -> None:
        """Write the group's metadata, conditional on the lease and the generation last written."""
        record = group.to_record()
        await self._io(self.store.write_group, group.group_id, self.broker_id, group.coordinator_epoch,
                       group.persisted_generation, record)
        group.persisted_generation = record.generation

    # FindCoordinator ----------------------------------------------------------------------------

    async def find_coordinator(self, request: Request) -> Any:
        body = request.body
        key_type = getattr(body, "key_type", GROUP_KEY_TYPE)
        keys = list(body.coordinator_keys) if hasattr(body, "coordinator_keys") else [body.key]
        answers = []
        for key in keys:
            answer = {"key": key, "error_code": ErrorCode.none, "error_message": None, "node_id": -1,
                      "host": "", "port": -1}
            answers.append(answer)
            if key_type != GROUP_KEY_TYPE:
                answer["error_code"] = ErrorCode.coordinator_not_available
                answer["error_message"] = "Floe coordinates consumer groups only (no transactions)"
                continue
            if not key:
                answer["error_code"] = ErrorCode.invalid_group_id
                continue
            try:
                error, node = await self._locate(key)
            except GroupStoreUnavailableError as exc:
                log.warning("FindCoordinator %s: %s", key, exc)
                error, node = ErrorCode.coordinator_not_available, -1
            answer["error_code"] = error
            if error == ErrorCode.none:
                if node == self.broker_id:
                    answer["host"], answer["port"] = self.config.advertised, self.context.port
                else:
                    registration = self.context.image.brokers[node]
                    answer["host"], answer["port"] = registration.host, registration.port
                answer["node_id"] = node
        first = answers[0]
        return _respond(request, {"throttle_time": ZERO, "coordinators": answers, **first})

    # JoinGroup ----------------------------------------------------------------------------------

    async def join_group(self, request: Request) -> Any:
        body = request.body
        response = await self._join(request, body)
        if isinstance(response, asyncio.Future):
            response = await response
        if response["protocol_name"] is None and request.api_version < JOIN_GROUP_NULLABLE_PROTOCOL_VERSION:
            response = {**response, "protocol_name": ""}
        return _respond(request, {"throttle_time": ZERO, **response})

    async def _join(self, request: Request, body: Any) -> dict[str, Any] | asyncio.Future:
        member_id = body.member_id
        group, error = self._owned(body.group_id)
        if group is None:
            return join_error(error, member_id)
        session_ms = _millis(body.session_timeout, 0)
        rebalance_ms = _millis(getattr(body, "rebalance_timeout", None), -1)
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
                await self._persist(group)
            except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
                # Undo, so the member that still holds the old id stays valid.
                member.protocols = old_protocols
                restored = group.replace_static_member(member, old.member_id)
                restored.join_waiter = restored.sync_waiter = None
                return join_error(await self._lost(group, exc), "")
            # The old leader id goes back, so a restarted leader does not recompute an assignment
            # that a Stable group would never hand out; it syncs and gets its old one.
            return group.join_response(member, leader_id=old_leader) | {"members": []}
        waiter = self._await_join(member)
        if not group.is_(GroupState.PREPARING_REBALANCE):
            self._prepare_rebalance(group, f"static member {old.group_instance_id} rejoined")
        await self._maybe_complete_join(group)
        return waiter

    def _prepare_rebalance(self, group: ConsumerGroup, reason: str, initial: bool = False) -> None:
        now = self._now()
        if group.is_(GroupState.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
                member.answer_sync(sync_error(ErrorCode.rebalance_in_progress))
        log.info("group %s: preparing rebalance at generation %d: %s", group.group_id, group.generation, reason)
        group.transition(GroupState.PREPARING_REBALANCE, wall_clock_ms())
        rebalance_s = group.max_rebalance_timeout_ms() / 1000
        group.rebalance_deadline = now + rebalance_s
        delay_s = self.config.get_int("group.initial.rebalance.delay.ms") / 1000 if initial else 0.0
        group.initial_join_deadline = now + min(delay_s, rebalance_s)

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
            await self._persist(group)
        except CoordinatorFencedError as exc:
            await self._lost(group, exc)
            return
        except GroupStoreUnavailableError as exc:
            # The generation still moves on in memory; the next write names the last one written.
            log.warning("group %s: generation %d not persisted: %s", group.group_id, group.generation, exc)
        log.info("group %s: generation %d with %d members, protocol %s", group.group_id, group.generation,
                 len(group.members), group.protocol)
        for member in group.members.values():
            member.heartbeat_deadline = now + member.session_timeout_ms / 1000
            member.answer_join(group.join_response(member))

    # SyncGroup ----------------------------------------------------------------------------------

    async def sync_group(self, request: Request) -> Any:
        response = await self._sync(request.body)
        if isinstance(response, asyncio.Future):
            response = await response
        return _respond(request, {"throttle_time": ZERO, **response})

    async def _sync(self, body: Any) -> dict[str, Any] | asyncio.Future:
        group, error = self._owned(body.group_id)
        if group is None:
            return sync_error(error)
        async with group.lock:
            if group.unloaded:
                return sync_error(ErrorCode.not_coordinator)
            error = self._validate_member(group, body.member_id, getattr(body, "group_instance_id", None),
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
            await self._persist(group)
        except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
            for member in group.members.values():
                member.assignment = previous.get(member.member_id, b"")
            group.state = GroupState.COMPLETING_REBALANCE
            error = await self._lost(group, exc)
            if not group.unloaded:
                for member in group.members.values():
                    member.answer_sync(sync_error(error))
                self._prepare_rebalance(group, "the assignment could not be stored")
            return
        now = self._now()
        for member in group.members.values():
            member.heartbeat_deadline = now + member.session_timeout_ms / 1000
            member.answer_sync(group.sync_response(member))

    def _validate_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                         generation: int) -> ErrorCode:
        if group.static_member_fenced(instance_id, member_id):
            return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    # Heartbeat ----------------------------------------------------------------------------------

    async def heartbeat(self, request: Request) -> Any:
        body = request.body
        group, error = self._owned(body.group_id)
        if group is not None:
            error = self._heartbeat(group, body)
        return _respond(request, {"throttle_time": ZERO, "error_code": error})

    def _heartbeat(self, group: ConsumerGroup, body: Any) -> ErrorCode:
        instance_id = getattr(body, "group_instance_id", None)
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        error = self._validate_member(group, body.member_id, instance_id, body.generation_id)
        if error != ErrorCode.none:
            return error
        member = group.members[body.member_id]
        member.heartbeat_deadline = self._now() + member.session_timeout_ms / 1000
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # LeaveGroup ---------------------------------------------------------------------------------

    async def leave_group(self, request: Request) -> Any:
        body = request.body
        if hasattr(body, "members"):
            identities = [(m.member_id, m.group_instance_id) for m in body.members]
        else:
            identities = [(body.member_id, None)]
        group, error = self._owned(body.group_id)
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
        return _respond(request, {"throttle_time": ZERO, "error_code": error, "members": members})

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

    # timers -------------------------------------------------------------------------------------

    async def _tick(self) -> None:
        now = self._now()
        for group in list(self.groups.values()):
            if group.loading or group.unloaded:
                continue
            if now > group.lease_valid_until:
                log.warning("group %s: lease epoch %d not renewed in time; giving the group up",
                            group.group_id, group.coordinator_epoch)
                self._unload(group)
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

    # OffsetCommit -------------------------------------------------------------------------------

    async def offset_commit(self, request: Request) -> Any:
        body = request.body
        group, error = self._owned(body.group_id)
        if group is not None:
            error = self._validate_commit(group, body)
        now_ms = wall_clock_ms()
        retention_ms = _millis(getattr(body, "retention_time", None), -1)
        image = self.context.image
        max_metadata = self.config.get_int("offset.metadata.max.bytes")
        topics, writes = [], []
        for topic in body.topics:
            partitions = []
            for p in topic.partitions:
                result = {"partition_index": p.partition_index, "error_code": error}
                partitions.append(result)
                if error != ErrorCode.none:
                    continue
                metadata = p.committed_metadata or ""
                if (topic.name, p.partition_index) not in image.partitions:
                    result["error_code"] = ErrorCode.unknown_topic_or_partition
                elif len(metadata.encode()) > max_metadata:
                    result["error_code"] = ErrorCode.offset_metadata_too_large
                else:
                    committed = CommittedOffset(
                        offset=p.committed_offset, leader_epoch=getattr(p, "committed_leader_epoch", -1),
                        metadata=metadata, commit_timestamp_ms=now_ms,
                        expire_timestamp_ms=now_ms + retention_ms if retention_ms > 0 else None,
                    )
                    writes.append(self._commit_one(group, topic.name, p.partition_index, committed, result))
            topics.append({"name": topic.name, "partitions": partitions})
        if writes:
            await asyncio.gather(*writes)
        return _respond(request, {"throttle_time": ZERO, "topics": topics})

    def _validate_commit(self, group: ConsumerGroup, body: Any) -> ErrorCode:
        generation = body.generation_id_or_member_epoch
        instance_id = getattr(body, "group_instance_id", None)
        if generation >= 0 or body.member_id or instance_id is not None:
            error = self._validate_member(group, body.member_id, instance_id, generation)
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
                await self._io(self.store.put_offset, group.group_id, topic, partition, committed,
                               group.coordinator_epoch)
            except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
                result["error_code"] = await self._lost(group, exc)
                return
            group.offsets[key] = committed

    # OffsetFetch --------------------------------------------------------------------------------

    async def offset_fetch(self, request: Request) -> Any:
        body = request.body
        group, error = self._owned(body.group_id)
        topics = []
        if body.topics is None:
            wanted: dict[str, list[int]] = {}
            if group is not None:
                for topic, partition in sorted(group.offsets):
                    wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in body.topics}
        for name, partitions in wanted.items():
            results = []
            for partition in partitions:
                committed = group.offsets.get((name, partition)) if group is not None else None
                results.append({
                    "partition_index": partition,
                    "committed_offset": committed.offset if committed else -1,
                    "committed_leader_epoch": committed.leader_epoch if committed else -1,
                    "metadata": committed.metadata if committed else "",
                    "error_code": error,
                })
            topics.append({"name": name, "partitions": results})
        return _respond(request, {"throttle_time": ZERO, "topics": topics, "error_code": error})

    # DescribeGroups, ListGroups, DeleteGroups ---------------------------------------------------

    async def describe_groups(self, request: Request) -> Any:
        described = []
        for group_id in request.body.groups:
            group, error = self._owned(group_id)
            if group is None:
                described.append({"error_code": error, "group_id": group_id, "group_state": "", "protocol_type": "",
                                  "protocol_data": "", "members": []})
            elif not group.exists:
                described.append({"error_code": ErrorCode.none, "group_id": group_id,
                                  "group_state": GroupState.DEAD.value, "protocol_type": "", "protocol_data": "",
                                  "members": []})
            else:
                described.append(group.summary())
        return _respond(request, {"throttle_time": ZERO, "groups": described})

    async def list_groups(self, request: Request) -> Any:
        wanted = {s.lower() for s in getattr(request.body, "states_filter", ()) or ()}
        listed: dict[str, dict[str, Any]] = {}
        for group in list(self.groups.values()):
            if not group.loading and group.exists:
                listed[group.group_id] = {"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                                          "group_state": group.state.value}
        error = ErrorCode.none
        live = sorted(b.broker_id for b in self.context.image.live_brokers())
        if live and live[0] == self.broker_id:
            # Groups whose coordinator is gone are nobody's until a client looks for them; the
            # lowest-numbered live broker lists them so that no group drops out of the listing.
            try:
                stored = await self._io(self.store.list_groups)
            except GroupStoreUnavailableError as exc:
                log.warning("ListGroups: %s", exc)
                stored = []
                error = ErrorCode.coordinator_not_available
            for item in stored:
                orphan = item.lease.holder == NO_HOLDER or item.lease.holder not in live
                if orphan and item.group_id not in listed and (item.record.protocol_type or item.record.generation):
                    listed[item.group_id] = {"group_id": item.group_id,
                                             "protocol_type": item.record.protocol_type or "",
                                             "group_state": item.record.state}
        groups = [g for g in listed.values() if not wanted or g["group_state"].lower() in wanted]
        return _respond(request, {"throttle_time": ZERO, "error_code": error, "groups": groups})

    async def delete_groups(self, request: Request) -> Any:
        results = []
        for group_id in request.body.groups_names:
            results.append({"group_id": group_id, "error_code": await self._delete_group(group_id)})
        return _respond(request, {"throttle_time": ZERO, "results": results})

    async def _delete_group(self, group_id: str) -> ErrorCode:
        group, error = self._owned(group_id)
        if group is None:
            return error
        async with group.lock:
            if group.unloaded:
                return ErrorCode.not_coordinator
            if group.members or not group.is_(GroupState.EMPTY):
                return ErrorCode.non_empty_group
            existed = group.exists
            try:
                await self._remove_offsets(group, list(group.offsets))
                await self._io(self.store.delete_group, group_id, self.broker_id, group.coordinator_epoch)
            except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
                return await self._lost(group, exc)
            self._unload(group)
        return ErrorCode.none if existed else ErrorCode.group_id_not_found

    async def _remove_offsets(self, group: ConsumerGroup, keys: list[tuple[str, int]]) -> None:
        async def remove(key: tuple[str, int]) -> None:
            async with group.offset_locks.setdefault(key, asyncio.Lock()):
                await self._io(self.store.delete_offset, group.group_id, key[0], key[1], group.coordinator_epoch)
                group.offsets.pop(key, None)

        await asyncio.gather(*(remove(key) for key in keys))

    # offset expiry ------------------------------------------------------------------------------

    async def _expire_offsets(self) -> None:
        retention_ms = self.config.get_int("offsets.retention.minutes") * 60_000
        for group in list(self.groups.values()):
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
                        await self._remove_offsets(group, expired)
                    if not group.offsets and not group.members:
                        # Kafka's Dead: an empty group without offsets is forgotten.
                        await self._io(self.store.delete_group, group.group_id, self.broker_id,
                                       group.coordinator_epoch)
                        self._unload(group)
                except (CoordinatorFencedError, GroupStoreUnavailableError) as exc:
                    await self._lost(group, exc)
