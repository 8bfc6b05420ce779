"""DeleteRecords (API 21): moving a partition's log start offset up, as `kafka-delete-records` does.

The request goes to each partition's leader (as clients send it). Per partition, as Kafka answers:
DELETE on the topic is needed (else TOPIC_AUTHORIZATION_FAILED); a topic or partition the cluster
lacks is UNKNOWN_TOPIC_OR_PARTITION, a replica that does not lead here NOT_LEADER_OR_FOLLOWER; the
offset -1 means the high watermark, and an offset below -1 or above the high watermark is
OFFSET_OUT_OF_RANGE with nothing moved. An offset at or below the log start changes nothing.

The leader moves its log start (checkpointed in the partition directory, so it survives a restart)
and deletes the segments wholly below it (`PartitionLog.delete_records_before`, the same path as
retention). Followers learn the new log start from the leader's fetch responses and move theirs on
their next fetch (the replica fetcher calls the same method), so every replica converges; the answer's
low watermark is the leader's new log start. Consumers fetching below it get OFFSET_OUT_OF_RANGE and
reset as their auto.offset.reset says.

Tiered topics (remote.storage.enable=true) are refused with POLICY_VIOLATION: their history in S3 has
no log start of its own in the manifest yet, so moving only the local start would leave the deleted
records readable from S3.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.log.errors import OffsetOutOfRangeError
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, respond
from broker_core.security.acls import AclOperation, ResourceType
from broker_core.settings import effective

from .admin_describe import leader_replica
from .authorization import allowed

if TYPE_CHECKING:
    from .context import BrokerContext
    from .handlers import Handler

log = logging.getLogger(__name__)

# DeleteRecords' offset meaning "up to the high watermark".
HIGH_WATERMARK = -1
NO_LOW_WATERMARK = -1


class RecordDeletion:
    """The DeleteRecords API of one broker (see the module doc)."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context

    def api_handlers(self) -> dict[int, Handler]:
        return {ApiKey.DELETE_RECORDS: self.delete_records}

    async def delete_records(self, request: Request) -> Any:
        topics = []
        for topic in request.body.topics:
            may_delete = allowed(self.context.authorizer, request, AclOperation.DELETE, ResourceType.TOPIC, topic.name)
            partitions = []
            for p in topic.partitions:
                if may_delete:
                    error, low_watermark = self._delete(request, topic.name, p.partition_index, p.offset)
                else:
                    error, low_watermark = ErrorCode.topic_authorization_failed, NO_LOW_WATERMARK
                partitions.append({"partition_index": p.partition_index, "low_watermark": low_watermark,
                                   "error_code": error})
            topics.append({"name": topic.name, "partitions": partitions})
        return respond(request, {"throttle_time": NO_THROTTLE, "topics": topics})

    def _delete(self, request: Request, topic: str, index: int, offset: int) -> tuple[ErrorCode, int]:
        partition = leader_replica(self.context, topic, index)
        if isinstance(partition, ErrorCode):
            return partition, NO_LOW_WATERMARK
        if effective(self.context.image.topics[topic].configs, self.context.config, "remote.storage.enable") == "true":
            log.info("refused DeleteRecords on tiered %s-%d from %s", topic, index, request.client_host)
            return ErrorCode.policy_violation, NO_LOW_WATERMARK
        high_watermark = partition.high_watermark
        target = high_watermark if offset == HIGH_WATERMARK else offset
        if target < 0 or target > high_watermark:
            log.info("refused DeleteRecords of %s-%d below %d (high watermark %d) from %s", topic, index, offset,
                     high_watermark, request.client_host)
            return ErrorCode.offset_out_of_range, NO_LOW_WATERMARK
        before = partition.log_start_offset
        try:
            low_watermark = partition.log.delete_records_before(target)
        except OffsetOutOfRangeError:
            return ErrorCode.offset_out_of_range, NO_LOW_WATERMARK
        if low_watermark > before:
            log.info("principal %s from %s deleted records of %s-%d below %d", request.principal,
                     request.client_host, topic, index, low_watermark)
        return ErrorCode.none, low_watermark
