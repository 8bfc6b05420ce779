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
the measured rate is above the quota; the rate is Kafka's sampled rate over
``replication.quota.window.num`` windows of ``replication.quota.window.size.seconds``. Not thread
safe: used from the broker's event loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from broker_core.settings import INT64_MAX

from .rates import SampledRate, WindowConfig

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


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
    """One direction's broker-wide throttle: the bytes recorded for throttled replicas against the
    rate ``quota()`` reads now (a dynamic broker config, so it can change between calls)."""

    def __init__(self, config: WindowConfig, quota: Callable[[], float], now_s: float) -> None:
        self.quota = quota
        self._rate = SampledRate(config, now_s)

    def limited(self) -> bool:
        """Whether a quota is set at all (the default, Long.MAX_VALUE, is none)."""
        return self.quota() < INT64_MAX

    def exceeded(self, now_s: float) -> bool:
        quota = self.quota()
        return quota < INT64_MAX and self._rate.measure(now_s) > quota

    def record(self, size: int, now_s: float) -> None:
        self._rate.record(size, now_s)

    def rate(self, now_s: float) -> float:
        """Bytes per second recorded, as measured over the windows."""
        return self._rate.measure(now_s)
