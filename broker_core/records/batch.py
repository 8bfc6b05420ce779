"""Build and decode whole Kafka RecordBatch v2 batches, records included, without any I/O.

header.py reads the 61-byte batch header alone, which is all the broker's produce path needs. This
module is for everything that needs the records themselves: clients, tests, the Lambda fetch path and
the Spark reader. After the header (layout in header.py) comes the records section, compressed as a
whole when the batch names a codec (see compression.py). Each record, as Kafka's DefaultRecord:

    field           encoding  meaning
    length          varint    bytes of the record after this field
    attributes      int8      unused, written 0
    timestampDelta  varlong   timestamp - batch baseTimestamp
    offsetDelta     varint    offset - batch baseOffset
    keyLength       varint    -1 for a null key
    key             bytes
    valueLength     varint    -1 for a null value
    value           bytes
    headerCount     varint
    headers         headerCount x (keyLength varint, key UTF-8 (never null), valueLength varint
                    (-1 for null), value bytes)

Records are handed to users with absolute offsets and timestamps. In a LogAppendTime batch every
record's timestamp is the batch's maxTimestamp, as Kafka reports it. Decoding reads through
memoryviews of the caller's buffer, so an uncompressed batch is never copied; only keys, values and
header values become bytes objects. Every decode error names its byte position in the caller's
buffer, and record errors also the index of the record within its batch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import crc32c

from broker_core.clock import wall_clock_ms

from .compression import DEFAULT_MAX_DECOMPRESSED_BYTES, as_codec, compress, decompress
from .errors import (
    CorruptCompressedRecordError,
    CorruptCompressionError,
    CorruptRecordError,
    CorruptVarintError,
    DecompressionLimitError,
    TruncatedBatchError,
)
from .header import (
    CONTROL_MASK,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    Compression,
    TimestampType,
    parse_header,
)
from .header import verify_crc as verify_batch_crc
from .varint import INT32_MAX, decode_varint, decode_varlong, write_varint, write_varlong

Buffer = bytes | bytearray | memoryview
RecordHeaders = tuple[tuple[str, bytes | None], ...]

# The smallest record: length, attributes, timestampDelta, offsetDelta, keyLength, valueLength and
# headerCount, one byte each. A batch declaring n records holds at least n times this many bytes of
# records, so a reader can refuse an absurd declared count before sizing anything by it.
MIN_RECORD_BYTES = 7

# The header split at the CRC: the fields before it are outside the CRC, the fields after it under it.
_UNCHECKED_PREFIX = struct.Struct(
    ">q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc
)
_CRC_COVERED_HEADER = struct.Struct(
    ">h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordsCount
)


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record: absolute offset and timestamp; null and empty kept apart everywhere."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: RecordHeaders = ()


@dataclass(frozen=True, slots=True)
class SimpleRecord:
    """A record to write. ``timestamp`` None means the time of building; ``offset_delta`` None means
    one past the previous record's (0 for the first)."""

    key: bytes | None = None
    value: bytes | None = None
    headers: Iterable[tuple[str, bytes | None]] = ()
    timestamp: int | None = None
    offset_delta: int | None = None


# A decoded Record can be written back as is: its offset becomes offset - base_offset.
RecordInput = SimpleRecord | Record


@dataclass(frozen=True, slots=True)
class EncodedRecords:
    """Records already encoded as a RecordBatch v2 records section (uncompressed): ``count`` records at
    offset deltas 0 to count - 1, each with timestamp delta 0 from ``timestamp``. Writers that encode
    records in bulk (the Spark sink's native kernels) hand these to `build_batch` in place of records;
    ``len()`` is the record count, as for a list of records."""

    section: bytes | bytearray | memoryview
    count: int
    timestamp: int

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A batch's header and its records; ``position`` is where the batch starts in the buffer."""

    position: int
    header: BatchHeader
    records: list[Record]


def build_batch(
    records: Iterable[RecordInput] | EncodedRecords,
    *,
    compression: Compression | int = Compression.NONE,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode ``records`` as one RecordBatch v2, computing lastOffsetDelta, maxTimestamp and the CRC.

    ``base_timestamp`` defaults to the first record's timestamp, as Kafka's producer writes it. A
    LogAppendTime batch takes ``log_append_time`` (default: now) as its maxTimestamp. Raises
    ValueError for an empty ``records``, offset deltas that do not strictly increase from 0 or more,
    or a field outside its type's range; UnknownCodecError for an unknown ``compression``.
    """
    codec = as_codec(compression)
    timestamp_type = TimestampType(timestamp_type)
    now_ms = wall_clock_ms()
    if isinstance(records, EncodedRecords):
        if records.count < 1:
            raise ValueError("a batch needs at least one record")
        if base_timestamp is not None and base_timestamp != records.timestamp:
            raise ValueError("encoded records carry their own base timestamp")
        records_section: bytes | bytearray | memoryview = records.section
        base_timestamp = records.timestamp
        last_offset_delta, count = records.count - 1, records.count
    else:
        resolved = _resolve_records(records, base_offset, now_ms)
        if not resolved:
            raise ValueError("a batch needs at least one record")
        if base_timestamp is None:
            base_timestamp = resolved[0][1]
        last_offset_delta, count = resolved[-1][0], len(resolved)
        records_section = bytearray()
        for offset_delta, timestamp, key, value, headers in resolved:
            _write_record(records_section, offset_delta, timestamp - base_timestamp, key, value, headers)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        max_timestamp = now_ms if log_append_time is None else log_append_time
    elif log_append_time is not None:
        raise ValueError("log_append_time only applies to a LogAppendTime batch")
    elif isinstance(records, EncodedRecords):
        max_timestamp = records.timestamp
    else:
        max_timestamp = max(timestamp for _, timestamp, _, _, _ in resolved)

    payload = (
        records_section
        if codec is Compression.NONE
        else compress(codec, records_section, level=compression_level)
    )

    attributes = codec.value
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    try:
        covered_header = _CRC_COVERED_HEADER.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        crc = crc32c.crc32c(payload, crc32c.crc32c(covered_header))
        prefix = _UNCHECKED_PREFIX.pack(base_offset, batch_length, partition_leader_epoch, CURRENT_MAGIC, crc)
    except struct.error as error:
        raise ValueError(f"batch header field out of range: {error}") from error
    return b"".join((prefix, covered_header, payload))


def decode_batch(
    buf: Buffer,
    position: int = 0,
    *,
    verify_crc: bool = True,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> DecodedBatch:
    """Decode the whole batch that starts at ``position`` in ``buf``.

    Raises what parse_header raises, CorruptCrcError when ``verify_crc`` and the CRC-32C does not
    match, CorruptCompressionError, DecompressionLimitError (naming the base offset) when a compressed
    records section would decompress to more than ``max_decompressed_bytes``, CorruptRecordError
    (CorruptCompressedRecordError for a compressed batch) naming the record index and byte position,
    also when the records decoded are not exactly as many as the header declares.
    """
    header = parse_header(buf, position)
    if verify_crc:
        verify_batch_crc(buf, header, position)
    return _decode_records_of(buf, position, header, max_decompressed_bytes)


def iter_batches(
    buf: Buffer,
    *,
    verify_crc: bool = True,
    ignore_truncated_tail: bool = False,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Iterator[DecodedBatch]:
    """Decode each batch of a buffer of concatenated batches, in order; raise on the first bad one.

    A fetch response may end with a partial batch (the broker cuts at its byte limit); with
    ``ignore_truncated_tail`` such a tail ends the iteration instead of raising TruncatedBatchError.
    ``max_decompressed_bytes`` bounds each compressed batch, as in `decode_batch`.
    """
    position = 0
    end = len(buf)
    while position < end:
        try:
            header = parse_header(buf, position)
        except TruncatedBatchError:
            if ignore_truncated_tail:
                return
            raise
        if verify_crc:
            verify_batch_crc(buf, header, position)
        yield _decode_records_of(buf, position, header, max_decompressed_bytes)
        position += header.size


def iter_records(
    buf: Buffer,
    *,
    verify_crc: bool = True,
    include_control: bool = False,
    ignore_truncated_tail: bool = False,
) -> Iterator[Record]:
    """Every record of every batch in ``buf``, in order. Like a Kafka consumer, this skips the
    records of control batches (transaction markers) unless ``include_control``."""
    for batch in iter_batches(buf, verify_crc=verify_crc, ignore_truncated_tail=ignore_truncated_tail):
        if include_control or not batch.header.is_control:
            yield from batch.records


def _resolve_records(
    records: Iterable[RecordInput], base_offset: int, now_ms: int
) -> list[tuple[int, int, bytes | None, bytes | None, RecordHeaders]]:
    """(offset delta, timestamp, key, value, headers) per record, with defaults filled in and checked."""
    resolved = []
    previous_delta = -1
    for record in records:
        if isinstance(record, Record):
            offset_delta = record.offset - base_offset
        elif record.offset_delta is None:
            offset_delta = previous_delta + 1
        else:
            offset_delta = record.offset_delta
        if not previous_delta < offset_delta <= INT32_MAX:
            raise ValueError(
                f"record {len(resolved)}: offset delta {offset_delta} does not follow {previous_delta}"
                " (deltas must strictly increase from 0 and fit in int32)"
            )
        previous_delta = offset_delta
        timestamp = now_ms if record.timestamp is None else record.timestamp
        resolved.append((offset_delta, timestamp, record.key, record.value, tuple(record.headers)))
    return resolved


def _write_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: RecordHeaders,
) -> None:
    body = bytearray(b"\x00")  # attributes
    write_varlong(body, timestamp_delta)
    write_varint(body, offset_delta)
    _write_nullable_bytes(body, key)
    _write_nullable_bytes(body, value)
    write_varint(body, len(headers))
    for header_key, header_value in headers:
        encoded_key = header_key.encode("utf-8")
        write_varint(body, len(encoded_key))
        body += encoded_key
        _write_nullable_bytes(body, header_value)
    write_varint(out, len(body))
    out += body


def _write_nullable_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


class _MalformedRecord(Exception):
    """Raised inside record decoding with a position relative to the records section."""

    def __init__(self, reason: str, position: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.position = position


def _decode_records_of(buf: Buffer, position: int, header: BatchHeader, limit: int) -> DecodedBatch:
    section_position = position + HEADER_SIZE
    section = memoryview(buf)[section_position : position + header.size]
    codec = header.compression
    if codec is Compression.NONE:
        data: Buffer = section
    else:
        try:
            data = decompress(codec, section, limit=limit)
        except CorruptCompressionError as error:
            raise CorruptCompressionError(
                error.reason, position=section_position + error.position, codec=codec
            ) from error
        except DecompressionLimitError as error:
            raise DecompressionLimitError(
                codec=codec, limit=limit, position=section_position, base_offset=header.base_offset
            ) from error
    log_append_time = header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME else None
    records: list[Record] = []
    append = records.append
    end = len(data)
    cursor = 0
    index = 0
    try:
        while index < header.records_count:
            record, cursor = _decode_record(data, cursor, end, header, log_append_time)
            append(record)
            index += 1
        if cursor != end:
            raise _MalformedRecord(
                f"{end - cursor} bytes left after the last of {header.records_count} records", cursor
            )
    except (_MalformedRecord, CorruptVarintError) as error:
        if codec is Compression.NONE:
            raise CorruptRecordError(
                error.reason, position=section_position + error.position, record_index=index
            ) from error
        raise CorruptCompressedRecordError(
            error.reason, position=section_position, record_index=index, decompressed_position=error.position
        ) from error
    return DecodedBatch(position=position, header=header, records=records)


def _decode_record(
    data: Buffer, cursor: int, end: int, header: BatchHeader, log_append_time: int | None
) -> tuple[Record, int]:
    record_start = cursor
    length, cursor = decode_varint(data, cursor)
    if length < 0 or length > end - cursor:
        raise _MalformedRecord(
            f"record length {length} does not fit in the {end - cursor} bytes left", record_start
        )
    record_end = cursor + length
    cursor += 1  # attributes: unused by every message format so far
    timestamp_delta, cursor = decode_varlong(data, cursor)
    offset_delta, cursor = decode_varint(data, cursor)
    key, cursor = _read_nullable_bytes(data, cursor, record_end, "key")
    value, cursor = _read_nullable_bytes(data, cursor, record_end, "value")
    headers_start = cursor
    header_count, cursor = decode_varint(data, cursor)
    if header_count < 0:
        raise _MalformedRecord(f"negative header count {header_count}", headers_start)
    headers: RecordHeaders = ()
    if header_count:
        parsed_headers = []
        for _ in range(header_count):
            header_key_start = cursor
            key_length, cursor = decode_varint(data, cursor)
            if key_length < 0 or key_length > record_end - cursor:
                raise _MalformedRecord(
                    f"header key length {key_length} does not fit in the {record_end - cursor} record bytes left",
                    header_key_start,
                )
            try:
                header_key = str(data[cursor : cursor + key_length], "utf-8")
            except UnicodeDecodeError as error:
                raise _MalformedRecord(f"header key is not UTF-8: {error}", cursor) from error
            cursor += key_length
            header_value, cursor = _read_nullable_bytes(data, cursor, record_end, "header value")
            parsed_headers.append((header_key, header_value))
        headers = tuple(parsed_headers)
    if cursor != record_end:
        raise _MalformedRecord(
            f"record declares {length} bytes but its fields take {cursor - record_end + length}", record_start
        )
    timestamp = header.base_timestamp + timestamp_delta if log_append_time is None else log_append_time
    return Record(header.base_offset + offset_delta, timestamp, key, value, headers), cursor


def _read_nullable_bytes(data: Buffer, cursor: int, record_end: int, what: str) -> tuple[bytes | None, int]:
    start = cursor
    length, cursor = decode_varint(data, cursor)
    if length == -1:
        return None, cursor
    if length < -1 or length > record_end - cursor:
        raise _MalformedRecord(
            f"{what} length {length} does not fit in the {record_end - cursor} record bytes left", start
        )
    return bytes(data[cursor : cursor + length]), cursor + length
