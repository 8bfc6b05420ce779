"""The controller's planning of asked-for elections (ElectLeaders) and of the automatic leader rebalance."""

from __future__ import annotations

from broker_core.metadata.controller import (
    ElectionOutcome,
    imbalanced_brokers,
    plan_preferred_election,
    plan_unclean_election,
)
from broker_core.metadata.state import NO_LEADER, PartitionState


def state(replicas: tuple[int, ...], leader: int, isr: tuple[int, ...], partition: int = 0) -> PartitionState:
    return PartitionState("t", "id", partition, replicas, leader, 5, 9, isr)


def test_a_preferred_election_moves_leadership_to_the_first_replica_with_a_new_leader_epoch() -> None:
    elected = plan_preferred_election(state((1, 2, 3), 2, (1, 2, 3)), running={1, 2, 3})
    assert isinstance(elected, PartitionState)
    assert (elected.leader, elected.leader_epoch, elected.isr) == (1, 6, (1, 2, 3))


def test_a_preferred_election_is_not_needed_or_not_available_as_kafka_says() -> None:
    assert plan_preferred_election(state((1, 2), 1, (1, 2)), {1, 2}) is ElectionOutcome.ELECTION_NOT_NEEDED
    assert plan_preferred_election(state((1, 2), 2, (2,)), {1, 2}) is ElectionOutcome.PREFERRED_LEADER_NOT_AVAILABLE
    assert plan_preferred_election(state((1, 2), 2, (1, 2)), {2}) is ElectionOutcome.PREFERRED_LEADER_NOT_AVAILABLE


def test_an_unclean_election_prefers_a_running_isr_member_then_any_running_replica() -> None:
    clean = plan_unclean_election(state((1, 2, 3), NO_LEADER, (1, 3)), running={2, 3})
    assert isinstance(clean, PartitionState) and (clean.leader, clean.isr) == (3, (3,))
    unclean = plan_unclean_election(state((1, 2, 3), NO_LEADER, (1,)), running={2, 3})
    assert isinstance(unclean, PartitionState) and (unclean.leader, unclean.isr) == (2, (2,))
    assert plan_unclean_election(state((1, 2), NO_LEADER, (1,)), set()) is ElectionOutcome.ELIGIBLE_LEADERS_NOT_AVAILABLE
    assert plan_unclean_election(state((1, 2), 1, (1, 2)), {1, 2}) is ElectionOutcome.ELECTION_NOT_NEEDED


def test_a_broker_is_imbalanced_when_more_than_the_percentage_of_its_preferred_partitions_lead_elsewhere() -> None:
    partitions = [state((1, 2), 1, (1, 2), p) for p in range(9)] + [state((1, 2), 2, (1, 2), 9)]
    assert imbalanced_brokers(partitions, 10) == set()  # 1 of 10 is exactly 10%
    partitions.append(state((1, 2), 2, (1, 2), 10))
    assert imbalanced_brokers(partitions, 10) == {1}
    assert imbalanced_brokers([state((2, 1), 1, (1, 2))], 10) == {2}
