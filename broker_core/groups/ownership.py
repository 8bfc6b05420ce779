"""Which groups this broker coordinates: the group leases, and the groups loaded under them.

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

pynamodb is synchronous: every DynamoDB call runs on this module's own worker threads (`io`), so
group I/O never starves the broker's own heartbeats of threads, and never on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from .errors import CoordinatorFencedError, GroupStoreUnavailableError
from .group import ConsumerGroup, GroupState
from .lease import KeyedLocks, Lease, LeaseObserver, claim_lease
from .store import GroupStore, StoredGroup

if TYPE_CHECKING:
    from broker_core.server.context import BrokerContext

log = logging.getLogger(__name__)

# The holder trusts its lease for this share of the duration after a heartbeat's send time; the
# rest absorbs clock-rate differences between holder and contenders.
LEASE_TRUST = 0.9
_IO_THREADS = 16

_R = TypeVar("_R")


class GroupOwnership:
    """The groups this broker holds the lease of, by group id, and the store they are written to.

    Invariant: a group is in ``groups`` only while this broker believes it holds the group's lease
    (``lease_valid_until`` on the event loop's clock); `unload` takes it out and answers its waiting
    requests with NOT_COORDINATOR. Every group write goes through `persist` or the store, conditional
    on the group's coordinator epoch. Called from the event loop only.
    """

    def __init__(self, context: BrokerContext) -> None:
        self.context = context
        self.broker_id = context.config.broker_id
        self.store = GroupStore(context.config.aws)
        self.lease_duration_ms = context.config.get_int("broker.session.timeout.ms")
        self.groups: dict[str, ConsumerGroup] = {}
        self._observer = LeaseObserver()
        self._acquiring = KeyedLocks()
        self._executor: ThreadPoolExecutor | None = None
        self._stopped = False

    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=_IO_THREADS, thread_name_prefix="group-dynamodb")
        await self.io(self.store.ensure_tables)

    async def stop(self) -> None:
        """Give up every group held, releasing its lease so another broker can take it at once."""
        held = list(self.groups.values())
        for group in held:
            self.unload(group)
        if self._executor is not None:
            await asyncio.gather(
                *(self.io(self.store.release_lease, g.group_id, self.broker_id, g.coordinator_epoch) for g in held),
                return_exceptions=True,
            )
            self._stopped = True
            self._executor.shutdown(wait=False)

    async def io(self, fn: Callable[..., _R], *args: Any) -> _R:
        """Run a GroupStore call on the coordinator's threads; after stop(), fail like an unreachable store."""
        if self._executor is None or self._stopped:
            raise GroupStoreUnavailableError("the group coordinator is not running")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def owned(self, group_id: str) -> tuple[ConsumerGroup | None, ErrorCode]:
        """The group if this broker coordinates it now, else the error to answer with."""
        if not group_id:
            return None, ErrorCode.invalid_group_id
        group = self.groups.get(group_id)
        if group is None:
            return None, ErrorCode.not_coordinator
        if group.loading:
            return None, ErrorCode.coordinator_load_in_progress
        if self.now() > group.lease_valid_until:
            log.warning("group %s: lease epoch %d not renewed in time; giving the group up",
                        group_id, group.coordinator_epoch)
            self.unload(group)
            return None, ErrorCode.not_coordinator
        return group, ErrorCode.none

    def unload(self, group: ConsumerGroup) -> None:
        """Stop coordinating ``group``: waiting requests are told to look for the coordinator again."""
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        group.unloaded = True
        group.answer_all(ErrorCode.not_coordinator)

    async def locate(self, group_id: str) -> tuple[ErrorCode, int]:
        """(error, coordinator broker id) for FindCoordinator, taking the lease when it is free or lapsed."""
        held = self.groups.get(group_id)
        if held is not None and self.now() <= held.lease_valid_until:
            return ErrorCode.none, self.broker_id
        async with self._acquiring.hold(group_id):
            return await self._locate_locked(group_id)

    async def _locate_locked(self, group_id: str) -> tuple[ErrorCode, int]:
        held = self.groups.get(group_id)
        if held is not None and self.now() <= held.lease_valid_until:
            return ErrorCode.none, self.broker_id
        if held is not None:
            self.unload(held)

        async def read() -> Lease | None:
            stored = await self.io(self.store.read_group, group_id)
            return stored.lease if stored is not None else None

        claim = await claim_lease(
            read=read, create=lambda: self.io(self.store.create_lease, group_id, self.broker_id, self.lease_duration_ms),
            take=lambda seen: self.io(self.store.take_lease, seen, self.broker_id, self.lease_duration_ms),
            observer=self._observer, broker_id=self.broker_id,
            live_brokers=lambda: {b.broker_id for b in self.context.image.live_brokers()}, now=self.now)
        if claim.lease is not None:
            log.info("broker %d coordinates group %s at epoch %d", self.broker_id, group_id,
                     claim.lease.coordinator_epoch)
            await self._load(claim.lease, claim.acquired_at)
            return ErrorCode.none, self.broker_id
        return (ErrorCode.none, claim.holder) if claim.holder >= 0 else (ErrorCode.coordinator_not_available, -1)

    async def _load(self, lease: Lease, acquired_at: float) -> None:
        group = ConsumerGroup(group_id=lease.key, coordinator_epoch=lease.coordinator_epoch,
                              lease_valid_until=acquired_at + LEASE_TRUST * self.lease_duration_ms / 1000)
        self.groups[lease.key] = group
        try:
            stored: StoredGroup | None = await self.io(self.store.read_group, lease.key)
            offsets = await self.io(self.store.load_offsets, lease.key)
            pending = await self.io(self.store.load_pending_offsets, lease.key)
        except GroupStoreUnavailableError:
            self.unload(group)
            raise
        if stored is None or stored.lease.coordinator_epoch != lease.coordinator_epoch:
            self.unload(group)
            return
        group.restore(stored.record, self.now())
        group.offsets = offsets
        group.pending_offsets = pending
        group.loading = False
        if group.members and stored.record.state != GroupState.STABLE.value:
            # The previous coordinator stopped between a rebalance's join and sync phases.
            async with group.lock:
                group.prepare_rebalance("coordinator moved during a rebalance", self.now())

    async def heartbeat_leases(self) -> None:
        groups = list(self.groups.values())
        if groups:
            await asyncio.gather(*(self._heartbeat_lease(g) for g in groups))

    async def _heartbeat_lease(self, group: ConsumerGroup) -> None:
        sent_at = self.now()
        try:
            await self.io(self.store.heartbeat_lease, group.group_id, self.broker_id, group.coordinator_epoch)
        except CoordinatorFencedError:
            log.warning("group %s: lease epoch %d was taken over", group.group_id, group.coordinator_epoch)
            self.unload(group)
            return
        except GroupStoreUnavailableError as exc:
            log.warning("group %s: lease heartbeat failed: %s", group.group_id, exc)
            return
        group.lease_valid_until = max(group.lease_valid_until,
                                      sent_at + LEASE_TRUST * self.lease_duration_ms / 1000)

    async def lost(self, group: ConsumerGroup, exc: Exception) -> ErrorCode:
        """The error to answer after a failed group write; a fenced coordinator gives the group up."""
        if isinstance(exc, CoordinatorFencedError):
            log.warning("%s", exc)
            self.unload(group)
            return ErrorCode.not_coordinator
        log.warning("group %s: %s", group.group_id, exc)
        return ErrorCode.coordinator_not_available

    async def persist(self, group: ConsumerGroup) -> None:
        """Write the group's metadata, conditional on the lease and the generation last written."""
        record = group.to_record()
        await self.io(self.store.write_group, group.group_id, self.broker_id, group.coordinator_epoch,
                       group.persisted_generation, record)
        group.persisted_generation = record.generation
