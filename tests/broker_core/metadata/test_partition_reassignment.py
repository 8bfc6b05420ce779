"""Partition reassignment (KIP-455): the controller's plans, the store round trip, and --generate's balance."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker_core.metadata.controller import ControllerLease
from broker_core.metadata.errors import FencedControllerError
from broker_core.metadata.reassignment import (
    PartitionReassignments,
    ReassignmentRefusal,
    Refused,
    balanced_plan,
    plan_completion,
    plan_reassignment,
)
from broker_core.metadata.state import NO_LEADER, PartitionState
from broker_core.metadata.store import MetadataStore

ALL = {1, 2, 3, 4}


def state(replicas: tuple[int, ...], leader: int, isr: tuple[int, ...], adding: tuple[int, ...] = (),
          removing: tuple[int, ...] = ()) -> PartitionState:
    return PartitionState("t", "id", 0, replicas, leader, 5, 9, isr, adding, removing)


def test_a_move_lists_target_then_leaving_replicas_and_completes_only_when_every_target_is_in_sync() -> None:
    moving = plan_reassignment(state((1, 2), 1, (1, 2)), (2, 3), ALL, ALL)
    assert isinstance(moving, PartitionState)
    assert (moving.replicas, moving.adding_replicas, moving.removing_replicas) == ((2, 3, 1), (3,), (1,))
    assert (moving.leader, moving.leader_epoch, moving.isr) == (1, 5, (1, 2))
    assert plan_completion(moving, ALL) is None  # 3 has not caught up
    caught_up = plan_completion(moving.with_isr((1, 2, 3)), ALL)
    assert caught_up is not None
    assert (caught_up.replicas, caught_up.isr, caught_up.adding_replicas, caught_up.removing_replicas) == (
        (2, 3), (2, 3), (), ())
    assert (caught_up.leader, caught_up.leader_epoch) == (2, 6)  # the removed leader handed over


def test_a_leader_that_stays_keeps_leading_and_its_epoch() -> None:
    moving = plan_reassignment(state((1, 2), 1, (1, 2)), (1, 3), ALL, ALL)
    assert isinstance(moving, PartitionState)
    done = plan_completion(moving.with_isr((1, 2, 3)), ALL)
    assert done is not None and (done.replicas, done.leader, done.leader_epoch, done.isr) == ((1, 3), 1, 5, (1, 3))


def test_cancel_goes_back_to_the_original_replicas_and_drops_the_added_ones_from_the_isr() -> None:
    moving = state((2, 3, 1), 3, (1, 2, 3), adding=(3,), removing=(1,))
    reverted = plan_reassignment(moving, None, ALL, ALL)
    assert isinstance(reverted, PartitionState)
    assert (reverted.replicas, reverted.isr, reverted.adding_replicas, reverted.removing_replicas) == (
        (2, 1), (1, 2), (), ())
    assert reverted.leader in (1, 2) and reverted.leader_epoch == 6


def test_a_new_target_for_a_moving_partition_is_planned_from_its_original_replicas() -> None:
    moving = state((2, 3, 1), 1, (1, 2), adding=(3,), removing=(1,))
    again = plan_reassignment(moving, (2, 4), ALL, ALL)
    assert isinstance(again, PartitionState)
    assert (again.replicas, again.adding_replicas, again.removing_replicas, again.isr) == ((2, 4, 1), (4,), (1,), (1, 2))


def test_a_new_order_changes_only_the_preferred_leader_and_a_shrink_completes_at_once() -> None:
    reordered = plan_reassignment(state((1, 2), 1, (1, 2)), (2, 1), ALL, ALL)
    assert isinstance(reordered, PartitionState) and reordered.replicas == (2, 1) and not reordered.reassigning
    shrunk = plan_reassignment(state((1, 2, 3), 3, (1, 2, 3)), (1, 2), ALL, ALL)
    assert isinstance(shrunk, PartitionState)
    assert (shrunk.replicas, shrunk.isr, shrunk.leader, shrunk.reassigning) == ((1, 2), (1, 2), 1, False)


@pytest.mark.parametrize(("target", "registered", "reason"), [
    ((), ALL, ReassignmentRefusal.INVALID_REPLICA_ASSIGNMENT),
    ((1, 1), ALL, ReassignmentRefusal.INVALID_REPLICA_ASSIGNMENT),
    ((1, 9), ALL, ReassignmentRefusal.INVALID_REPLICA_ASSIGNMENT),
    (None, ALL, ReassignmentRefusal.NO_REASSIGNMENT_IN_PROGRESS),
])
def test_bad_targets_and_a_cancel_of_nothing_are_refused_as_kafka_refuses_them(
        target: tuple[int, ...] | None, registered: set[int], reason: ReassignmentRefusal) -> None:
    refused = plan_reassignment(state((1, 2), 1, (1, 2)), target, registered, ALL)
    assert isinstance(refused, Refused) and refused.reason is reason and refused.message


def test_a_replication_factor_change_is_refused_when_not_allowed() -> None:
    refused = plan_reassignment(state((1, 2), 1, (1, 2)), (1, 2, 3), ALL, ALL, allow_replication_factor_change=False)
    assert isinstance(refused, Refused) and refused.reason is ReassignmentRefusal.INVALID_REPLICATION_FACTOR


def test_completion_with_no_running_target_leaves_the_partition_leaderless_until_one_returns() -> None:
    done = plan_completion(state((3, 1), 1, (1, 3), adding=(3,), removing=(1,)), running={1})
    assert done is not None and done.leader == NO_LEADER and done.isr == (3,)


def test_generate_balances_counts_and_bytes_and_moves_little() -> None:
    current = {("t", p): (1, 2) for p in range(6)}
    sizes = {("t", p): (p + 1) * 100 for p in range(6)}
    plan = balanced_plan(current, sizes, [1, 2, 3])
    per_broker = {b: sum(b in r for r in plan.values()) for b in (1, 2, 3)}
    assert per_broker == {1: 4, 2: 4, 3: 4}
    stored = {b: sum(sizes[k] for k, r in plan.items() if b in r) for b in (1, 2, 3)}
    assert max(stored.values()) - min(stored.values()) <= max(sizes.values())
    moved = sum(len(set(plan[k]) - set(current[k])) for k in current)
    assert moved == 4  # broker 3's even share, and no more
    orphaned = balanced_plan({("a", 0): (1, 4), ("a", 1): (4, 2)}, {}, [1, 2, 3])
    assert all(4 not in r and len(set(r)) == 2 for r in orphaned.values())
    assert orphaned[("a", 0)][0] == 1  # the replicas that stay keep their place
    assert all(len(set(r)) == 2 for r in plan.values())
    with pytest.raises(ValueError):
        balanced_plan({("t", 0): (1, 2, 3)}, {}, [1, 2])


def test_the_store_keeps_a_move_and_the_controller_completes_it(
        store: MetadataStore, register_brokers: Callable[[list[int]], dict[int, int]]) -> None:
    register_brokers([1, 2, 3])
    store.create_topic("moves", 1, 2)
    epoch = ControllerLease(store).try_acquire(1)
    assert epoch is not None
    reassignments = PartitionReassignments(store)
    before = store.get_partition("moves", 0)
    target = tuple(b for b in (1, 2, 3) if b not in before.replicas) + before.replicas[:1]
    (result,) = reassignments.alter({("moves", 0): target}, epoch).values()
    assert isinstance(result, PartitionState) and result.adding_replicas == target[:1]
    stored = store.get_partition("moves", 0)
    assert (stored.adding_replicas, stored.removing_replicas) == (target[:1], before.replicas[1:])
    assert [p.partition for p in reassignments.ongoing()] == [0]
    assert reassignments.complete_ready(epoch) == []
    store.update_partition(stored.with_isr(stored.isr + target[:1]), stored.partition_epoch)
    (completed,) = reassignments.complete_ready(epoch)
    assert completed.replicas == target and not completed.reassigning
    assert store.get_partition("moves", 0).replicas == target and reassignments.ongoing() == []
    missing = reassignments.alter({("moves", 7): (1,), ("nope", 0): (1,)}, epoch)
    assert all(isinstance(r, Refused) and r.reason is ReassignmentRefusal.UNKNOWN_TOPIC_OR_PARTITION
               for r in missing.values())
    with pytest.raises(FencedControllerError):
        reassignments.alter({("moves", 0): tuple(reversed(target))}, epoch - 1)


def test_a_controller_pass_reads_the_metadata_version_once_for_elections_and_completions(
        store: MetadataStore, register_brokers: Callable[[list[int]], dict[int, int]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from broker_core.metadata.controller import Controller

    register_brokers([1, 2, 3])
    store.create_topic("moves", 1, 2)
    epoch = ControllerLease(store).try_acquire(1)
    assert epoch is not None
    controller = Controller(store, epoch, session_timeout_ms=60_000)
    reassignments = PartitionReassignments(store)
    controller.run_once(now_ms=0)
    assert controller.unchanged_version is None  # the first pass read the cluster
    before = store.get_partition("moves", 0)
    target = tuple(b for b in (1, 2, 3) if b not in before.replicas) + before.replicas[:1]
    reassignments.alter({("moves", 0): target}, epoch)
    controller.run_once(now_ms=1)
    assert controller.unchanged_version is None  # the move bumped the version: planned again
    assert reassignments.complete_ready(epoch, controller.current_snapshot, controller.unchanged_version) == []

    reads = []
    read_version = store.metadata_version
    monkeypatch.setattr(store, "metadata_version", lambda: reads.append(1) or read_version())
    controller.run_once(now_ms=2)
    assert controller.unchanged_version == read_version() and len(reads) == 1
    assert reassignments.complete_ready(epoch, controller.current_snapshot, controller.unchanged_version) == []
    assert len(reads) == 1  # the pass's version stood for the completion check
    controller.run_once(now_ms=2.5, version=read_version())
    assert len(reads) == 1 and controller.unchanged_version is not None  # and a version handed in, for the election check

    # The follower catches up: the ISR change bumps the version, so the next pass reads again and completes.
    stored = store.get_partition("moves", 0)
    store.update_partition(stored.with_isr(stored.isr + target[:1]), stored.partition_epoch)
    controller.run_once(now_ms=3)
    assert controller.unchanged_version is None
    (completed,) = reassignments.complete_ready(epoch, controller.current_snapshot, controller.unchanged_version)
    assert completed.replicas == target and not completed.reassigning
