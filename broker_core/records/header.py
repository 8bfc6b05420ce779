"""Header-only view of Kafka RecordBatch v2 (magic 2): the broker's hot path.

Byte layout of one batch (big-endian), as in Kafka's DefaultRecordBatch:

    offset  size  field
    0       8     baseOffset            rewritten by the broker on append (not under the CRC)
    8       4     batchLength           bytes after this field (total size - 12)
    12      4     partitionLeaderEpoch  rewritten by the broker on append (not under the CRC)
    16      1     magic                 always 2
    17      4     crc                   CRC-32C (Castagnoli) of bytes [21, end of batch)
    21      2     attributes            bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control
    23      4     lastOffsetDelta
    27      8     baseTimestamp
    35      8     maxTimestamp
    43      8     producerId
    51      2     producerEpoch
    53      4     baseSequence
    57      4     recordsCount
    61      ...   records (compressed as a whole when the codec is not none)

Nothing here decodes records; parsing a header reads 61 bytes and never copies the batch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

import crc32c

from .errors import (
    CorruptBatchError,
    CorruptCrcError,
    TruncatedBatchError,
    UnknownCodecError,
    UnsupportedMagicError,
)

BATCH_HEADER = struct.Struct(
    ">q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc (unsigned)
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordsCount
)
HEADER_SIZE = BATCH_HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
# baseOffset, batchLength and partitionLeaderEpoch: the leading bytes outside the CRC, which hold
# everything a leader rewrites in a CreateTime batch.
OUTSIDE_CRC_PREFIX = MAGIC_OFFSET
CURRENT_MAGIC = 2

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61 fixed bytes at the start of a RecordBatch v2."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_MASK else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        # Sequences wrap at Int32.MAX like Kafka's DefaultRecordBatch.incrementSequence.
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse and sanity-check the header of the batch at ``position``; the CRC is not checked.

    Raises TruncatedBatchError when fewer than 61 bytes (or fewer than the batch's own length) remain,
    UnsupportedMagicError, UnknownCodecError, or CorruptBatchError for an impossible length.
    """
    available = len(buf) - position
    if available < HEADER_SIZE:
        raise TruncatedBatchError(position=position, needed=HEADER_SIZE, available=available)
    fields = BATCH_HEADER.unpack_from(buf, position)
    header = BatchHeader(*fields)
    if header.magic != CURRENT_MAGIC:
        raise UnsupportedMagicError(position=position, magic=header.magic)
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatchError(f"batch length {header.batch_length} is shorter than a header", position=position)
    if header.size > available:
        raise TruncatedBatchError(position=position, needed=header.size, available=available)
    if header.attributes & COMPRESSION_MASK > Compression.ZSTD:
        raise UnknownCodecError(position=position, codec=header.attributes & COMPRESSION_MASK)
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptBatchError(
            f"negative lastOffsetDelta {header.last_offset_delta} or record count {header.records_count}",
            position=position,
        )
    return header


def compute_crc(buf: bytes | bytearray | memoryview, position: int, size: int) -> int:
    """CRC-32C over the CRC-covered region of the batch of ``size`` bytes at ``position``."""
    view = memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size]
    return crc32c.crc32c(view)


def verify_crc(buf: bytes | bytearray | memoryview, header: BatchHeader, position: int = 0) -> None:
    """Raise CorruptCrcError unless the stored CRC matches the bytes."""
    actual = compute_crc(buf, position, header.size)
    if actual != header.crc:
        raise CorruptCrcError(position=position, expected=header.crc, actual=actual)


def iter_headers(
    buf: bytes | bytearray | memoryview, *, check_crc: bool = False, start: int = 0
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each whole batch in ``buf``; raise on the first bad one.

    A trailing partial batch raises TruncatedBatchError, as does any corrupt batch its own error.
    """
    position = start
    end = len(buf)
    while position < end:
        header = parse_header(buf, position)
        if check_crc:
            verify_crc(buf, header, position)
        yield position, header
        position += header.size


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Rewrite baseOffset in place; it is outside the CRC so the CRC stays valid."""
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place; it is outside the CRC so the CRC stays valid."""
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray | memoryview, position: int, size: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` as its max timestamp and recompute the CRC.

    Both fields are under the CRC, so unlike the offset rewrite this costs one CRC pass over the batch.
    """
    attributes = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)[0]
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    _UINT32.pack_into(buf, position + CRC_OFFSET, compute_crc(buf, position, size))
