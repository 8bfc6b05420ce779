"""Unit tests of the leader's ISR proposal (broker_core.replication.isr.proposed_isr)."""

from __future__ import annotations

from types import SimpleNamespace

from broker_core.replication.isr import proposed_isr
from broker_core.server.partition import ReplicaState

LAG_MAX_MS = 30_000
NOW_MS = 1_000_000.0


def leader_of(isr: tuple[int, ...], followers: dict[int, ReplicaState], high_watermark: int = 10,
              fenced_out: frozenset[int] = frozenset()) -> SimpleNamespace:
    return SimpleNamespace(broker_id=1, replicas=(1, 2, 3), isr=isr, followers=followers,
                           high_watermark=high_watermark, leader_epoch_start_offset=0, fenced_out=fenced_out)


def test_a_caught_up_follower_whose_broker_was_fenced_stays_for_the_controller_to_remove() -> None:
    # The controller takes a fenced broker out of every ISR in the pass that fences it; a leader
    # doing the same would race it on the same partitions.
    partition = leader_of((1, 2, 3), {2: ReplicaState(10, 0, NOW_MS - 100), 3: ReplicaState(10, 0, NOW_MS - 100)})
    assert proposed_isr(partition, live_brokers={1, 2}, lag_max_ms=LAG_MAX_MS, now_ms=NOW_MS) == (1, 2, 3)


def test_a_follower_lagging_past_the_lag_time_leaves_the_isr() -> None:
    partition = leader_of((1, 2, 3), {2: ReplicaState(10, 0, NOW_MS - 100),
                                      3: ReplicaState(4, 0, NOW_MS - LAG_MAX_MS - 1)})
    assert proposed_isr(partition, live_brokers={1, 2, 3}, lag_max_ms=LAG_MAX_MS, now_ms=NOW_MS) == (1, 2)


def test_a_caught_up_follower_joins_only_while_its_broker_runs() -> None:
    partition = leader_of((1, 2), {2: ReplicaState(10, 0, NOW_MS), 3: ReplicaState(10, 0, NOW_MS)})
    assert proposed_isr(partition, live_brokers={1, 2}, lag_max_ms=LAG_MAX_MS, now_ms=NOW_MS) == (1, 2)
    assert proposed_isr(partition, live_brokers={1, 2, 3}, lag_max_ms=LAG_MAX_MS, now_ms=NOW_MS) == (1, 2, 3)


def test_a_follower_below_the_high_watermark_does_not_join() -> None:
    partition = leader_of((1, 2), {2: ReplicaState(10, 0, NOW_MS), 3: ReplicaState(9, 0, NOW_MS)})
    assert proposed_isr(partition, live_brokers={1, 2, 3}, lag_max_ms=LAG_MAX_MS, now_ms=NOW_MS) == (1, 2)


def test_a_member_excluded_as_fenced_whose_broker_registered_again_stays_only_once_caught_up() -> None:
    # Broker 3 was fenced while in the ISR (the leader stopped counting it) and registered again
    # before the controller took it out: a new incarnation, in the ISR only if it holds the HW.
    behind = leader_of((1, 2, 3), {2: ReplicaState(10, 0, NOW_MS), 3: ReplicaState(4, 0, NOW_MS)},
                       fenced_out=frozenset({3}))
    assert proposed_isr(behind, live_brokers={1, 2, 3}, lag_max_ms=LAG_MAX_MS, now_ms=NOW_MS) == (1, 2)
    caught_up = leader_of((1, 2, 3), {2: ReplicaState(10, 0, NOW_MS), 3: ReplicaState(10, 0, NOW_MS)},
                          fenced_out=frozenset({3}))
    assert proposed_isr(caught_up, live_brokers={1, 2, 3}, lag_max_ms=LAG_MAX_MS, now_ms=NOW_MS) == (1, 2, 3)
    # While still fenced it stays, for the controller to remove (as any fenced member).
    fenced = leader_of((1, 2, 3), {2: ReplicaState(10, 0, NOW_MS), 3: ReplicaState(10, 0, NOW_MS - 100)},
                       fenced_out=frozenset({3}))
    assert proposed_isr(fenced, live_brokers={1, 2}, lag_max_ms=LAG_MAX_MS, now_ms=NOW_MS) == (1, 2, 3)
