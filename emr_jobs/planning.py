"""Turn the options and the manifest into Spark input partitions: one per segment or per byte range.

Planning runs once, on the driver, before any record is read. For each partition of the topic it
resolves the offsets to read, ``[start, end)``, against the tiered data (the manifest's committed
segments, never before the log start DeleteRecords set) and then cuts every segment that overlaps
that range into byte ranges of the .log object. A range always starts and ends at a batch boundary
taken from the segment's offset index (or at 0 or the object's size), so the executors' ranged GETs
never split a batch, and every batch is read by exactly one input partition. Segments read whole
and not larger than ``maxBytesPerPartition`` need no indexes object; the others cost one small GET
each.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from emr_jobs.errors import (
    InvalidOptionError,
    OffsetNotTieredError,
    OffsetOutOfRangeError,
    UnknownPartitionError,
)
from emr_jobs.options import EARLIEST, LATEST, ReadOptions
from tiered_storage.indexes import SegmentIndexes
from tiered_storage.manifest import RemoteSegment


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start_offset, end_offset)`` of one partition to read."""

    partition: int
    start_offset: int
    end_offset: int


@dataclass(frozen=True)
class SegmentRead(InputPartition):
    """One Spark input partition: bytes ``[byte_start, byte_end)`` of one segment's .log object.

    Only records with ``start_offset <= offset < end_offset`` are returned from it, and none of the
    ``aborted`` transactions (producer id, first offset, last offset) of a read_committed read.
    """

    topic: str
    partition: int
    log_key: str
    byte_start: int
    byte_end: int
    start_offset: int
    end_offset: int
    aborted: tuple[tuple[int, int, int], ...] = ()


def tiered_bounds(segments: Sequence[RemoteSegment], log_start_offset: int = 0) -> tuple[int, int]:
    """(earliest, latest) tiered offsets of a partition: first base offset (or the log start
    DeleteRecords set, when above it), one past the last offset.

    ``segments`` are the readable ones (`RemoteLog.readable`). (0, 0) when nothing is tiered.
    """
    if not segments:
        return 0, 0
    return max(segments[0].base_offset, log_start_offset), segments[-1].end_offset + 1


def check_partitions(options: ReadOptions, num_partitions: int) -> None:
    """Raise UnknownPartitionError if an offsets option names a partition the topic lacks."""
    for bound in (options.starting_offsets, options.ending_offsets):
        for partition in sorted(bound.per_partition):
            if partition >= num_partitions:
                raise UnknownPartitionError(options.topic, partition, num_partitions)


def resolve_offsets(
    options: ReadOptions,
    partition: int,
    segments: Sequence[RemoteSegment],
    offset_for_timestamp: Callable[[int], int | None],
    log_bounds: tuple[int, int] | None = None,
    log_start_offset: int = 0,
) -> OffsetRange:
    """The offsets of ``partition`` to read, given its committed segments.

    ``offset_for_timestamp(t)`` answers Kafka's ListOffsets by timestamp (None when no record
    reaches ``t``); a timestamp no record reaches resolves to latest. Without ``log_bounds``,
    earliest and latest are the tiered bounds; with them (earliest, high watermark, when the tail
    is read from the brokers) they are the log's. Neither is below ``log_start_offset``.
    """
    earliest, latest = tiered_bounds(segments, log_start_offset) if log_bounds is None else log_bounds
    earliest = max(earliest, log_start_offset)

    def explicit(option: str, offset: int) -> int:
        if offset == EARLIEST:
            return earliest
        if offset == LATEST:
            return latest
        if not earliest <= offset <= latest:
            if log_bounds is not None:
                raise OffsetOutOfRangeError(
                    topic=options.topic, partition=partition, option=option, offset=offset, earliest=earliest,
                    latest=latest,
                )
            raise OffsetNotTieredError(
                topic=options.topic, partition=partition, option=option, offset=offset, earliest=earliest, latest=latest
            )
        return offset

    def by_timestamp(timestamp: int) -> int:
        found = offset_for_timestamp(timestamp)
        return latest if found is None else found

    if options.starting_timestamp is not None:
        start = by_timestamp(options.starting_timestamp)
    else:
        start = explicit("startingOffsets", options.starting_offsets.for_partition(partition))
    if options.ending_timestamp is not None:
        end = by_timestamp(options.ending_timestamp)
    else:
        end = explicit("endingOffsets", options.ending_offsets.for_partition(partition))
    if end < start:
        raise InvalidOptionError(
            "endingOffsets", f"partition {partition} would end at offset {end}, before its start at offset {start}"
        )
    return OffsetRange(partition, start, end)


def plan_segment_reads(
    topic: str,
    offsets: OffsetRange,
    segments: Sequence[RemoteSegment],
    max_bytes_per_partition: int,
    load_indexes: Callable[[RemoteSegment], SegmentIndexes],
    *,
    read_committed: bool = False,
) -> list[SegmentRead]:
    """The input partitions covering ``offsets`` of one partition, in offset order; with
    ``read_committed`` each carries the aborted transactions overlapping its segment."""
    reads = []
    for segment in segments:
        if segment.end_offset < offsets.start_offset or segment.base_offset >= offsets.end_offset:
            continue
        aborted = tuple(
            (e.producer_id, e.first_offset, e.last_offset)
            for e in load_indexes(segment).aborted_between(segment.base_offset, segment.end_offset + 1)
        ) if read_committed else ()
        cut_start = offsets.start_offset > segment.base_offset
        cut_end = offsets.end_offset <= segment.end_offset
        if not (cut_start or cut_end or segment.size_bytes > max_bytes_per_partition):
            boundaries = [0, segment.size_bytes]
        else:
            indexes = load_indexes(segment)
            byte_start = indexes.position_for_offset(offsets.start_offset) if cut_start else 0
            byte_end = _position_after(indexes, offsets.end_offset - 1, segment.size_bytes) if cut_end else segment.size_bytes
            boundaries = _split(byte_start, byte_end, indexes.positions, max_bytes_per_partition)
        for byte_start, byte_end in zip(boundaries, boundaries[1:], strict=False):
            reads.append(
                SegmentRead(
                    topic=topic,
                    partition=offsets.partition,
                    log_key=segment.log_key,
                    byte_start=byte_start,
                    byte_end=byte_end,
                    start_offset=offsets.start_offset,
                    end_offset=offsets.end_offset,
                    aborted=aborted,
                )
            )
    return reads


def _position_after(indexes: SegmentIndexes, offset: int, size: int) -> int:
    """A batch boundary at or after the end of the batch holding ``offset``.

    Index entry i says the batch at ``positions[i]`` ends at ``offsets[i]``. The first entry ending
    at or after ``offset`` may hold it; the next indexed batch starts after it either way.
    """
    entry = bisect.bisect_left(indexes.offsets, offset)
    return indexes.positions[entry + 1] if entry + 1 < len(indexes.positions) else size


def _split(start: int, end: int, positions: Sequence[int], max_bytes: int) -> list[int]:
    """Boundaries from ``start`` to ``end``, cut at indexed positions so that each piece is at most
    ``max_bytes`` long where the index allows; a piece with no indexed position within ``max_bytes``
    of its start runs to the first one after."""
    cuts = positions[bisect.bisect_right(positions, start) : bisect.bisect_left(positions, end)]
    boundaries = [start]
    farthest_fitting = None
    index = 0
    while index < len(cuts):
        position = cuts[index]
        if position - boundaries[-1] <= max_bytes:
            farthest_fitting = position
            index += 1
            continue
        if farthest_fitting is None:
            boundaries.append(position)
            index += 1
        else:
            boundaries.append(farthest_fitting)
        farthest_fitting = None
    if end - boundaries[-1] > max_bytes and farthest_fitting is not None:
        boundaries.append(farthest_fitting)
    boundaries.append(end)
    return boundaries
