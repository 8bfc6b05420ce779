"""Kafka's retention rule: which of a partition's oldest segments retention.ms and retention.bytes condemn.

`PartitionLog.enforce_retention` asks `retention_rule` for a predicate and deletes segments from
the oldest while it holds. The rule only decides; it touches no file. A segment is condemned when
its largest timestamp is older than retention.ms, when the log without it still holds at least
retention.bytes (these two only when cleanup.policy names delete, as in Kafka), or when it lies
wholly below the log start offset, and only if it ends at or below
the high watermark and the caller's ``can_delete`` (e.g. "already uploaded to remote storage")
agrees. It is used by the log's single writer, inside one `enforce_retention` call.
"""

from __future__ import annotations

from collections.abc import Callable

from .config import LogConfig
from .segment import Segment


def retention_rule(
    config: LogConfig,
    *,
    now_ms: int,
    high_watermark: int,
    log_start_offset: int,
    size_bytes: int,
    can_delete: Callable[[Segment], bool] | None,
) -> Callable[[Segment, Segment], bool]:
    """``condemned(segment, next segment)`` for segments taken oldest first; it counts the bytes it has condemned."""
    excess = size_bytes - config.retention_bytes if config.retention_bytes >= 0 else -1
    # cleanup.policy=compact alone keeps old segments (the cleaner shrinks them); only the log start moves them.
    by_retention = config.delete

    def condemned(segment: Segment, next_segment: Segment) -> bool:
        nonlocal excess
        if next_segment.base_offset > high_watermark:
            return False
        by_time = by_retention and config.retention_ms >= 0 and now_ms - segment.largest_timestamp > config.retention_ms
        by_size = by_retention and config.retention_bytes >= 0 and excess - segment.size >= 0
        by_start = next_segment.base_offset <= log_start_offset
        if not (by_time or by_size or by_start):
            return False
        if can_delete is not None and not can_delete(segment):
            return False
        excess -= segment.size
        return True

    return condemned
