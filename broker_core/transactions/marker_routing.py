"""The server side of WriteTxnMarkers (API 27) for consumer groups, in front of the partitions' side.

A transaction's markers go to the leader of each of its partitions, and, for the offsets it committed
to a group, to the group's coordinator under the group's marker partition (`MARKER_TOPIC`, the
partition `marker_partition(group_id)`), as Kafka sends them to the group's __consumer_offsets
partition. This handler answers the marker-topic entries with the group coordinator
(`GroupOffsets.complete_marker`) and passes every other topic on to the partitions' handler, when the
broker has one; without it, those partitions are answered UNKNOWN_SERVER_ERROR, so a coordinator
keeps retrying rather than believing the marker written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker_core.groups.offsets import MARKER_TOPIC, GroupOffsets
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import respond

Handler = Callable[[Request], Awaitable[Any]]


def route_write_txn_markers(groups: GroupOffsets, partitions: Handler | None) -> Handler:
    """A WriteTxnMarkers handler: group markers to ``groups``, the rest to ``partitions``."""

    async def write_txn_markers(request: Request) -> Any:
        results: dict[int, list[dict[str, Any]]] = {}
        data_markers = []
        for marker in request.body.markers:
            topics = results.setdefault(marker.producer_id, [])
            data_topics = []
            for topic in marker.topics:
                if topic.name != MARKER_TOPIC:
                    data_topics.append(topic)
                    continue
                answered = [{"partition_index": p, "error_code": await groups.complete_marker(
                    p, marker.producer_id, marker.transaction_result)} for p in topic.partition_indexes]
                topics.append({"name": topic.name, "partitions": answered})
            if data_topics:
                data_markers.append(dataclasses.replace(marker, topics=tuple(data_topics)))
        if data_markers:
            if partitions is not None:
                answer = await partitions(dataclasses.replace(
                    request, body=dataclasses.replace(request.body, markers=tuple(data_markers))))
                for marker in answer.markers:
                    results.setdefault(marker.producer_id, []).extend(
                        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                          "error_code": p.error_code} for p in t.partitions]}
                        for t in marker.topics)
            else:
                for marker in data_markers:
                    results[marker.producer_id].extend(
                        {"name": t.name, "partitions": [{"partition_index": p, "error_code": ErrorCode.unknown_server_error}
                                                        for p in t.partition_indexes]} for t in marker.topics)
        return respond(request, {"markers": [{"producer_id": pid, "topics": topics} for pid, topics in results.items()]})

    return write_txn_markers
