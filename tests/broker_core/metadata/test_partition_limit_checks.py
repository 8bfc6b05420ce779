"""PartitionLimits: the arithmetic CreateTopics (and, later, CreatePartitions) answers POLICY_VIOLATION with."""

from __future__ import annotations

import pytest

from broker_core.metadata.errors import PolicyViolationError
from broker_core.metadata.topics import PartitionLimits

LIMITS = PartitionLimits(max_partitions=100, max_replicas_per_broker=30)


def check(existing: int = 0, replicas: int = 0, live: int = 3, new: int = 1, rf: int = 1) -> None:
    LIMITS.check_new_partitions(existing_partitions=existing, existing_replicas=replicas, live_brokers=live,
                                new_partitions=new, replication_factor=rf)


def test_reaching_the_partition_limit_exactly_is_allowed_and_one_more_is_not() -> None:
    check(existing=60, new=40, rf=1)
    with pytest.raises(PolicyViolationError) as raised:
        check(existing=60, new=41, rf=1)
    assert raised.value.limit == "floe.max.partitions"
    assert "floe.max.partitions is 100" in str(raised.value)
    assert raised.value.kafka_error_code == 44


def test_replicas_per_broker_are_averaged_over_the_live_brokers() -> None:
    check(replicas=60, live=3, new=10, rf=3)  # 90 replicas on 3 brokers: 30 each
    with pytest.raises(PolicyViolationError) as raised:
        check(replicas=61, live=3, new=10, rf=3)
    assert raised.value.limit == "floe.max.replicas.per.broker"
    assert "floe.max.replicas.per.broker is 30" in str(raised.value)


def test_a_million_partitions_are_refused_by_the_first_limit() -> None:
    with pytest.raises(PolicyViolationError, match="1000000 new partitions"):
        check(new=1_000_000)
