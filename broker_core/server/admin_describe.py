"""DescribeCluster (API 60), DescribeLogDirs (35) and DescribeProducers (61): what admin tools read about
the cluster, a broker's disks and a partition's idempotent producers.

As Kafka answers them. DescribeCluster lists the live brokers at the listener the request came in on,
the cluster id and the controller; the cluster's authorized operations are given (a bit per
operation, as Metadata gives a topic's) only when asked for and when the principal may DESCRIBE the
cluster, else Kafka's "not asked" value; a request for the controllers' endpoints is
UNSUPPORTED_ENDPOINT_TYPE (brokers here do not expose the controller quorum). DescribeLogDirs needs
DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED for the whole answer) and reports this
broker's one data directory: the replicas it hosts of the topics asked for (all when none are named),
each with its size on disk and how far its log end is behind the high watermark, plus the disk's total
and usable bytes. DescribeProducers needs READ on the topic (else TOPIC_AUTHORIZATION_FAILED) and is
answered by the partition's leader (else NOT_LEADER_OR_FOLLOWER) from its producer state.
"""

from __future__ import annotations

import asyncio
import shutil
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, respond
from broker_core.security.acls import VALID_OPERATIONS, AclOperation, ResourceType

from .authorization import allowed, cluster_allowed

if TYPE_CHECKING:
    from .context import BrokerContext
    from .handlers import Handler
    from .partition import Partition

# Kafka's "authorized operations were not asked for" value (Integer.MIN_VALUE).
OPERATIONS_NOT_ASKED = -(2**31)
ENDPOINT_TYPE_BROKERS = 1


class ClusterDescriptions:
    """The three describe APIs of one broker (see the module doc)."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context

    def api_handlers(self) -> dict[int, Handler]:
        return {ApiKey.DESCRIBE_CLUSTER: self.describe_cluster, ApiKey.DESCRIBE_LOG_DIRS: self.describe_log_dirs,
                ApiKey.DESCRIBE_PRODUCERS: self.describe_producers}

    async def describe_cluster(self, request: Request) -> Any:
        body = request.body
        image = self.context.image
        response: dict[str, Any] = {
            "throttle_time": NO_THROTTLE, "error_code": ErrorCode.none, "error_message": None,
            "cluster_id": self.context.cluster_id, "controller_id": image.controller_id, "brokers": [],
            "cluster_authorized_operations": OPERATIONS_NOT_ASKED,
        }
        endpoint_type = getattr(body, "endpoint_type", ENDPOINT_TYPE_BROKERS)
        if request.api_version >= 1:
            response["endpoint_type"] = endpoint_type
        if endpoint_type != ENDPOINT_TYPE_BROKERS:
            response["error_code"] = ErrorCode.unsupported_endpoint_type
            response["error_message"] = "brokers answer DescribeCluster only for broker endpoints"
            return respond(request, response)
        response["brokers"] = [
            {"broker_id": b.broker_id, "host": host, "port": port, "rack": b.rack}
            for b in sorted(image.live_brokers(), key=lambda b: b.broker_id)
            for host, port in [b.endpoint(request.listener_name)]
        ]
        authorizer = self.context.authorizer
        if body.include_cluster_authorized_operations and cluster_allowed(authorizer, request, AclOperation.DESCRIBE):
            operations = 0
            for operation in VALID_OPERATIONS[ResourceType.CLUSTER] - {AclOperation.ALL}:
                if cluster_allowed(authorizer, request, operation, log_denial=False):
                    operations |= 1 << int(operation)
            response["cluster_authorized_operations"] = operations
        return respond(request, response)

    async def describe_log_dirs(self, request: Request) -> Any:
        response: dict[str, Any] = {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.none, "results": []}
        if not cluster_allowed(self.context.authorizer, request, AclOperation.DESCRIBE):
            response["error_code"] = ErrorCode.cluster_authorization_failed
            return respond(request, response)
        wanted = None
        if request.body.topics is not None:
            wanted = {(t.topic, p) for t in request.body.topics for p in t.partitions}
        hosted = sorted(self.context.replicas.partitions.items())
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), partition in hosted:
            if wanted is not None and (topic, index) not in wanted:
                continue
            by_topic.setdefault(topic, []).append({
                "partition_index": index, "partition_size": partition.log.size_bytes,
                "offset_lag": max(partition.high_watermark - partition.log_end_offset, 0), "is_future_key": False,
            })
        data_dir = self.context.replicas.data_dir.resolve()
        usage = await asyncio.to_thread(shutil.disk_usage, data_dir)
        response["results"] = [{
            "error_code": ErrorCode.none, "log_dir": str(data_dir),
            "topics": [{"name": name, "partitions": partitions} for name, partitions in sorted(by_topic.items())],
            "total_bytes": usage.total, "usable_bytes": usage.free,
        }]
        return respond(request, response)

    async def describe_producers(self, request: Request) -> Any:
        topics = []
        for topic in request.body.topics:
            may_read = allowed(self.context.authorizer, request, AclOperation.READ, ResourceType.TOPIC, topic.name)
            partitions = []
            for index in topic.partition_indexes:
                result: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.none,
                                          "error_message": None, "active_producers": []}
                partitions.append(result)
                if not may_read:
                    result["error_code"] = ErrorCode.topic_authorization_failed
                    continue
                partition = leader_replica(self.context, topic.name, index)
                if isinstance(partition, ErrorCode):
                    result["error_code"] = partition
                elif partition.producers is not None:
                    result["active_producers"] = [
                        {"producer_id": pid, "producer_epoch": entry.epoch,
                         "last_sequence": entry.batches[-1].last_sequence if entry.batches else -1,
                         "last_timestamp": -1, "coordinator_epoch": -1, "current_txn_start_offset": -1}
                        for pid, entry in sorted(partition.producers.producers.items())
                    ]
            topics.append({"name": topic.name, "partitions": partitions})
        return respond(request, {"throttle_time": NO_THROTTLE, "topics": topics})


def leader_replica(context: BrokerContext, topic: str, index: int) -> Partition | ErrorCode:
    """The replica of (topic, index) this broker leads, else the error a request for it gets."""
    image = context.image
    if topic not in image.topics or (topic, index) not in image.partitions:
        return ErrorCode.unknown_topic_or_partition
    partition = context.replicas.get(topic, index)
    if partition is None or not partition.is_leader:
        return ErrorCode.not_leader_or_follower
    return partition
