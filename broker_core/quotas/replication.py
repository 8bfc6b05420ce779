"""Replication throttles (Kafka's KIP-73 ReplicationQuotaManager): moving replicas without starving clients.

Two broker-wide rates, each changeable live as a dynamic broker config: ``leader.replication.throttled.rate``
bounds the bytes a leader sends to throttled followers, ``follower.replication.throttled.rate`` the
bytes a follower fetches for throttled replicas. Which replicas are throttled is per topic:
``leader.replication.throttled.replicas`` and ``follower.replication.throttled.replicas`` list
``partition:broker`` pairs (or ``*`` for every replica of the topic); a broker applies the leader
list's pairs naming itself to the partitions it leads, and the follower list's pairs naming itself
to the replicas it fetches, as kafka-reassign-partitions --throttle sets them (leader list: the
current replicas; follower list: the replicas being added). As in Kafka, a replica in the ISR is
never throttled: the throttle slows catching up, never the replication that acks=all waits for.

A throttled partition is left out of a fetch (follower) or answered without records (leader) while
the throttle's token bucket is in debt: it refills at the rate read now and holds at most BURST_S
seconds of it, and each fetch's bytes are taken from it once sent (leader) or received (follower),
which may take it below zero. So the bytes moved in any interval of T seconds stay within
``rate * (T + BURST_S)`` plus one fetch, from the first second of a move: a follower asks for at
most BURST_S of the rate per throttled partition (`fetch_bytes`; at least one batch comes back) and
waits out the debt (`wait_s`) before fetching them again.

Kafka measures the rate instead, over ``replication.quota.window.num`` windows of
``replication.quota.window.size.seconds``, counting at least ``num - 1`` whole windows
(`Rate.windowSize`; a later variant counts a single window while the rate's very first window runs,
which only moves the burst one window on): a move that starts from idle is measured over ten seconds
it has not yet run, so it runs unthrottled until it has moved about ten seconds' worth (a 1 GiB move
under 50 MB/s averaged 67 MiB/s). Floe holds a
move at the rate from its start instead; the window settings no longer shape the replication
throttles. Not thread safe: used from the broker's event loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from broker_core.settings import INT64_MAX

from .rates import TokenBucket, WindowConfig

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

# The most a replication throttle's bucket holds, in seconds of its rate: the burst after a pause, and
# how long a stall of the event loop can be made up for without the move falling behind the rate.
BURST_S = 0.1


class ThrottledReplicasError(ValueError):
    """A throttled-replicas list does not parse; the message names the bad entry."""


@dataclass(frozen=True, slots=True)
class ThrottledReplicas:
    """One topic's throttled-replicas list: every replica (``*``) or these (partition, broker) pairs."""

    every: bool
    pairs: frozenset[tuple[int, int]]

    def throttles(self, partition: int, broker_id: int) -> bool:
        return self.every or (partition, broker_id) in self.pairs


NONE_THROTTLED = ThrottledReplicas(False, frozenset())


@functools.lru_cache(maxsize=1024)
def parse_throttled_replicas(text: str) -> ThrottledReplicas:
    """``""`` (none), ``*`` (all) or ``partition:broker,...``; ThrottledReplicasError otherwise."""
    text = text.strip()
    if not text:
        return NONE_THROTTLED
    if text == "*":
        return ThrottledReplicas(True, frozenset())
    pairs = set()
    for entry in text.split(","):
        partition, sep, broker = entry.strip().partition(":")
        try:
            if not sep:
                raise ValueError
            pair = (int(partition), int(broker))
        except ValueError:
            raise ThrottledReplicasError(
                f"{entry.strip()!r} is not partition:broker (the list is partition:broker,... or *)") from None
        if pair[0] < 0 or pair[1] < 0:
            raise ThrottledReplicasError(f"{entry.strip()!r} names a negative partition or broker")
        pairs.add(pair)
    return ThrottledReplicas(False, frozenset(pairs))


def lists_replica(text: str, partition: int, broker_id: int) -> bool:
    """Whether a topic's throttled-replicas config names this replica (a list that does not parse, which
    the config checks keep out, names none)."""
    if not text:
        return False
    try:
        return parse_throttled_replicas(text).throttles(partition, broker_id)
    except ThrottledReplicasError:
        return False


class ReplicationQuota:
    """One direction's broker-wide throttle: a token bucket of the bytes recorded for throttled
    replicas, refilled at the rate ``quota()`` reads now (a dynamic broker config, so it can change
    between calls; see the module doc)."""

    def __init__(self, quota: Callable[[], float], now_s: float) -> None:
        self.quota = quota
        # One window of BURST_S: the bucket holds BURST_S seconds of the rate.
        self._bucket = TokenBucket(WindowConfig(samples=1, window_s=BURST_S), quota(), now_s)

    def limited(self) -> bool:
        """Whether a quota is set at all (the default, Long.MAX_VALUE, is none)."""
        return self.quota() < INT64_MAX

    def exceeded(self, now_s: float) -> bool:
        quota = self.quota()
        return quota < INT64_MAX and self._bucket.exceeded(quota, now_s)

    def wait_s(self, now_s: float) -> float:
        """How long until throttled replicas may fetch again: the time to pay the bucket's debt back."""
        quota = self.quota()
        return self._bucket.throttle_s(quota, now_s) if quota < INT64_MAX else 0.0

    def fetch_bytes(self, max_bytes: int) -> int:
        """What one fetch may ask for per throttled partition: ``max_bytes``, at most BURST_S of the rate."""
        quota = self.quota()
        return max_bytes if quota >= INT64_MAX else max(1, min(max_bytes, int(quota * BURST_S)))

    def record(self, size: int, now_s: float) -> None:
        self._bucket.record(size, self.quota(), now_s)
