"""CreatePartitions (API 37): adding partitions to a topic over the Kafka protocol.

As Kafka answers it, topic by topic: ALTER on the topic is needed (else TOPIC_AUTHORIZATION_FAILED); a
topic named twice is INVALID_REQUEST; a count not above the topic's is INVALID_PARTITIONS; manual
assignments of the wrong number, size, with duplicates or unknown brokers are INVALID_REPLICA_ASSIGNMENT;
a topic the cluster lacks is UNKNOWN_TOPIC_OR_PARTITION; partitions past Floe's limits (floe.max.partitions,
floe.max.replicas.per.broker, issue 22) are POLICY_VIOLATION. validate_only checks everything and writes
nothing. New partitions count against the client's controller_mutation_rate (KIP-599; v3 answers
THROTTLING_QUOTA_EXCEEDED when it is spent, older versions are throttled afterwards). The partitions are
written by `MetadataStore.add_partitions` and reach every broker with the next metadata poll; keyed
records of existing partitions then hash to other partitions, as in Kafka.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.metadata import errors as meta_errors
from broker_core.metadata.topics import PartitionLimits
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import respond
from broker_core.quotas.entities import client_identity
from broker_core.security.acls import AclOperation, ResourceType

from .authorization import allowed

if TYPE_CHECKING:
    from broker_core.quotas.service import QuotaService

    from .context import BrokerContext
    from .handlers import Handler

log = logging.getLogger(__name__)

STRICT_MUTATION_QUOTA_VERSION = 3
_ERROR_CODES: tuple[tuple[type[Exception], ErrorCode], ...] = (
    (meta_errors.UnknownTopicError, ErrorCode.unknown_topic_or_partition),
    (meta_errors.PartitionCountError, ErrorCode.invalid_partitions),
    (meta_errors.InvalidReplicaAssignmentError, ErrorCode.invalid_replica_assignment),
    (meta_errors.InvalidReplicationFactorError, ErrorCode.invalid_replication_factor),
    (meta_errors.PolicyViolationError, ErrorCode.policy_violation),
)


class PartitionCreation:
    """The CreatePartitions API of one broker (see the module doc)."""

    def __init__(self, context: BrokerContext, quotas: QuotaService) -> None:
        self.context = context
        self.quotas = quotas

    def api_handlers(self) -> dict[int, Handler]:
        return {ApiKey.CREATE_PARTITIONS: self.create_partitions}

    async def create_partitions(self, request: Request) -> Any:
        body = request.body
        if any(t.name not in self.context.image.topics for t in body.topics):
            await self.context.catch_up_metadata()  # a topic created since the last poll
        config, image = self.context.config, self.context.image
        limits = PartitionLimits(config.get_int("floe.max.partitions"), config.get_int("floe.max.replicas.per.broker"))
        existing_partitions = sum(t.num_partitions for t in image.topics.values())
        existing_replicas = sum(t.num_partitions * t.replication_factor for t in image.topics.values())
        live = len(image.live_brokers())
        quotas = self.quotas.manager
        identity = client_identity(request.client_id, request.principal)
        strict = request.api_version >= STRICT_MUTATION_QUOTA_VERSION
        names = [t.name for t in body.topics]
        results = []
        changed = False
        for topic in body.topics:
            result: dict[str, Any] = {"name": topic.name, "error_code": ErrorCode.none, "error_message": None}
            results.append(result)
            if names.count(topic.name) > 1:
                result["error_code"] = ErrorCode.invalid_request
                result["error_message"] = f"Duplicate topic {topic.name} in the request."
                continue
            if not allowed(self.context.authorizer, request, AclOperation.ALTER, ResourceType.TOPIC, topic.name):
                result["error_code"], result["error_message"] = ErrorCode.topic_authorization_failed, "Authorization failed."
                continue
            assignments = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
            described = image.topics.get(topic.name)
            try:
                if described is not None and topic.count > described.num_partitions:
                    limits.check_new_partitions(
                        existing_partitions=existing_partitions, existing_replicas=existing_replicas,
                        live_brokers=live, new_partitions=topic.count - described.num_partitions,
                        replication_factor=described.replication_factor)
                if strict and not body.validate_only and quotas.mutation_exceeded(identity):
                    result["error_code"] = ErrorCode.throttling_quota_exceeded
                    result["error_message"] = "The throttling quota has been exceeded."
                    continue
                before = await asyncio.to_thread(self.context.store.add_partitions, topic.name, int(topic.count),
                                                 assignments, validate_only=True)
                if not body.validate_only:
                    await asyncio.to_thread(self.context.store.add_partitions, topic.name, int(topic.count),
                                            assignments)
                    quotas.record_mutations(identity, topic.count - before.num_partitions)
                    changed = True
                    log.info("principal %s from %s added partitions to topic %s: %d -> %d", request.principal,
                             request.client_host, topic.name, before.num_partitions, topic.count)
                added = topic.count - before.num_partitions
                existing_partitions += added
                existing_replicas += added * before.replication_factor
            except meta_errors.MetadataError as exc:
                result["error_code"] = next((code for cls, code in _ERROR_CODES if isinstance(exc, cls)),
                                            ErrorCode.request_timed_out)
                result["error_message"] = str(exc)
        if changed:
            # From the change sequence, as the regular poll: the new partitions are in its change item.
            await self.context.refresh_metadata(unless_at=await asyncio.to_thread(self.context.store.metadata_version))
        throttle_s = quotas.mutation_throttle(identity)
        return respond(request, {"throttle_time": _throttle_time(throttle_s), "results": results})


def _throttle_time(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=int(seconds * 1000))
