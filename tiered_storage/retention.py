"""Retention of a tiered partition: which local segments may go, and which remote segments must.

With ``remote.storage.enable=true`` a partition's history has two tiers and two retention limits,
as in KIP-405. ``local.retention.ms|bytes`` bound the local log, but a local segment is deleted only
once the manifest says it is in S3 (its last offset is at or below the remote end offset): a failed
or slow upload never costs data. ``retention.ms|bytes`` bound the whole log, local plus remote, and
are enforced on the remote tier by deleting the oldest remote segments through DELETE_STARTED ->
DELETE_FINISHED (objects are deleted between the two). Whatever the limits, a remote segment wholly
below the log start DeleteRecords set in the manifest is deleted the same way. Kafka's values apply: -1 is unlimited and a
local limit of -2 means "the same as the total limit".

The decisions are pure functions of the log, the manifest rows and the clock; `apply_local_retention`
then moves the log start with `PartitionLog.delete_records_before`, which deletes the segments
wholly below it exactly as time or size retention does. It runs on the broker's event loop, the
partition log's single writer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from broker_core.log.partition_log import PartitionLog
from broker_core.settings import TOPIC_SETTINGS, BrokerOverrides, effective
from tiered_storage.manifest import RemoteSegment

REMOTE_STORAGE_ENABLE = "remote.storage.enable"
SAME_AS_TOTAL = -2


@dataclass(frozen=True, slots=True)
class TieredRetention:
    """The four retention limits of a tiered topic, -1 meaning unlimited."""

    retention_ms: int
    retention_bytes: int
    local_retention_ms: int
    local_retention_bytes: int

    @classmethod
    def resolve(cls, topic_configs: Mapping[str, str], broker: BrokerOverrides) -> TieredRetention:
        """The topic's limits: its own configs, else the broker's ``log.*`` synonyms, else Kafka's defaults."""
        retention_ms = int(effective(topic_configs, broker, "retention.ms"))
        retention_bytes = int(effective(topic_configs, broker, "retention.bytes"))
        local_ms = int(effective(topic_configs, broker, "local.retention.ms"))
        local_bytes = int(effective(topic_configs, broker, "local.retention.bytes"))
        return cls(
            retention_ms=retention_ms,
            retention_bytes=retention_bytes,
            local_retention_ms=retention_ms if local_ms == SAME_AS_TOTAL else local_ms,
            local_retention_bytes=retention_bytes if local_bytes == SAME_AS_TOTAL else local_bytes,
        )


def is_tiered(topic_configs: Mapping[str, str]) -> bool:
    return topic_configs.get(REMOTE_STORAGE_ENABLE, TOPIC_SETTINGS[REMOTE_STORAGE_ENABLE].default) == "true"


def local_deletion_point(
    log: PartitionLog, remote_end_offset: int, limits: TieredRetention, now_ms: int
) -> int | None:
    """The offset the local log may start at after local retention, or None if nothing may go.

    Oldest first, a sealed segment goes while it is wholly in S3 (last offset <= ``remote_end_offset``)
    and local.retention.ms or local.retention.bytes condemns it; the active segment always stays.
    """
    segments = log.segments
    excess = log.size_bytes - limits.local_retention_bytes if limits.local_retention_bytes >= 0 else -1
    new_start = None
    for segment, next_segment in zip(segments, segments[1:], strict=False):
        if segment.next_offset - 1 > remote_end_offset:
            break
        by_time = (
            limits.local_retention_ms >= 0 and now_ms - segment.largest_timestamp > limits.local_retention_ms
        )
        by_size = limits.local_retention_bytes >= 0 and excess - segment.size >= 0
        if not (by_time or by_size):
            break
        excess -= segment.size
        new_start = next_segment.base_offset
    if new_start is None or new_start <= log.log_start_offset:
        return None
    return new_start


def apply_local_retention(
    log: PartitionLog, remote_end_offset: int, limits: TieredRetention, now_ms: int
) -> int:
    """Delete the local segments `local_deletion_point` allows; return the local log start offset."""
    new_start = local_deletion_point(log, remote_end_offset, limits, now_ms)
    if new_start is None:
        return log.log_start_offset
    return log.delete_records_before(new_start)


def remote_segments_to_delete(
    remote: Sequence[RemoteSegment], local_only_bytes: int, limits: TieredRetention, now_ms: int,
    log_start_offset: int = 0,
) -> list[RemoteSegment]:
    """The oldest remote segments that the log start, retention.ms or retention.bytes condemn, in deletion order.

    ``remote`` are the partition's COPY_FINISHED segments by base offset; every one wholly below
    ``log_start_offset`` (DeleteRecords) goes, whatever the limits. ``local_only_bytes`` is the size
    of the local data not yet in S3, which counts towards retention.bytes (the newest data: it is
    never what goes first). A segment without timestamps ages from its upload time.
    """
    condemned = [segment for segment in remote if segment.end_offset < log_start_offset]
    remote = remote[len(condemned):]
    if limits.retention_ms < 0 and limits.retention_bytes < 0:
        return condemned
    total = sum(segment.size_bytes for segment in remote) + local_only_bytes
    excess = total - limits.retention_bytes if limits.retention_bytes >= 0 else -1
    for segment in remote:
        newest_ms = segment.max_timestamp_ms if segment.max_timestamp_ms >= 0 else segment.created_at_ms
        by_time = limits.retention_ms >= 0 and now_ms - newest_ms > limits.retention_ms
        by_size = limits.retention_bytes >= 0 and excess - segment.size_bytes >= 0
        if not (by_time or by_size):
            break
        excess -= segment.size_bytes
        condemned.append(segment)
    return condemned


def local_bytes_above(log: PartitionLog, remote_end_offset: int) -> int:
    """Bytes of the local segments holding offsets above ``remote_end_offset`` (not yet, or not wholly, tiered)."""
    return sum(segment.size for segment in log.segments if segment.next_offset - 1 > remote_end_offset)
