"""When a group's lease has lapsed, judged by a contender from its own sightings.

In the style of dynamodb-lock-client, a contender never compares its clock with the holder's. It
remembers the (holder, coordinator epoch, heartbeat) it last read for a group and when it first
read it, on its OWN monotonic clock; the lease has lapsed only once that triple has not changed
for a whole lease duration. Any change (a heartbeat, a new holder) restarts the wait. The holder,
for its part, stops trusting its lease a little before its last heartbeat's send time plus the
lease duration, so it has stopped serving before any contender may take over.

`claim_lease` is the acquisition both coordinators (groups, transactional ids) run for
FindCoordinator: read the lease, create it when missing, take it when free, released, left by an
earlier run of this broker or lapsed (each write conditional on what was read), else name the live
holder. `KeyedLocks` keeps one acquisition per key at a time on a broker, or two concurrent lookups
could each see the other's fresh lease as a stale one of this broker and take it over.

Thread-safety: everything here belongs to the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass

NO_HOLDER = -1
_CLAIM_ATTEMPTS = 3


@dataclass(frozen=True)
class Lease:
    """The lease part of a group's or a transactional id's item (``broker_core.transactions``):
    ``key`` is the group id or the transactional id."""

    key: str
    holder: int
    coordinator_epoch: int
    heartbeat: int
    lease_duration_ms: int

    @property
    def observation(self) -> tuple[int, int, int]:
        """What a contender compares between sightings: any change means the holder is alive."""
        return (self.holder, self.coordinator_epoch, self.heartbeat)


class LeaseObserver:
    """Sightings of other brokers' leases, keyed by what the lease is for (group id, transactional id)."""

    def __init__(self) -> None:
        self._sightings: dict[str, tuple[tuple[int, int, int], float]] = {}

    def lapsed(self, lease: Lease, now_s: float) -> bool:
        """Record a sighting of ``lease`` at ``now_s`` (monotonic seconds); True once it has lapsed."""
        seen = self._sightings.get(lease.key)
        if seen is None or seen[0] != lease.observation:
            self._sightings[lease.key] = (lease.observation, now_s)
            return False
        return (now_s - seen[1]) * 1000 >= lease.lease_duration_ms

    def forget(self, key: str) -> None:
        self._sightings.pop(key, None)


@dataclass(frozen=True)
class Claim:
    """The outcome of `claim_lease`: the lease this broker took (and when it sent the read that
    preceded it), or the live broker holding it (-1: nobody this broker can name)."""

    lease: Lease | None
    acquired_at: float
    holder: int


async def claim_lease(*, read: Callable[[], Awaitable[Lease | None]], create: Callable[[], Awaitable[Lease | None]],
                      take: Callable[[Lease], Awaitable[Lease | None]], observer: LeaseObserver, broker_id: int,
                      live_brokers: Callable[[], Collection[int]], now: Callable[[], float]) -> Claim:
    """Take the lease ``read`` returns if it is missing, free or lapsed, else name its live holder."""
    for _ in range(_CLAIM_ATTEMPTS):
        sent_at = now()
        seen = await read()
        if seen is None:
            lease = await create()
        elif seen.holder in (NO_HOLDER, broker_id) or observer.lapsed(seen, sent_at):
            # Free, released, lapsed, or left by an earlier run of this broker (which is dead: the
            # broker registration fences it): take it with a write conditional on what we saw.
            lease = await take(seen)
        else:
            return Claim(None, sent_at, seen.holder if seen.holder in live_brokers() else -1)
        if lease is not None:
            observer.forget(seen.key if seen is not None else lease.key)
            return Claim(lease, sent_at, broker_id)
    return Claim(None, now(), -1)


class KeyedLocks:
    """One asyncio lock per key, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
