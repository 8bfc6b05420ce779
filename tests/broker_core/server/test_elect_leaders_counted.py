"""ElectLeaders elections count in the controller's election metrics, by election type."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from broker_core.metadata.controller import ElectionOutcome
from broker_core.metrics.broker import BrokerMetrics
from broker_core.metrics.scrape import parse
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.server.admin_leaders import ELECTION_PREFERRED, ELECTION_UNCLEAN, LeaderElections


class Controller:
    """The controller's answer to `elect`: per partition a new state, an outcome, or None (unknown)."""

    def __init__(self, outcomes: dict[tuple[str, int], Any]) -> None:
        self.outcomes = outcomes

    def elect(self, wanted: Any, *, unclean: bool) -> dict[tuple[str, int], Any]:
        return self.outcomes


def elect(metrics: BrokerMetrics, election_type: int, outcomes: dict[tuple[str, int], Any]) -> None:
    async def refresh_metadata() -> None:
        pass

    context = SimpleNamespace(authorizer=SimpleNamespace(enabled=False), controller=Controller(outcomes),
                              config=SimpleNamespace(broker_id=1), metrics=metrics, refresh_metadata=refresh_metadata)
    body = SimpleNamespace(election_type=election_type, topic_partitions=[
        SimpleNamespace(topic=topic, partitions=[partition]) for topic, partition in outcomes])
    request = Request(ApiKey.ELECT_LEADERS, 2, 1, "admin", body, 0)
    response = asyncio.run(LeaderElections(context).elect_leaders(request))
    assert response.error_code == 0


def test_partitions_given_a_leader_by_elect_leaders_are_counted_by_election_type() -> None:
    metrics = BrokerMetrics()
    elect(metrics, ELECTION_PREFERRED, {("a", 0): SimpleNamespace(leader=2), ("a", 1): SimpleNamespace(leader=3),
                                        ("a", 2): ElectionOutcome.ELECTION_NOT_NEEDED, ("gone", 0): None})
    elect(metrics, ELECTION_UNCLEAN, {("b", 0): SimpleNamespace(leader=1)})
    elect(metrics, ELECTION_PREFERRED, {("a", 0): ElectionOutcome.PREFERRED_LEADER_NOT_AVAILABLE})
    scraped = parse("test", metrics.exposition().decode())
    assert scraped.value("floe_controller_elections_total", cause="elect_leaders_preferred") == 2
    assert scraped.value("floe_controller_elections_total", cause="elect_leaders_unclean") == 1
    assert scraped.value("floe_controller_election_seconds_count") == 2  # the passes that elected a leader
