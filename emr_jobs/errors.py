"""Exceptions raised by the floe Spark source and sink, one per failure mode.

Each carries the structured fields that identify what failed (option name, topic, partition,
offsets, object key and byte position), so a job's log names the exact thing to look at.
"""

from __future__ import annotations


class FloeReadError(Exception):
    """Base class of every error of the Spark reader."""


class InvalidOptionError(FloeReadError, ValueError):
    """A data source option is missing, unknown, malformed or contradicts another option."""

    def __init__(self, option: str, reason: str) -> None:
        super().__init__(f"option {option!r}: {reason}")
        self.option = option
        self.reason = reason


class UnknownPartitionError(FloeReadError):
    """An offsets option names a partition the topic does not have."""

    def __init__(self, topic: str, partition: int, num_partitions: int) -> None:
        super().__init__(f"topic {topic!r} has {num_partitions} partitions; there is no partition {partition}")
        self.topic = topic
        self.partition = partition
        self.num_partitions = num_partitions


class OffsetNotTieredError(FloeReadError):
    """A requested offset lies outside the offsets held in tiered storage for its partition.

    ``earliest`` is the base offset of the first committed remote segment and ``latest`` one past
    the last offset of the last (both equal when nothing is tiered yet). Offsets below ``earliest``
    were deleted by retention or never tiered; offsets at or above ``latest`` are not tiered yet.
    """

    bounds = "the tiered offsets [{earliest}, {latest}); the reader only reads committed data that is already in S3"

    def __init__(self, *, topic: str, partition: int, option: str, offset: int, earliest: int, latest: int) -> None:
        super().__init__(
            f"{option} offset {offset} of {topic}-{partition} is outside "
            + self.bounds.format(earliest=earliest, latest=latest)
        )
        self.topic = topic
        self.partition = partition
        self.option = option
        self.offset = offset
        self.earliest = earliest
        self.latest = latest


class OffsetOutOfRangeError(OffsetNotTieredError):
    """A requested offset lies outside a partition's log as read to its head: below its earliest
    offset (deleted by retention) or past its high watermark. Same fields as OffsetNotTieredError,
    whose bounds were the tiered ones."""

    bounds = "the log's offsets [{earliest}, {latest}] (earliest, high watermark)"


class TailReadError(FloeReadError):
    """Reading offsets past the tiered end from the brokers failed after the client's retries."""

    def __init__(self, *, topic: str, partition: int | None, offset: int | None, reason: str) -> None:
        where = topic if partition is None else f"{topic}-{partition}"
        at = "" if offset is None else f" at offset {offset}"
        super().__init__(f"{where}{at}: {reason}")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason


class SinkWriteError(FloeReadError):
    """The floe sink could not get a batch of rows acknowledged by a partition's leader."""

    def __init__(self, *, topic: str, partition: int | None, reason: str) -> None:
        where = topic if partition is None else f"{topic}-{partition}"
        super().__init__(f"writing to {where}: {reason}")
        self.topic = topic
        self.partition = partition
        self.reason = reason


class DataLossError(FloeReadError):
    """Offsets a streaming query needs are gone (retention deleted them, or the log end moved back).

    Raised when ``failOnDataLoss`` is true (the default), as Spark's Kafka source does; with
    ``failOnDataLoss=false`` the query skips to what is there and logs a warning instead.
    """

    def __init__(self, *, topic: str, partition: int, expected: int, reason: str) -> None:
        super().__init__(
            f"{topic}-{partition}: offset {expected} is needed but {reason}. Some data may have been lost; "
            "if this is expected, set the option failOnDataLoss=false to skip it"
        )
        self.topic = topic
        self.partition = partition
        self.expected = expected
        self.reason = reason


class CorruptSegmentError(FloeReadError):
    """The bytes of a tiered segment object fail to decode.

    ``position`` is the byte position in the segment's .log object; ``cause`` is the
    ``broker_core.records`` error that found the problem (its own position is relative to the
    buffer it was handed and is not meaningful here).
    """

    def __init__(self, *, object_key: str, position: int, reason: str) -> None:
        super().__init__(f"{object_key} at byte {position}: {reason}")
        self.object_key = object_key
        self.position = position
        self.reason = reason


class CorruptIndexesError(FloeReadError):
    """A segment's indexes object does not agree with its .log object or its manifest row."""

    def __init__(self, *, object_key: str, reason: str) -> None:
        super().__init__(f"{object_key}: {reason}")
        self.object_key = object_key
        self.reason = reason


class SegmentGoneError(FloeReadError):
    """A segment object the plan named is no longer in S3: remote retention deleted it after planning.

    Reading again plans from the manifest as it is now.
    """

    def __init__(self, object_key: str) -> None:
        super().__init__(f"{object_key} is gone from S3 (deleted by retention after the read was planned); read again")
        self.object_key = object_key
