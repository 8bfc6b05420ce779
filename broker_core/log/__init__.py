"""Kafka's on-disk partition log: segments of RecordBatch v2 bytes, sparse indexes, checkpoints, recovery, retention."""

from .config import LogConfig
from .errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    LeaderEpochOutOfOrderError,
    LogError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordTooLargeError,
)
from .leader_epoch import LeaderEpochCheckpoint
from .offset_index import OffsetIndex
from .partition_log import AppendInfo, PartitionLog
from .segment import FileSlice, Segment
from .time_index import TimeIndex

__all__ = [
    "AppendInfo",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "FileSlice",
    "LeaderEpochCheckpoint",
    "LeaderEpochOutOfOrderError",
    "LogConfig",
    "LogError",
    "OffsetIndex",
    "OffsetOutOfRangeError",
    "OffsetsOutOfOrderError",
    "PartitionLog",
    "RecordTooLargeError",
    "Segment",
    "TimeIndex",
]
