"""What an append writes, decided before a byte of it reaches a segment (sans-I/O).

`PartitionLog.append` and `append_as_follower` hand their input to this module first: every batch
is checked (header, max.message.bytes, CRC-32C, and for a leader the decompressed size of a
compressed batch) and, for a leader append, given its offsets and
leader epoch as patched copies of its first bytes; for a follower append, checked for contiguous
offsets and non-decreasing leader epochs. Any failure raises before the log is touched, so nothing
partial is ever written. The result lists the buffers to write and the per-batch facts the segment
indexes; the caller picks the segment and writes them.
"""

from __future__ import annotations

from typing import NamedTuple

from broker_core.records.batch import MIN_RECORD_BYTES, decode_batch
from broker_core.records.compression import decompressed_size
from broker_core.records.errors import CorruptBatchError, CorruptCompressionError, DecompressionLimitError
from broker_core.records.header import (
    HEADER_SIZE,
    OUTSIDE_CRC_PREFIX,
    BatchHeader,
    Compression,
    TimestampType,
    parse_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    verify_crc,
)

from .errors import (
    LeaderEpochOutOfOrderError,
    OffsetsOutOfOrderError,
    RecordTooLargeError,
    RecordWithoutKeyError,
)
from .segment import AppendedBatch

Buffer = bytes | bytearray | memoryview


class AppendInfo(NamedTuple):
    """What an append wrote: offsets ``base_offset``..``last_offset`` in ``num_batches`` batches.

    ``log_append_time`` is the time stamped into LogAppendTime batches, -1 for CreateTime.
    ``offset_of_max_timestamp`` is the last offset of the first batch carrying ``max_timestamp``.
    An empty append writes nothing and reports ``last_offset = base_offset - 1``.
    """

    base_offset: int
    last_offset: int
    log_append_time: int
    max_timestamp: int
    offset_of_max_timestamp: int
    num_batches: int
    size_bytes: int


def empty_append(log_end_offset: int) -> AppendInfo:
    """The report of an append that carried no batch: nothing written at the log end."""
    return AppendInfo(log_end_offset, log_end_offset - 1, -1, -1, -1, 0, 0)


class ValidatedBatches(NamedTuple):
    """Batches that passed `validate_batches`: their bytes and the (position, header) of each, in order.

    The partition's producer-state checks read the headers from here, so a request's batch headers
    are parsed once on the way to the log.
    """

    view: memoryview
    batches: list[tuple[int, BatchHeader]]

    def headers(self) -> list[BatchHeader]:
        return [header for _, header in self.batches]


def validate_batches(
    records: Buffer, max_message_bytes: int, max_decompressed_bytes: int | None = None
) -> ValidatedBatches:
    """Check every batch (header, size limit, CRC) of ``records``, first to last; raise on the first bad one.

    With ``max_decompressed_bytes`` (a leader's check of what a client sent), each compressed batch is
    also decompressed as a stream whose output is counted and dropped: DecompressionLimitError when it
    would pass that many bytes, CorruptCompressionError when it does not decompress, CorruptBatchError
    when it is too short to hold the records its header declares. Records themselves are not decoded.
    """
    view = memoryview(records).cast("B")
    batches = []
    position = 0
    end = len(view)
    while position < end:
        header = parse_header(view, position)
        if header.size > max_message_bytes:
            raise RecordTooLargeError(size=header.size, max_size=max_message_bytes, position=position)
        verify_crc(view, header, position)
        if max_decompressed_bytes is not None and header.compression is not Compression.NONE:
            _check_decompressed_size(view, position, header, max_decompressed_bytes)
        batches.append((position, header))
        position += header.size
    return ValidatedBatches(view, batches)


def _check_decompressed_size(view: memoryview, position: int, header: BatchHeader, limit: int) -> None:
    section = view[position + HEADER_SIZE : position + header.size]
    try:
        size = decompressed_size(header.compression, section, limit=limit)
    except DecompressionLimitError as error:
        raise DecompressionLimitError(
            codec=header.compression, limit=limit, position=position + HEADER_SIZE, base_offset=header.base_offset
        ) from error
    except CorruptCompressionError as error:
        raise CorruptCompressionError(
            error.reason, position=position + HEADER_SIZE + error.position, codec=header.compression
        ) from error
    if size < header.records_count * MIN_RECORD_BYTES:
        raise CorruptBatchError(
            f"{header.records_count} records declared in {size} decompressed bytes", position=position
        )


def check_keys(view: memoryview, batches: list[tuple[int, BatchHeader]], max_decompressed_bytes: int) -> None:
    """A compacted topic's rule (Kafka's LogValidator): every record of a data batch carries a key.

    Raises RecordWithoutKeyError naming the first keyless record; control batches are not checked.
    """
    for position, header in batches:
        if header.is_control:
            continue
        decoded = decode_batch(view, position, verify_crc=False, max_decompressed_bytes=max_decompressed_bytes)
        for number, record in enumerate(decoded.records):
            if record.key is None:
                raise RecordWithoutKeyError(position=position, base_offset=header.base_offset, record_index=number)


class LeaderAppend(NamedTuple):
    """A leader append ready to write: ``parts`` back to back are the batches with their offsets assigned."""

    parts: list[bytearray | memoryview]
    batches: list[AppendedBatch]
    info: AppendInfo


def prepare_leader_append(
    view: memoryview,
    batches: list[tuple[int, BatchHeader]],
    *,
    base_offset: int,
    leader_epoch: int,
    log_append_time: int,
) -> LeaderAppend:
    """Assign offsets from ``base_offset`` and stamp ``leader_epoch`` (and ``log_append_time`` when >= 0).

    The input is not modified: each batch becomes a patched copy of its first bytes (baseOffset,
    batchLength, partitionLeaderEpoch) followed by the rest of it as given. With a LogAppendTime the
    timestamp type, max timestamp and CRC change too, so those batches are copied whole. Raises
    CorruptBatchError when a batch's record count does not match its offset range.
    """
    # The patched copies are private until written, so a check failing halfway through leaves
    # nothing behind.
    parts: list[bytearray | memoryview] = []
    described: list[AppendedBatch] = []
    next_offset = base_offset
    max_timestamp, offset_of_max = -1, -1
    for position, header in batches:
        if header.records_count != header.last_offset_delta + 1:
            raise CorruptBatchError(
                f"record count {header.records_count} does not match lastOffsetDelta {header.last_offset_delta}",
                position=position,
            )
        end = position + header.size
        head = bytearray(view[position:end if log_append_time >= 0 else position + OUTSIDE_CRC_PREFIX])
        set_base_offset(head, 0, next_offset)
        set_partition_leader_epoch(head, 0, leader_epoch)
        parts.append(head)
        last_offset = next_offset + header.last_offset_delta
        if log_append_time >= 0:
            set_log_append_time(head, 0, header.size, log_append_time)
            batch_max_timestamp = log_append_time
        else:
            parts.append(view[position + OUTSIDE_CRC_PREFIX:end])
            batch_max_timestamp = header.max_timestamp
        if batch_max_timestamp > max_timestamp:
            max_timestamp, offset_of_max = batch_max_timestamp, last_offset
        described.append((position, header.size, last_offset, batch_max_timestamp))
        next_offset = last_offset + 1
    info = AppendInfo(
        base_offset, next_offset - 1, log_append_time, max_timestamp, offset_of_max, len(batches), len(view)
    )
    return LeaderAppend(parts, described, info)


class FollowerAppend(NamedTuple):
    """A follower append ready to write as given, with the leader epochs it starts (epoch, start offset)."""

    batches: list[AppendedBatch]
    new_epochs: list[tuple[int, int]]
    info: AppendInfo


def check_follower_append(
    view: memoryview,
    batches: list[tuple[int, BatchHeader]],
    *,
    log_end_offset: int,
    latest_epoch: int | None,
    topic: str,
    partition: int,
    allow_gaps: bool = False,
) -> FollowerAppend:
    """Check replicated ``batches`` (non-empty) against the log end and the latest leader epoch.

    The first batch must start at or above ``log_end_offset`` and each next one where the previous
    ended (with ``allow_gaps``, a compacted log's, anywhere above it), else OffsetsOutOfOrderError; epochs must not go back, else LeaderEpochOutOfOrderError.
    """
    expected = log_end_offset
    new_epochs: list[tuple[int, int]] = []
    described: list[AppendedBatch] = []
    max_timestamp, offset_of_max = -1, -1
    for position, header in batches:
        if header.base_offset < expected or (position and header.base_offset != expected and not allow_gaps):
            raise OffsetsOutOfOrderError(
                topic=topic,
                partition=partition,
                offset=header.base_offset,
                expected_offset=expected,
            )
        epoch = header.partition_leader_epoch
        if latest_epoch is not None and epoch < latest_epoch:
            raise LeaderEpochOutOfOrderError(topic=topic, partition=partition, epoch=epoch, latest_epoch=latest_epoch)
        if epoch >= 0 and epoch != latest_epoch:
            new_epochs.append((epoch, header.base_offset))
            latest_epoch = epoch
        if header.max_timestamp > max_timestamp:
            max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
        described.append((position, header.size, header.last_offset, header.max_timestamp))
        expected = header.next_offset
    first_header = batches[0][1]
    info = AppendInfo(
        base_offset=first_header.base_offset,
        last_offset=expected - 1,
        log_append_time=max_timestamp if first_header.timestamp_type is TimestampType.LOG_APPEND_TIME else -1,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max,
        num_batches=len(batches),
        size_bytes=len(view),
    )
    return FollowerAppend(described, new_epochs, info)
