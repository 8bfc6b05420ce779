"""AlterPartitionReassignments (API 45) and ListPartitionReassignments (46): KIP-455 over the Kafka protocol.

As Kafka answers them: altering needs ALTER on the cluster, listing DESCRIBE on the cluster (else
CLUSTER_AUTHORIZATION_FAILED for the whole answer), and both are served by the controller (clients
send them to the controller Metadata names; another broker answers NOT_CONTROLLER, which clients
retry after a metadata refresh). Per partition, Alter answers INVALID_REPLICA_ASSIGNMENT (empty or
duplicate replicas, a broker that is not registered), INVALID_REPLICATION_FACTOR (v1 with
allow_replication_factor_change false and a different count), NO_REASSIGNMENT_IN_PROGRESS (a cancel,
replicas null, of a partition that is not moving) or UNKNOWN_TOPIC_OR_PARTITION. What the controller
writes and when the move completes is `broker_core.metadata.reassignment`'s. List names only the
partitions being moved, with their full replica list and the replicas being added and removed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.metadata import errors as meta_errors
from broker_core.metadata.reassignment import PartitionReassignments, ReassignmentRefusal, Refused
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, respond
from broker_core.security.acls import AclOperation

from .authorization import cluster_allowed

if TYPE_CHECKING:
    from .context import BrokerContext
    from .handlers import Handler

log = logging.getLogger(__name__)

_REFUSAL_CODES = {
    ReassignmentRefusal.INVALID_REPLICA_ASSIGNMENT: ErrorCode.invalid_replica_assignment,
    ReassignmentRefusal.INVALID_REPLICATION_FACTOR: ErrorCode.invalid_replication_factor,
    ReassignmentRefusal.NO_REASSIGNMENT_IN_PROGRESS: ErrorCode.no_reassignment_in_progress,
    ReassignmentRefusal.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.unknown_topic_or_partition,
}


class ReassignmentApis:
    """The two reassignment APIs of one broker (see the module doc)."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context
        self.reassignments = PartitionReassignments(context.store)

    def api_handlers(self) -> dict[int, Handler]:
        return {ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments,
                ApiKey.LIST_PARTITION_REASSIGNMENTS: self.list_partition_reassignments}

    def _refusal(self, request: Request, operation: AclOperation) -> tuple[ErrorCode, str] | None:
        if not cluster_allowed(self.context.authorizer, request, operation):
            return ErrorCode.cluster_authorization_failed, "Authorization failed."
        if self.context.controller is None:
            return ErrorCode.not_controller, f"broker {self.context.config.broker_id} is not the controller"
        return None

    async def alter_partition_reassignments(self, request: Request) -> Any:
        body = request.body
        wanted: dict[tuple[str, int], tuple[int, ...] | None] = {}
        duplicates: set[tuple[str, int]] = set()
        for topic in body.topics:
            for p in topic.partitions:
                key = (topic.name, int(p.partition_index))
                if key in wanted:
                    duplicates.add(key)
                wanted[key] = None if p.replicas is None else tuple(int(r) for r in p.replicas)

        def answer(error: ErrorCode, message: str | None,
                   per_partition: dict[tuple[str, int], tuple[ErrorCode, str | None]]) -> Any:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for (name, index), (code, text) in per_partition.items():
                by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code, "error_message": text})
            return respond(request, {
                "throttle_time": NO_THROTTLE, "error_code": error, "error_message": message,
                "responses": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
            })

        refusal = self._refusal(request, AclOperation.ALTER)
        if refusal is not None:
            return answer(*refusal, {})
        controller = self.context.controller
        assert controller is not None  # checked by _refusal
        results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {
            key: (ErrorCode.invalid_request, "the partition is named more than once") for key in duplicates}
        todo = {key: target for key, target in wanted.items() if key not in duplicates}
        started = time.perf_counter()
        try:
            outcomes = await asyncio.to_thread(
                self.reassignments.alter, todo, controller.controller_epoch,
                allow_replication_factor_change=getattr(body, "allow_replication_factor_change", True))
        except meta_errors.FencedControllerError:
            return answer(ErrorCode.not_controller, "the controller lease moved on", {})
        except meta_errors.MetadataError as exc:
            return answer(ErrorCode.request_timed_out, str(exc), {})
        # A move whose targets are already in the ISR completes at once, and may give the partition a
        # new leader (its leader not among the targets): counted as the controller's elections are.
        self.context.metrics.elections_done(
            {"reassignment": self.context.image.leader_changes(
                outcome for outcome in outcomes.values() if not isinstance(outcome, Refused))},
            time.perf_counter() - started)
        changed = []
        for key, outcome in outcomes.items():
            if isinstance(outcome, Refused):
                results[key] = (_REFUSAL_CODES[outcome.reason], outcome.message)
            else:
                results[key] = (ErrorCode.none, None)
                target = "cancelled" if todo[key] is None else f"-> {list(todo[key] or ())}"
                changed.append(f"{key[0]}-{key[1]} {target}")
        if changed:
            log.info("principal %s from %s: partition reassignment: %s", request.principal, request.client_host,
                     ", ".join(changed))
            await self.context.refresh_metadata()
        ordered = {key: results[key] for key in wanted}
        return answer(ErrorCode.none, None, ordered)

    async def list_partition_reassignments(self, request: Request) -> Any:
        body = request.body

        def answer(error: ErrorCode, message: str | None, topics: list[dict[str, Any]]) -> Any:
            return respond(request, {"throttle_time": NO_THROTTLE, "error_code": error, "error_message": message,
                                     "topics": topics})

        refusal = self._refusal(request, AclOperation.DESCRIBE)
        if refusal is not None:
            return answer(*refusal, [])
        wanted = None if body.topics is None else [
            (t.name, int(p)) for t in body.topics for p in t.partition_indexes]
        try:
            ongoing = await asyncio.to_thread(self.reassignments.ongoing, wanted)
        except meta_errors.MetadataError as exc:
            return answer(ErrorCode.request_timed_out, str(exc), [])
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for state in ongoing:
            by_topic.setdefault(state.topic, []).append({
                "partition_index": state.partition, "replicas": list(state.replicas),
                "adding_replicas": list(state.adding_replicas), "removing_replicas": list(state.removing_replicas)})
        return answer(ErrorCode.none, None, [{"name": name, "partitions": parts} for name, parts in by_topic.items()])
