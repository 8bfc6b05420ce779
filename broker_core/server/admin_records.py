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

On a tiered topic (remote.storage.enable=true) the records below the new log start may live only in
S3, where the brokers, the HTTP front ends and Spark read them through the segment manifest. The
leader first records the new log start in the manifest (`RemoteReads.advance_log_start`, a
conditional write that never lowers it), then moves its local log start when the new one is above
it. Every reader of the remote tier honours the manifest's log start (OFFSET_OUT_OF_RANGE below it,
earliest = it), and the tiering service's remote retention deletes the segments wholly below it
from S3 and the manifest. If the manifest cannot be written the answer is KAFKA_STORAGE_ERROR and
nothing moved. The low watermark answered is the log start counting the remote tier.
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
from .remote_reads import RemoteStorageError

if TYPE_CHECKING:
    from .context import BrokerContext
    from .handlers import Handler
    from .partition import Partition
    from .remote_reads import RemoteReads

log = logging.getLogger(__name__)

# DeleteRecords' offset meaning "up to the high watermark".
HIGH_WATERMARK = -1
NO_LOW_WATERMARK = -1


class RecordDeletion:
    """The DeleteRecords API of one broker (see the module doc)."""

    def __init__(self, context: BrokerContext, remote_reads: RemoteReads | None = None) -> None:
        self.context = context
        self.remote_reads = remote_reads

    def api_handlers(self) -> dict[int, Handler]:
        return {ApiKey.DELETE_RECORDS: self.delete_records}

    async def delete_records(self, request: Request) -> Any:
        topics = []
        for topic in request.body.topics:
            may_delete = allowed(self.context.authorizer, request, AclOperation.DELETE, ResourceType.TOPIC, topic.name)
            partitions = []
            for p in topic.partitions:
                if may_delete:
                    error, low_watermark = await self._delete(request, topic.name, p.partition_index, p.offset)
                else:
                    error, low_watermark = ErrorCode.topic_authorization_failed, NO_LOW_WATERMARK
                partitions.append({"partition_index": p.partition_index, "low_watermark": low_watermark,
                                   "error_code": error})
            topics.append({"name": topic.name, "partitions": partitions})
        return respond(request, {"throttle_time": NO_THROTTLE, "topics": topics})

    async def _delete(self, request: Request, topic: str, index: int, offset: int) -> tuple[ErrorCode, int]:
        partition = leader_replica(self.context, topic, index)
        if isinstance(partition, ErrorCode):
            return partition, NO_LOW_WATERMARK
        tiered = effective(self.context.image.topics[topic].configs, self.context.config,
                           "remote.storage.enable") == "true"
        if tiered and self.remote_reads is None:
            log.info("refused DeleteRecords on tiered %s-%d from %s: this broker does not tier", topic, index,
                     request.client_host)
            return ErrorCode.policy_violation, NO_LOW_WATERMARK
        high_watermark = partition.high_watermark
        target = high_watermark if offset == HIGH_WATERMARK else offset
        if target < 0 or target > high_watermark:
            log.info("refused DeleteRecords of %s-%d below %d (high watermark %d) from %s", topic, index, offset,
                     high_watermark, request.client_host)
            return ErrorCode.offset_out_of_range, NO_LOW_WATERMARK
        if tiered and self.remote_reads is not None:
            return await self._delete_tiered(request, partition, self.remote_reads, target)
        before = partition.log_start_offset
        try:
            low_watermark = partition.log.delete_records_before(target)
        except OffsetOutOfRangeError:
            return ErrorCode.offset_out_of_range, NO_LOW_WATERMARK
        if low_watermark > before:
            log.info("principal %s from %s deleted records of %s-%d below %d", request.principal,
                     request.client_host, topic, index, low_watermark)
        return ErrorCode.none, low_watermark

    async def _delete_tiered(self, request: Request, partition: Partition, remote: RemoteReads,
                             target: int) -> tuple[ErrorCode, int]:
        """The manifest's log start first (what every reader of S3 honours), then the local one."""
        topic, index = partition.topic, partition.index
        try:
            before = await remote.log_start_offset(partition)
            log_start = await remote.advance_log_start(partition, target)
        except RemoteStorageError as exc:
            log.warning("DeleteRecords of %s-%d below %d: the manifest could not be written: %s", topic, index,
                        target, exc)
            return ErrorCode.kafka_storage_error, NO_LOW_WATERMARK
        local = partition.log
        # The replica may have been closed (reassigned away) while the manifest was written: then only
        # the manifest moves, which is what every reader honours.
        hosted = self.context.replicas.get(topic, index) is partition
        if hosted and log_start > local.log_start_offset:
            local.delete_records_before(min(log_start, local.log_end_offset))
        try:
            low_watermark = await remote.log_start_offset(partition)
        except RemoteStorageError:
            low_watermark = max(log_start, local.log_start_offset)
        if low_watermark > before:
            log.info("principal %s from %s deleted records of tiered %s-%d below %d", request.principal,
                     request.client_host, topic, index, low_watermark)
        return ErrorCode.none, low_watermark
