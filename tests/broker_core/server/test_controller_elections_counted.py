"""Elections by controlled shutdown and by partition reassignment count in the controller's election
metrics (``floe_controller_elections_total{cause}``), as failovers and ElectLeaders elections do."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from broker_core.metadata.image import MetadataImage
from broker_core.metadata.reassignment import ReassignmentRefusal, Refused
from broker_core.metadata.state import PartitionState
from broker_core.metrics.broker import BrokerMetrics
from broker_core.metrics.scrape import Scrape, parse
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.server.admin_reassign import ReassignmentApis
from broker_core.server.broker import Broker


def state(partition: int, leader: int, replicas: tuple[int, ...] = (1, 2, 3)) -> PartitionState:
    return PartitionState("t", "id", partition, replicas, leader, 1, 1, replicas)


def image_of(*states: PartitionState) -> MetadataImage:
    return MetadataImage(partitions={(s.topic, s.partition): s for s in states})


def scraped(metrics: BrokerMetrics) -> Scrape:
    return parse("test", metrics.exposition().decode())


def test_a_controller_pass_counts_moves_off_a_shutting_down_broker_apart_from_other_elections() -> None:
    metrics = BrokerMetrics()
    broker = SimpleNamespace(image=image_of(state(0, 1), state(1, 1), state(2, 2), state(3, 3)), metrics=metrics)
    # Partitions 0 and 1 leave shutting-down broker 1; 2 loses a fenced leader; 3 only changes its ISR.
    moved = [state(0, 2), state(1, 3)]
    Broker._count_elections(broker, [*moved, state(2, 3), state(3, 3)], moved, time.perf_counter())
    Broker._count_elections(broker, [state(3, 3)], [], time.perf_counter())  # no leader changed: not a pass
    result = scraped(metrics)
    assert result.value("floe_controller_elections_total", cause="controlled_shutdown") == 2
    assert result.value("floe_controller_elections_total", cause="broker_change") == 1
    assert result.value("floe_controller_election_seconds_count") == 1


class Reassignments:
    """`PartitionReassignments.alter` as the controller answers it: per partition a new state or a refusal."""

    def __init__(self, outcomes: dict[tuple[str, int], Any]) -> None:
        self.outcomes = outcomes

    def alter(self, wanted: Any, controller_epoch: int, **_: Any) -> dict[tuple[str, int], Any]:
        return self.outcomes


def alter(metrics: BrokerMetrics, image: MetadataImage, targets: dict[tuple[str, int], tuple[int, ...]],
          outcomes: dict[tuple[str, int], Any]) -> None:
    async def refresh_metadata() -> None:
        pass

    context = SimpleNamespace(authorizer=SimpleNamespace(enabled=False), store=None, image=image, metrics=metrics,
                              controller=SimpleNamespace(controller_epoch=3), config=SimpleNamespace(broker_id=1),
                              refresh_metadata=refresh_metadata)
    apis = ReassignmentApis(context)
    apis.reassignments = Reassignments(outcomes)
    body = SimpleNamespace(allow_replication_factor_change=True, topics=[
        SimpleNamespace(name=topic, partitions=[SimpleNamespace(partition_index=index, replicas=list(replicas))])
        for (topic, index), replicas in targets.items()])
    response = asyncio.run(apis.alter_partition_reassignments(Request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 1,
                                                                      "admin", body, 0)))
    assert response.error_code == 0


def test_a_reassignment_that_moves_a_partition_off_its_leader_counts_as_an_election() -> None:
    metrics = BrokerMetrics()
    image = image_of(state(0, 1), state(1, 1), state(2, 1))
    alter(metrics, image, {("t", 0): (2, 3), ("t", 1): (1, 4), ("t", 2): (9,)}, {
        ("t", 0): state(0, 2, (2, 3)),  # its targets were in the ISR: completed at once, leader 1 -> 2
        ("t", 1): state(1, 1, (1, 4, 2, 3)),  # started, its leader stays
        ("t", 2): Refused(ReassignmentRefusal.INVALID_REPLICA_ASSIGNMENT, "broker 9 is not registered"),
    })
    result = scraped(metrics)
    assert result.value("floe_controller_elections_total", cause="reassignment") == 1
    assert result.value("floe_controller_election_seconds_count") == 1


def test_a_completed_reassignment_counts_only_partitions_whose_leader_changed() -> None:
    metrics = BrokerMetrics()
    image = image_of(state(0, 1, (2, 3, 1)), state(1, 2, (2, 3, 1)))
    completed = [state(0, 2, (2, 3)), state(1, 2, (2, 3))]
    metrics.elections_done({"reassignment": image.leader_changes(completed)}, 0.01)
    metrics.elections_done({"reassignment": image.leader_changes([])}, 0.01)
    result = scraped(metrics)
    assert result.value("floe_controller_elections_total", cause="reassignment") == 1
    assert result.value("floe_controller_election_seconds_count") == 1
