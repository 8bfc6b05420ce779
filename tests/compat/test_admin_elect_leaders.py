"""ElectLeaders driven by confluent-kafka's and kafka-python's admin clients, and the controller's
automatic leader rebalance, against two real brokers: after the preferred replica's broker stops and
comes back, leadership returns to it on request (auto rebalance off) or by itself (auto rebalance on)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from broker_core.local_stack import LocalStack
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.timeout(300), pytest.mark.faults]  # leader elections on their own stacks, about 40 s: in `make faults`, outside CI's 20-minute budget


def two_brokers(directory: Path, overrides: dict[str, str]) -> Iterator[LocalStack]:
    with running_stack(directory, brokers=2, overrides={"replica.lag.time.max.ms": "3000", **overrides}) as stack:
        yield stack


@pytest.fixture(scope="module")
def manual(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from two_brokers(tmp_path_factory.mktemp("elect-manual"), {"auto.leader.rebalance.enable": "false"})


@pytest.fixture(scope="module")
def automatic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from two_brokers(tmp_path_factory.mktemp("elect-auto"), {"leader.imbalance.check.interval.seconds": "2"})


def partition_state(admin: AdminClient, topic: str) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) of partition 0 as Metadata reports them."""
    described = admin.list_topics(topic, timeout=30).topics[topic].partitions[0]
    return described.leader, list(described.replicas), sorted(described.isrs)


def lead_elsewhere_then_return(stack: LocalStack, admin: AdminClient, topic: str) -> int:
    """Create ``topic``, stop its preferred replica's broker until the other leads, start it again and
    wait until it is back in the ISR; returns the preferred replica."""
    admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(timeout=30)
    wait_until(lambda: partition_state(admin, topic)[0] >= 0, "a leader", timeout_s=30, interval_s=0.5)
    _, replicas, _ = partition_state(admin, topic)
    preferred, other = replicas
    stack.kill_broker(preferred, signal.SIGTERM)
    wait_until(lambda: partition_state(admin, topic)[0] == other, "the other replica leads", timeout_s=60,
               interval_s=0.5)
    stack.restart_broker(preferred)
    wait_until(lambda: partition_state(admin, topic)[2] == sorted(replicas), "the preferred replica rejoins the ISR",
               timeout_s=60, interval_s=0.5)
    return preferred


def test_a_preferred_election_moves_leadership_back_and_a_second_one_is_not_needed(manual: LocalStack) -> None:
    admin = AdminClient({"bootstrap.servers": manual.bootstrap_servers})
    preferred = lead_elsewhere_then_return(manual, admin, "elected")
    assert partition_state(admin, "elected")[0] != preferred  # auto rebalance is off: nothing moved it back

    outcome = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elected", 0)]).result(timeout=30)
    assert outcome == {TopicPartition("elected", 0): None}
    wait_until(lambda: partition_state(admin, "elected")[0] == preferred, "the preferred replica leads",
               timeout_s=30, interval_s=0.5)

    again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elected", 0)]).result(timeout=30)
    assert again[TopicPartition("elected", 0)].code() == KafkaError.ELECTION_NOT_NEEDED

    kp_admin = KafkaAdminClient(bootstrap_servers=manual.bootstrap_servers)
    try:
        answer = kp_admin.elect_leaders(1, {"elected": [0]}, raise_errors=False)  # unclean, the leader runs
    finally:
        kp_admin.close()
    (result,) = answer.replica_election_results
    assert result.topic == "elected"
    assert [(p.partition_id, p.error_code) for p in result.partition_result] == [(0, KafkaError.ELECTION_NOT_NEEDED)]
    assert partition_state(admin, "elected")[0] == preferred


def test_auto_leader_rebalance_moves_leadership_back_to_the_returned_broker(automatic: LocalStack) -> None:
    admin = AdminClient({"bootstrap.servers": automatic.bootstrap_servers})
    preferred = lead_elsewhere_then_return(automatic, admin, "rebalanced")
    wait_until(lambda: partition_state(admin, "rebalanced")[0] == preferred,
               "the controller's imbalance check elects the preferred replica", timeout_s=60, interval_s=0.5)
