from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.metadata.assignment import assign_replicas_rack_unaware
from broker_core.metadata.errors import InvalidPartitionsError, InvalidReplicationFactorError


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[int], int, int, int, int]:
    brokers = draw(st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True))
    replication_factor = draw(st.integers(1, len(brokers)))
    num_partitions = draw(st.integers(1, 200))
    start_index = draw(st.integers(0, len(brokers) - 1))
    replica_shift = draw(st.integers(0, len(brokers) - 1))
    return brokers, replication_factor, num_partitions, start_index, replica_shift


@given(clusters())
def test_every_partition_gets_rf_distinct_replicas_from_the_given_brokers(cluster):
    brokers, rf, partitions, start, shift = cluster
    assignment = assign_replicas_rack_unaware(partitions, rf, brokers, start_index=start, replica_shift=shift)
    assert len(assignment) == partitions
    for replicas in assignment:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)


@given(clusters())
def test_leaders_are_spread_evenly_within_one(cluster):
    brokers, rf, partitions, start, shift = cluster
    assignment = assign_replicas_rack_unaware(partitions, rf, brokers, start_index=start, replica_shift=shift)
    leaders = Counter(replicas[0] for replicas in assignment)
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1


@given(clusters())
def test_replicas_per_broker_are_spread_evenly_when_partitions_fill_whole_rounds(cluster):
    brokers, rf, _, start, shift = cluster
    partitions = len(brokers) * 3
    assignment = assign_replicas_rack_unaware(partitions, rf, brokers, start_index=start, replica_shift=shift)
    load = Counter(b for replicas in assignment for b in replicas)
    assert all(load[b] == 3 * rf for b in brokers)


def test_matches_kafkas_assignment_for_a_fixed_start():
    # Kafka's AdminUtils with fixedStartIndex=0 over brokers 0..4, 10 partitions, RF 3.
    assignment = assign_replicas_rack_unaware(10, 3, [0, 1, 2, 3, 4], start_index=0, replica_shift=0)
    assert assignment == [
        [0, 1, 2],
        [1, 2, 3],
        [2, 3, 4],
        [3, 4, 0],
        [4, 0, 1],
        [0, 2, 3],
        [1, 3, 4],
        [2, 4, 0],
        [3, 0, 1],
        [4, 1, 2],
    ]


def test_replication_factor_above_broker_count_is_refused():
    with pytest.raises(InvalidReplicationFactorError) as raised:
        assign_replicas_rack_unaware(3, 4, [1, 2, 3])
    assert raised.value.available_brokers == 3


def test_zero_partitions_is_refused():
    with pytest.raises(InvalidPartitionsError):
        assign_replicas_rack_unaware(0, 1, [1])
