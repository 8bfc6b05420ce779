"""When a group's lease has lapsed, judged by a contender from its own sightings.

In the style of dynamodb-lock-client, a contender never compares its clock with the holder's. It
remembers the (holder, coordinator epoch, heartbeat) it last read for a group and when it first
read it, on its OWN monotonic clock; the lease has lapsed only once that triple has not changed
for a whole lease duration. Any change (a heartbeat, a new holder) restarts the wait. The holder,
for its part, stops trusting its lease a little before its last heartbeat's send time plus the
lease duration, so it has stopped serving before any contender may take over.

Thread-safety: a LeaseObserver belongs to the broker's event loop.
"""

from __future__ import annotations

from typing import Protocol


class ObservedLease(Protocol):
    """A lease as a contender reads it: a group's, or a transactional id's (``broker_core.transactions``)."""

    @property
    def key(self) -> str: ...

    @property
    def observation(self) -> tuple[int, int, int]: ...

    @property
    def lease_duration_ms(self) -> int: ...


class LeaseObserver:
    """Sightings of other brokers' leases, keyed by what the lease is for (group id, transactional id)."""

    def __init__(self) -> None:
        self._sightings: dict[str, tuple[tuple[int, int, int], float]] = {}

    def lapsed(self, lease: ObservedLease, now_s: float) -> bool:
        """Record a sighting of ``lease`` at ``now_s`` (monotonic seconds); True once it has lapsed."""
        seen = self._sightings.get(lease.key)
        if seen is None or seen[0] != lease.observation:
            self._sightings[lease.key] = (lease.observation, now_s)
            return False
        return (now_s - seen[1]) * 1000 >= lease.lease_duration_ms

    def forget(self, key: str) -> None:
        self._sightings.pop(key, None)
