"""Replication throttles: the throttled-replicas lists, the quota's measure, and where dynamic broker
configs come from."""

from __future__ import annotations

import pytest

from broker_core.quotas.replication import (
    BURST_S,
    ReplicationQuota,
    ThrottledReplicasError,
    lists_replica,
    parse_throttled_replicas,
)
from broker_core.settings import (
    INT64_MAX,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_STATIC_BROKER,
    ConfigError,
    check_dynamic_broker_config,
    live_broker_entry,
)


def test_a_list_names_partition_broker_pairs_or_every_replica() -> None:
    listed = parse_throttled_replicas("0:1, 0:2,3:1")
    assert listed.throttles(0, 2) and listed.throttles(3, 1) and not listed.throttles(1, 1)
    assert parse_throttled_replicas("*").throttles(7, 9)
    assert not parse_throttled_replicas("").throttles(0, 1)


@pytest.mark.parametrize("text", ["0-1", "0:", "a:1", "0:1,,", "-1:2"])
def test_a_malformed_list_is_refused_naming_the_entry(text: str) -> None:
    with pytest.raises(ThrottledReplicasError):
        parse_throttled_replicas(text)
    assert not lists_replica(text, 0, 1)


def test_the_quota_is_exceeded_while_the_bytes_recorded_are_ahead_of_the_rate_read_now() -> None:
    rate = [1000.0]
    quota = ReplicationQuota(lambda: rate[0], now_s=0.0)
    assert quota.limited() and not quota.exceeded(0.0)
    quota.record(900, 0.0)  # the bucket held 100 bytes (BURST_S of the rate): 800 in debt
    assert quota.exceeded(0.5) and quota.wait_s(0.5) == pytest.approx(0.3)
    assert not quota.exceeded(0.8)
    quota.record(1000, 0.8)
    assert quota.exceeded(1.0)
    rate[0] = 10_000.0  # a dynamic config change applies at the next check
    assert not quota.exceeded(1.1)
    rate[0] = float(INT64_MAX)
    assert not quota.limited() and not quota.exceeded(1.2) and quota.wait_s(1.2) == 0.0


def test_a_throttled_fetch_asks_for_at_most_a_burst_of_the_rate() -> None:
    rate = [1_000_000.0]
    quota = ReplicationQuota(lambda: rate[0], now_s=0.0)
    assert quota.fetch_bytes(1 << 20) == int(1_000_000 * BURST_S)
    rate[0] = 100e6
    assert quota.fetch_bytes(1 << 20) == 1 << 20
    rate[0] = float(INT64_MAX)
    assert quota.fetch_bytes(1 << 20) == 1 << 20


def copy_under_throttle(quota: ReplicationQuota, total: int, *, batch: int, round_trip_s: float, start_s: float,
                        change: tuple[float, list[float], float] | None = None) -> list[tuple[float, int]]:
    """A follower copying ``total`` bytes as fast as ``quota`` lets it, on a simulated clock: each
    fetch asks for `fetch_bytes` (whole batches of ``batch`` bytes, at least one) when the bucket is not
    in debt, takes ``round_trip_s`` and records what came back; in debt it sleeps `wait_s` (at most
    0.1 s, as the fetcher does). Returns (time, bytes copied so far) after each fetch."""
    now, copied, progress = start_s, 0, [(start_s, 0)]
    while copied < total:
        if change is not None and now >= change[0]:
            change[1][0] = change[2]
            change = None
        if quota.exceeded(now):
            now += min(max(quota.wait_s(now), 0.001), 0.1)
            continue
        asked = quota.fetch_bytes(1 << 20)
        got = min(max(asked // batch, 1) * batch, total - copied)
        now += round_trip_s
        quota.record(got, now)
        copied += got
        progress.append((now, copied))
    return progress


def most_in(progress: list[tuple[float, int]], seconds: float) -> int:
    """The most bytes copied in any interval of ``seconds`` (between two progress points)."""
    best, j = 0, 0
    for t, copied in progress:
        while progress[j][0] < t - seconds:
            j += 1
        best = max(best, copied - progress[j][1])
    return best


@pytest.mark.parametrize(("rate", "batch", "round_trip_s"), [
    (50e6, 1 << 20, 0.002),  # the 50 MB/s, 1 MiB batches, a fast network
    (50e6, 16 << 10, 0.0005),  # small batches
    (1 << 20, 64 << 10, 0.001),  # a slow throttle
    (1 << 20, 1 << 20, 0.001),  # batches as large as a second of the rate
])
def test_a_move_from_idle_is_held_to_the_rate_over_every_interval_from_its_start(
        rate: float, batch: int, round_trip_s: float) -> None:
    # The broker's throttle has been idle for a minute when the move starts (Kafka's sampled rate
    # would let about ten seconds' worth through at once here).
    quota = ReplicationQuota(lambda: rate, now_s=0.0)
    total = int(rate * 30)
    progress = copy_under_throttle(quota, total, batch=batch, round_trip_s=round_trip_s, start_s=60.0)
    one_fetch = max(quota.fetch_bytes(1 << 20), batch)
    for seconds in (1.0, 2.0, 5.0, 10.0):
        assert most_in(progress, seconds) <= rate * (seconds + BURST_S) + one_fetch
    elapsed = progress[-1][0] - 60.0
    assert total / rate * 0.95 <= elapsed <= total / rate * 1.05  # and not held below it either


def test_a_rate_changed_during_a_move_holds_from_the_change() -> None:
    rate = [40e6]
    quota = ReplicationQuota(lambda: rate[0], now_s=0.0)
    progress = copy_under_throttle(quota, int(40e6 * 10 + 10e6 * 10), batch=1 << 20, round_trip_s=0.002,
                                   start_s=0.0, change=(10.0, rate, 10e6))
    after = [(t, copied) for t, copied in progress if t >= 10.2]
    one_fetch = 1 << 20
    for seconds in (1.0, 3.0):
        assert most_in(after, seconds) <= 10e6 * (seconds + BURST_S) + one_fetch
    assert 19.0 <= progress[-1][0] <= 21.0


def resolved(name: str, broker_id: int, overrides: dict[str, str], dynamic: dict[str, dict[str, str]]
             ) -> tuple[str | None, int]:
    entry = live_broker_entry(name, broker_id, overrides, dynamic)
    return entry.value, entry.source


def test_a_broker_value_wins_over_the_cluster_default_over_the_static_setting() -> None:
    name = "follower.replication.throttled.rate"
    dynamic = {"<default>": {name: "300"}, "2": {name: "200"}}
    assert resolved(name, 2, {name: "100"}, dynamic) == ("200", SOURCE_DYNAMIC_BROKER)
    assert resolved(name, 1, {name: "100"}, dynamic) == ("300", SOURCE_DYNAMIC_DEFAULT_BROKER)
    assert resolved(name, 1, {name: "100"}, {}) == ("100", SOURCE_STATIC_BROKER)
    assert resolved(name, 1, {}, {}) == (str(INT64_MAX), SOURCE_DEFAULT)
    # A static setting never takes a dynamic value, even one stored for it.
    assert live_broker_entry("num.partitions", 1, {}, {"1": {"num.partitions": "9"}}).value == "1"


@pytest.mark.parametrize(("name", "value"), [("num.partitions", "3"), ("no.such.config", "1"),
                                             ("log.cleaner.threads", "0"), ("log.cleaner.backoff.ms", "soon"),
                                             ("leader.replication.throttled.rate", "-1")])
def test_only_dynamic_settings_with_values_they_can_take_may_change_live(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        check_dynamic_broker_config(name, value)
