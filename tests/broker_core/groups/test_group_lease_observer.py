"""A contender's judgement of another broker's group lease, on its own monotonic clock."""

from __future__ import annotations

from broker_core.groups.lease import Lease, LeaseObserver


def lease(heartbeat: int, holder: int = 1, epoch: int = 4, duration_ms: int = 3000) -> Lease:
    return Lease("g", holder, epoch, heartbeat, duration_ms)


def test_a_lease_lapses_only_after_a_whole_duration_without_change() -> None:
    observer = LeaseObserver()
    assert not observer.lapsed(lease(7), 100.0)
    assert not observer.lapsed(lease(7), 102.9)
    assert observer.lapsed(lease(7), 103.0)


def test_any_heartbeat_restarts_the_wait() -> None:
    observer = LeaseObserver()
    observer.lapsed(lease(7), 100.0)
    assert not observer.lapsed(lease(8), 102.0)
    assert not observer.lapsed(lease(8), 104.9)
    assert observer.lapsed(lease(8), 105.0)


def test_a_new_holder_or_epoch_restarts_the_wait() -> None:
    observer = LeaseObserver()
    observer.lapsed(lease(7), 100.0)
    assert not observer.lapsed(lease(7, holder=2, epoch=5), 104.0)
    assert observer.lapsed(lease(7, holder=2, epoch=5), 107.0)


def test_the_first_sighting_never_counts_as_lapsed_and_forgetting_starts_over() -> None:
    observer = LeaseObserver()
    observer.lapsed(lease(7), 100.0)
    observer.forget("g")
    assert not observer.lapsed(lease(7), 500.0)
