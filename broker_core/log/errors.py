"""Exceptions raised by the partition log, each naming one failure mode with structured fields.

Record-format problems found while validating appended bytes are the records package's own errors
(CorruptCrcError, TruncatedBatchError, ...) and propagate unchanged; the classes here cover what the
log adds: index files, offsets, sizes, leader epochs and checkpoint files.
"""

from __future__ import annotations

from pathlib import Path, PurePath


class LogError(Exception):
    """Base class of every partition-log error."""


class CorruptIndexError(LogError):
    """An .index or .timeindex file is inconsistent with itself or with its segment; it gets rebuilt."""

    def __init__(
        self, path: Path, reason: str, *, entry: int | None = None, offset: int | None = None
    ) -> None:
        where = "" if entry is None else f" at entry {entry}"
        at_offset = "" if offset is None else f" (offset {offset})"
        super().__init__(f"corrupt index {path}{where}{at_offset}: {reason}")
        self.path = path
        self.reason = reason
        self.entry = entry
        self.offset = offset


class OffsetsOutOfOrderError(LogError):
    """Batches appended as a follower do not continue the log: ``offset`` where ``expected_offset`` was due."""

    def __init__(self, *, topic: str, partition: int, offset: int, expected_offset: int) -> None:
        super().__init__(
            f"out of order offsets appending to {topic}-{partition}: batch starts at {offset}, "
            f"expected at least {expected_offset} and contiguous batches"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.expected_offset = expected_offset


class OffsetOutOfRangeError(LogError):
    """A read asked for an offset outside [log_start_offset, log_end_offset]."""

    def __init__(
        self, *, topic: str, partition: int, offset: int, log_start_offset: int, log_end_offset: int
    ) -> None:
        super().__init__(
            f"offset {offset} is out of range for {topic}-{partition} "
            f"[log start {log_start_offset}, log end {log_end_offset}]"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class RecordTooLargeError(LogError):
    """A batch is larger than ``max.message.bytes``; nothing of the append was written."""

    def __init__(self, *, size: int, max_size: int, position: int) -> None:
        super().__init__(f"batch of {size} bytes at byte {position} exceeds max.message.bytes {max_size}")
        self.size = size
        self.max_size = max_size
        self.position = position


class RecordWithoutKeyError(LogError):
    """A record without a key was produced to a compacted topic (Kafka's INVALID_RECORD); nothing was written."""

    def __init__(self, *, position: int, base_offset: int, record_index: int) -> None:
        super().__init__(
            f"compacted topic cannot accept a record without a key: record {record_index} of the batch "
            f"at byte {position}"
        )
        self.position = position
        self.base_offset = base_offset
        self.record_index = record_index


class LeaderEpochOutOfOrderError(LogError):
    """An append carries a leader epoch older than the log's latest one (a fenced leader or a bad follower batch)."""

    def __init__(self, *, topic: str, partition: int, epoch: int, latest_epoch: int) -> None:
        super().__init__(
            f"leader epoch {epoch} is older than the latest epoch {latest_epoch} of {topic}-{partition}"
        )
        self.topic = topic
        self.partition = partition
        self.epoch = epoch
        self.latest_epoch = latest_epoch


class CorruptCheckpointError(LogError):
    """A checkpoint file does not follow its format (version line, count line, entry lines)."""

    def __init__(self, path: Path, reason: str, *, line: int | None = None) -> None:
        where = "" if line is None else f" line {line}"
        super().__init__(f"corrupt checkpoint {path}{where}: {reason}")
        self.path = path
        self.reason = reason
        self.line = line


class CorruptTransactionIndexError(LogError):
    """A .txnindex file is not a whole number of entries or its entries go backwards."""

    def __init__(self, path: PurePath, reason: str, *, entry: int | None = None) -> None:
        where = "" if entry is None else f" at entry {entry}"
        super().__init__(f"corrupt transaction index {path}{where}: {reason}")
        self.path = path
        self.reason = reason
        self.entry = entry
