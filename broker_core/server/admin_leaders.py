"""ElectLeaders (API 43): preferred and unclean leader elections asked for by an operator.

As Kafka answers it: ALTER on the cluster is needed (else CLUSTER_AUTHORIZATION_FAILED for the whole
answer), and the request is served by the controller (clients send it to the controller Metadata
names; another broker answers NOT_CONTROLLER, which clients retry after a metadata refresh). A
preferred election makes the first assigned replica the leader if it runs and is in the ISR (else
PREFERRED_LEADER_NOT_AVAILABLE; ELECTION_NOT_NEEDED if it leads already). An unclean election is
only for a partition whose leader is gone: the first running ISR member, else the first running
replica alone (ELIGIBLE_LEADERS_NOT_AVAILABLE if none runs). A partition the cluster lacks is
UNKNOWN_TOPIC_OR_PARTITION. With no partitions named every partition is considered and only those
where an election was tried are listed. The new leaders are written by the controller
(`Controller.elect`, conditional on partition and controller epochs) and reach every broker with
the next metadata poll. The partitions given a new leader count in the controller's election metrics
(``floe_controller_elections_total{cause="elect_leaders_preferred"|"elect_leaders_unclean"}`` and
``floe_controller_election_seconds``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.metadata import errors as meta_errors
from broker_core.metadata.controller import ElectionOutcome
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, respond
from broker_core.security.acls import AclOperation

from .authorization import cluster_allowed

if TYPE_CHECKING:
    from .context import BrokerContext
    from .handlers import Handler

log = logging.getLogger(__name__)

ELECTION_PREFERRED, ELECTION_UNCLEAN = 0, 1
# The `cause` label of floe_controller_elections_total for each election type.
_ELECTION_CAUSES = {ELECTION_PREFERRED: "elect_leaders_preferred", ELECTION_UNCLEAN: "elect_leaders_unclean"}
_OUTCOME_CODES = {
    ElectionOutcome.ELECTION_NOT_NEEDED: ErrorCode.election_not_needed,
    ElectionOutcome.PREFERRED_LEADER_NOT_AVAILABLE: ErrorCode.preferred_leader_not_available,
    ElectionOutcome.ELIGIBLE_LEADERS_NOT_AVAILABLE: ErrorCode.eligible_leaders_not_available,
}


class LeaderElections:
    """The ElectLeaders API of one broker (see the module doc)."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context

    def api_handlers(self) -> dict[int, Handler]:
        return {ApiKey.ELECT_LEADERS: self.elect_leaders}

    async def elect_leaders(self, request: Request) -> Any:
        body = request.body
        election_type = getattr(body, "election_type", ELECTION_PREFERRED)
        named = None if body.topic_partitions is None else [
            (t.topic, int(p)) for t in body.topic_partitions for p in t.partitions]

        def whole(error: ErrorCode, message: str | None = None) -> Any:
            results: dict[str, list[dict[str, Any]]] = {}
            for topic, partition in named or []:
                results.setdefault(topic, []).append(
                    {"partition_id": partition, "error_code": error, "error_message": message})
            return answer(error, results)

        def answer(error: ErrorCode, results: dict[str, list[dict[str, Any]]]) -> Any:
            return respond(request, {
                "throttle_time": NO_THROTTLE, "error_code": error,
                "replica_election_results": [{"topic": t, "partition_result": r} for t, r in sorted(results.items())],
            })

        if not cluster_allowed(self.context.authorizer, request, AclOperation.ALTER):
            return whole(ErrorCode.cluster_authorization_failed, "Authorization failed.")
        if election_type not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
            return whole(ErrorCode.invalid_request, f"unknown election type {election_type}")
        controller = self.context.controller
        if controller is None:
            return whole(ErrorCode.not_controller, f"broker {self.context.config.broker_id} is not the controller")
        started = time.perf_counter()
        try:
            outcomes = await asyncio.to_thread(controller.elect, named, unclean=election_type == ELECTION_UNCLEAN)
        except meta_errors.FencedControllerError:
            return whole(ErrorCode.not_controller, "the controller lease moved on")
        except meta_errors.MetadataError as exc:
            return whole(ErrorCode.request_timed_out, str(exc))
        results: dict[str, list[dict[str, Any]]] = {}
        elected = []
        for (topic, partition), outcome in outcomes.items():
            entry: dict[str, Any] = {"partition_id": partition, "error_code": ErrorCode.none, "error_message": None}
            if outcome is None:
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
            elif isinstance(outcome, ElectionOutcome):
                entry["error_code"], entry["error_message"] = _OUTCOME_CODES[outcome], outcome.value
            else:
                elected.append(f"{topic}-{partition}->{outcome.leader}")
            results.setdefault(topic, []).append(entry)
        if elected:
            # Counted as the controller's own elections are (Broker._count_elections): each partition
            # given a new leader, and the pass's duration.
            self.context.metrics.elections.labels(_ELECTION_CAUSES[election_type]).inc(len(elected))
            self.context.metrics.election_seconds.observe(time.perf_counter() - started)
            log.info("principal %s from %s: %s election: %s", request.principal, request.client_host,
                     "unclean" if election_type == ELECTION_UNCLEAN else "preferred", ", ".join(elected))
            await self.context.refresh_metadata()
        return answer(ErrorCode.none, results)
