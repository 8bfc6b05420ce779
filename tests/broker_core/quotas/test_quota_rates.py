"""Kafka's sampled rate, its throttle time, and KIP-599's token bucket, on a clock the test moves."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker_core.quotas.entities import DEFAULT as DEFAULT_ENTITY
from broker_core.quotas.entities import PRODUCER_BYTE_RATE, ClientQuotas, QuotaEntity, client_identity
from broker_core.quotas.manager import QuotaManager
from broker_core.quotas.rates import SampledRate, TokenBucket, WindowConfig

KAFKA = WindowConfig(samples=11, window_s=1.0)


def test_a_first_burst_is_measured_over_at_least_samples_minus_one_windows() -> None:
    rate = SampledRate(KAFKA, now_s=0.0)
    rate.record(10_000, now_s=0.001)
    assert rate.measure(0.001) == pytest.approx(10_000 / 10.001, rel=1e-6)


def test_the_throttle_is_the_time_that_brings_the_rate_back_to_the_quota() -> None:
    rate = SampledRate(KAFKA, now_s=0.0)
    rate.record(20_000, now_s=0.0)
    # 20 000 bytes over 10 s is 2000 B/s: twice a 1000 B/s quota; silent for 10 s more, the
    # rate over the then 20 s is the quota.
    assert rate.throttle_s(1000.0, 0.0, max_throttle_s=60.0) == pytest.approx(10.0)
    assert rate.throttle_s(4000.0, 0.0, max_throttle_s=60.0) == 0.0


def test_the_throttle_is_bounded() -> None:
    rate = SampledRate(KAFKA, now_s=0.0)
    rate.record(10**9, now_s=0.0)
    assert rate.throttle_s(1000.0, 0.0, max_throttle_s=11.0) == 11.0


def test_windows_older_than_the_span_are_forgotten() -> None:
    rate = SampledRate(KAFKA, now_s=0.0)
    rate.record(50_000, now_s=0.0)
    for second in range(1, 12):
        rate.record(0, now_s=float(second))
    assert rate.measure(12.5) == 0.0


def test_a_client_that_waits_its_throttles_out_runs_at_its_quota() -> None:
    """A producer sending 64 KiB requests as fast as it may, waiting each throttle, for 60 s."""
    now = [0.0]
    manager = QuotaManager(KAFKA, KAFKA, clock=lambda: now[0])
    manager.apply(ClientQuotas({QuotaEntity(None, "p"): {PRODUCER_BYTE_RATE: 100_000.0}}))
    identity = client_identity("p")
    sent = 0
    while now[0] < 60.0:
        throttle = manager.record_produce(identity, 65536)
        sent += 65536
        now[0] += 0.001 + throttle
    # The quota for the whole time, plus the burst an idle client starts with (KIP-599: one span).
    assert sent == pytest.approx(100_000 * (now[0] + KAFKA.span_s), rel=0.02)


def test_a_client_without_a_quota_is_never_throttled() -> None:
    manager = QuotaManager(KAFKA, KAFKA, clock=lambda: 0.0)
    manager.apply(ClientQuotas({QuotaEntity(None, "p"): {PRODUCER_BYTE_RATE: 1.0}}))
    assert manager.record_produce(client_identity("q"), 10**9) == 0.0


def test_clients_under_a_default_quota_each_have_their_own_budget() -> None:
    manager = QuotaManager(KAFKA, KAFKA, clock=lambda: 0.0)
    manager.apply(ClientQuotas({QuotaEntity(None, DEFAULT_ENTITY): {PRODUCER_BYTE_RATE: 1000.0}}))
    assert manager.record_produce(client_identity("a"), 20_000) > 0
    assert manager.record_produce(client_identity("b"), 5_000) == 0.0


def test_clients_of_one_user_share_the_users_quota() -> None:
    manager = QuotaManager(KAFKA, KAFKA, clock=lambda: 0.0)
    manager.apply(ClientQuotas({QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 1000.0}}))
    assert manager.record_produce(client_identity("a", "User:alice"), 8_000) == 0.0
    assert manager.record_produce(client_identity("b", "User:alice"), 8_000) > 0


def test_a_throttled_fetch_taken_back_does_not_count() -> None:
    manager = QuotaManager(KAFKA, KAFKA, clock=lambda: 0.0)
    manager.apply(ClientQuotas({QuotaEntity(None, "c"): {"consumer_byte_rate": 1000.0}}))
    identity = client_identity("c")
    assert manager.fetch_room(identity).max_bytes == 1_000  # one window's share to start with
    assert manager.record_fetch(identity, 10_000) == 0.0
    assert manager.record_fetch(identity, 5_000) > 0
    manager.unrecord_fetch(identity, 5_000)
    assert manager.record_fetch(identity, 0) == 0.0


def simulate_consumer(manager: QuotaManager, now: list[float], batch: int, seconds: float) -> dict[int, int]:
    """A consumer fetching whole ``batch``-byte batches as fast as the broker lets it (a throttled or
    paced answer comes back empty and the connection is muted for its throttle); bytes received per second."""
    identity = client_identity("c")
    received: dict[int, int] = {}
    while now[0] < seconds:
        room = manager.fetch_room(identity)
        if room.max_bytes <= 0:
            now[0] += max(room.wait_s, 0.001)
            continue
        size = max(batch, room.max_bytes // batch * batch)  # Kafka returns at least one batch
        throttle = manager.record_fetch(identity, size)
        if throttle > 0:
            manager.unrecord_fetch(identity, size)
            now[0] += throttle
            continue
        received[int(now[0])] = received.get(int(now[0]), 0) + size
        now[0] += 0.002
    return received


def test_a_consumer_is_paced_to_its_quota_instead_of_bursting_ten_windows_at_once() -> None:
    now = [0.0]
    manager = QuotaManager(KAFKA, KAFKA, clock=lambda: now[0])
    quota = 10 * 1024 * 1024
    manager.apply(ClientQuotas({QuotaEntity(None, "c"): {"consumer_byte_rate": float(quota)}}))
    batch = 1_000_000
    received = simulate_consumer(manager, now, batch, 66.0)
    # At most a full bucket plus a second of refill in any second (Kafka's cap alone lets ten windows' worth through).
    assert max(received.values()) <= 2 * quota + batch
    measured = sum(received.get(second, 0) for second in range(22, 66)) / 44
    assert measured == pytest.approx(quota, rel=0.05)


def test_request_time_throttle_is_bounded_by_one_window() -> None:
    manager = QuotaManager(KAFKA, KAFKA, clock=lambda: 0.0)
    manager.apply(ClientQuotas({QuotaEntity(None, "c"): {"request_percentage": 1.0}}))
    assert manager.record_request_time(client_identity("c"), 5.0) == 1.0


def test_the_token_bucket_allows_a_burst_then_refills_at_the_quota() -> None:
    bucket = TokenBucket(KAFKA, quota=2.0, now_s=0.0)
    assert not bucket.exceeded(2.0, 0.0)
    bucket.record(22, 2.0, 0.0)  # the whole burst: 2/s over 11 s
    assert not bucket.exceeded(2.0, 0.0)
    bucket.record(4, 2.0, 0.0)
    assert bucket.exceeded(2.0, 0.0)
    assert bucket.throttle_s(2.0, 0.0) == pytest.approx(2.0)
    assert not bucket.exceeded(2.0, 2.0)




# ---- producer_byte_rate: KIP-599's token bucket -----------------------------------------------

MIB = 1024 * 1024


def produce_saturated(throttle_of: Callable[[int, float], float], request: int, seconds: float) -> list[tuple[float, int]]:
    """A producer that always has a ``request``-byte batch waiting and sends it once the broker
    reads again (the mute after a throttled response); (time, bytes) of each request."""
    sent: list[tuple[float, int]] = []
    now = 0.0
    while now < seconds:
        throttle = throttle_of(request, now)
        sent.append((now, request))
        now += 0.005 + throttle
    return sent


def counts_over(sent: list[tuple[float, int]], span_s: float, starts: range) -> list[float]:
    """Bytes per second sent in [start, start + span_s), for each start."""
    return [sum(size for at, size in sent if start <= at < start + span_s) / span_s for start in starts]


def test_kafkas_sampled_rate_lets_a_producer_of_large_requests_saw_tooth() -> None:
    """Why the producer's bytes go to a token bucket: 1 MB requests against a 1 MiB/s quota, each
    throttle as Kafka computes it from its sampled rate, make a burst whenever the previous burst's
    sample expires, so counts over 22 s differ by where they start."""
    rate = SampledRate(KAFKA, now_s=0.0)

    def kafka_throttle(size: int, now: float) -> float:
        rate.record(size, now)
        return rate.throttle_s(MIB, now, max_throttle_s=KAFKA.span_s)

    counts = counts_over(produce_saturated(kafka_throttle, 1_000_000, 150.0), 22.0, range(12, 120))
    assert max(counts) / MIB > 1.1 and min(counts) / MIB < 0.9


def test_a_producer_of_large_requests_gets_its_quota_over_any_22_seconds() -> None:
    now = [0.0]
    manager = QuotaManager(KAFKA, KAFKA, clock=lambda: now[0])
    manager.apply(ClientQuotas({QuotaEntity(None, "p"): {PRODUCER_BYTE_RATE: float(MIB)}}))
    identity = client_identity("p")

    def floe_throttle(size: int, at: float) -> float:
        now[0] = at
        return manager.record_produce(identity, size)

    counts = counts_over(produce_saturated(floe_throttle, 1_000_000, 150.0), 22.0, range(12, 120))
    # Exact but for one request (1 MB of 22 MiB, 0.043) at either end of a count.
    assert all(0.95 < count / MIB < 1.05 for count in counts), (min(counts) / MIB, max(counts) / MIB)


def test_an_idle_producer_may_burst_one_span_of_its_quota() -> None:
    now = [0.0]
    manager = QuotaManager(KAFKA, KAFKA, clock=lambda: now[0])
    manager.apply(ClientQuotas({QuotaEntity(None, "p"): {PRODUCER_BYTE_RATE: 1000.0}}))
    identity = client_identity("p")
    assert manager.record_produce(identity, 11_000) == 0.0  # the burst: 1000 B/s times 11 windows of 1 s
    assert manager.record_produce(identity, 500) == pytest.approx(0.5)  # the time to refill 500 bytes
    now[0] = 0.5
    assert manager.record_produce(identity, 0) == 0.0


def test_a_producer_debt_beyond_one_span_throttles_the_next_request_too() -> None:
    now = [0.0]
    manager = QuotaManager(KAFKA, KAFKA, clock=lambda: now[0])
    manager.apply(ClientQuotas({QuotaEntity(None, DEFAULT_ENTITY): {PRODUCER_BYTE_RATE: 1000.0}}))
    identity = client_identity("big")
    assert manager.record_produce(identity, 100_000) == KAFKA.span_s  # a debt of 89 s, muted for one span
    now[0] = 70.0  # past the idle sweep, which another client's first request runs
    assert manager.record_produce(client_identity("other"), 1) == 0.0
    assert manager.record_produce(identity, 0) == pytest.approx(KAFKA.span_s)  # 19 s of debt left, not forgiven
    now[0] = 89.0
    assert manager.record_produce(identity, 0) == 0.0
