"""Decode RecordBatch v2 bytes straight into Arrow columns shaped like Spark's Kafka source.

This is the Spark reader's hot loop. ``broker_core.records.batch`` decodes one record at a time into
Python objects, which is right for clients but costs microseconds per record; here only one small
loop runs per record (walking the record-length varints to find where each record starts) and every
field after that is decoded for all records of a group of batches at once with numpy: varints by
gathering bytes at the start positions; keys, values and headers by describing their byte ranges as
an Arrow view array that Arrow's C++ cast gathers into a plain binary column. The result is one
``pyarrow.RecordBatch`` per group, with the column types Spark's Arrow conversion expects for key,
value, topic, partition, offset, timestamp, timestampType and (when asked for) headers.

Semantics are those of a Kafka consumer reading uncommitted data: control batches (transaction
markers) are skipped, a LogAppendTime batch gives every record the batch's maxTimestamp, and only
records with ``start_offset <= offset < end_offset`` are returned. Every batch's CRC-32C is verified;
bad bytes raise CorruptSegmentError naming the segment's object key and the byte position in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from broker_core.records.compression import decompress
from broker_core.records.errors import (
    CorruptCompressionError,
    CorruptCrcError,
    RecordsError,
    TruncatedBatchError,
)
from broker_core.records.header import (
    HEADER_SIZE,
    BatchHeader,
    Compression,
    TimestampType,
    parse_header,
    verify_crc,
)
from emr_jobs.errors import CorruptSegmentError

# Arrow types of the columns, as pyspark's to_arrow_schema gives them for the Kafka source schema.
HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_STRUCT))
ARROW_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
HEADERS_FIELD = pa.field("headers", HEADERS_TYPE)

# A group of batches is decoded together until it holds this many records or decompressed bytes:
# large enough that numpy's per-call cost disappears, small enough to bound a Python worker's memory
# and to keep Arrow's 32-bit binary offsets far from overflowing.
GROUP_MAX_RECORDS = 32_768
GROUP_MAX_BYTES = 16 * 1024 * 1024

_VIEW_INLINE_BYTES = 12  # Arrow view arrays hold values of up to 12 bytes inline
# Lets a varint read, or the read of a value's first 12 bytes, run past the last record unchecked.
_BUFFER_PADDING = bytes(16)
_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of the batches this module yields."""
    return pa.schema(ARROW_FIELDS + [HEADERS_FIELD] if include_headers else ARROW_FIELDS)


@dataclass(frozen=True, slots=True)
class RecordRange:
    """Which records of which partition to keep: offsets in ``[start_offset, end_offset)``."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    include_headers: bool


@dataclass(frozen=True, slots=True)
class _Section:
    """One batch's records section, ready to decode: its header, where the batch starts, its bytes."""

    header: BatchHeader
    position: int  # of the batch in its segment
    data: bytes | memoryview


def iter_arrow_batches(
    chunks: Iterable[bytes], records: RecordRange, *, object_key: str, stream_position: int = 0
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records in ``records`` from a stream of whole RecordBatch v2 batches.

    ``chunks`` may cut batches anywhere; the stream must start at a batch boundary of the segment
    object ``object_key``, at byte ``stream_position``, and end at one. Iteration stops early once a
    batch reaches ``end_offset``. Bad bytes raise CorruptSegmentError with the byte position in the
    segment.
    """
    group: list[_Section] = []
    group_records = group_bytes = 0
    pending = b""
    pending_position = stream_position  # segment position of pending[0]
    for chunk in chunks:
        buffer = pending + chunk if pending else chunk
        cursor = 0
        while True:
            try:
                header = parse_header(buffer, cursor)
            except TruncatedBatchError:
                break
            except RecordsError as error:
                raise _segment_error(object_key, pending_position, error) from error
            if header.base_offset >= records.end_offset:
                if group:
                    yield _decode_group(group, records, object_key)
                return
            if header.last_offset >= records.start_offset and not header.is_control and header.records_count:
                try:
                    verify_crc(buffer, header, cursor)
                except CorruptCrcError as error:
                    raise _segment_error(object_key, pending_position, error) from error
                section = _section(buffer, cursor, header, pending_position + cursor, object_key)
                group.append(section)
                group_records += header.records_count
                group_bytes += len(section.data)
                if group_records >= GROUP_MAX_RECORDS or group_bytes >= GROUP_MAX_BYTES:
                    yield _decode_group(group, records, object_key)
                    group, group_records, group_bytes = [], 0, 0
            cursor += header.size
        pending = bytes(buffer[cursor:])
        pending_position += cursor
    if pending:
        try:
            parse_header(pending, 0)
        except RecordsError as error:
            raise _segment_error(object_key, pending_position, error) from error
    if group:
        yield _decode_group(group, records, object_key)


def _segment_error(object_key: str, buffer_position: int, error: RecordsError) -> CorruptSegmentError:
    """Re-anchor a records error found in a buffer that starts at ``buffer_position`` of the segment."""
    reason = str(error).removesuffix(f" (at byte {error.position})")
    return CorruptSegmentError(object_key=object_key, position=buffer_position + error.position, reason=reason)


def _section(buffer: bytes, cursor: int, header: BatchHeader, position: int, object_key: str) -> _Section:
    data: bytes | memoryview = memoryview(buffer)[cursor + HEADER_SIZE : cursor + header.size]
    if header.compression is not Compression.NONE:
        try:
            data = decompress(header.compression, data)
        except CorruptCompressionError as error:
            raise _segment_error(object_key, position + HEADER_SIZE, error) from error
    return _Section(header, position, data)


def _record_error(object_key: str, section: _Section, index: int, section_offset: int, reason: str) -> CorruptSegmentError:
    """A CorruptSegmentError for record ``index`` of ``section``, found ``section_offset`` bytes into its records."""
    records_position = section.position + HEADER_SIZE
    if section.header.compression is Compression.NONE:
        return CorruptSegmentError(
            object_key=object_key, position=records_position + section_offset, reason=f"record {index}: {reason}"
        )
    return CorruptSegmentError(
        object_key=object_key,
        position=records_position,
        reason=f"record {index}: {reason} (at byte {section_offset} of the decompressed records)",
    )


def _find_record_starts(
    data: bytearray, begin: int, end: int, section: _Section, object_key: str, starts: list[int]
) -> None:
    """Append where each record of the section at ``data[begin:end]`` starts: the one per-record Python loop.

    Record lengths of 1 and 2 varint bytes (records up to 8 KiB) are decoded inline; sanity is
    checked once after the loop (no odd zigzag, that is no negative length, and the records end
    exactly where the section does), and only then, to name the culprit, record by record.
    """
    append = starts.append
    position = begin
    odd = 0
    try:
        for _ in range(section.header.records_count):
            append(position)
            byte = data[position]
            if byte < 0x80:
                position += 1 + (byte >> 1)
                odd |= byte
                continue
            following = data[position + 1]
            if following < 0x80:
                zigzag = (byte & 0x7F) | (following << 7)
                position += 2
            else:
                zigzag, position = _long_length(data, position)
            position += zigzag >> 1
            odd |= zigzag
    except IndexError:
        odd = 1
    if odd & 1 or position != end:
        _raise_for_bad_lengths(data, begin, end, section, object_key)


def _long_length(data: bytearray, position: int) -> tuple[int, int]:
    """A record-length varint of three or more bytes: (zigzag value, position after it); odd if too long."""
    zigzag, shift = 0, 0
    while shift < 7 * _MAX_VARINT_BYTES:
        byte = data[position]
        position += 1
        zigzag |= (byte & 0x7F) << shift
        if byte < 0x80:
            return zigzag, position
        shift += 7
    return 1, position


def _raise_for_bad_lengths(data: bytearray, begin: int, end: int, section: _Section, object_key: str) -> None:
    """Walk the record lengths of a section that failed the fast walk, and raise for the first bad one."""
    position = begin
    for index in range(section.header.records_count):
        if position >= end:
            raise _record_error(object_key, section, index, position - begin, "starts past the end of the records")
        start = position
        zigzag, shift = 0, 0
        while True:
            if shift >= 7 * _MAX_VARINT_BYTES or position >= end:
                raise _record_error(object_key, section, index, start - begin, "bad length varint")
            byte = data[position]
            position += 1
            zigzag |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        if zigzag & 1:
            raise _record_error(object_key, section, index, start - begin, "negative record length")
        position += zigzag >> 1
    raise _record_error(
        object_key,
        section,
        section.header.records_count,
        min(position, end) - begin,
        f"{section.header.records_count} records take {position - begin} bytes of a {end - begin}-byte section",
    )


def _varints(buf: np.ndarray, positions: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zigzag varints at ``positions``: (values, positions after them, True where one is too long)."""
    byte = buf[positions]
    raw = (byte & 0x7F).astype(np.uint64)
    size = np.ones(len(positions), dtype=np.int64)
    more = np.flatnonzero(byte & 0x80)
    too_long = np.zeros(len(positions), dtype=bool)
    shift = np.uint64(7)
    while more.size:
        if shift >= 7 * max_bytes:
            too_long[more] = True
            break
        byte = buf[positions[more] + size[more]]
        raw[more] |= (byte & 0x7F).astype(np.uint64) << shift
        size[more] += 1
        more = more[(byte & 0x80) != 0]
        shift += np.uint64(7)
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, positions + size, too_long


def _binary_column(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """A binary (or string) column of the byte ranges ``buf[start : start + length]``; a length of -1 is null.

    The ranges are first described as an Arrow view array (binary_view / string_view: per element
    its length, first bytes, buffer and offset, values of up to 12 bytes inline) over ``buf``, built
    with a few numpy operations; Arrow's cast to the plain type then gathers the bytes in C++.
    """
    count = len(lengths)
    present = lengths >= 0
    sizes = np.where(present, lengths, 0).astype(np.int32)
    views = np.zeros((count, 4), dtype=np.int32)  # length, then prefix / buffer index / offset, or 12 inline bytes
    views[:, 0] = sizes
    # Rows of a 12-byte window sliding over buf (buf is padded, so none runs off its end): one 12-byte
    # gather per value, not a gather through a 12-column matrix of indices.
    windows = np.lib.stride_tricks.as_strided(
        buf, shape=(len(buf) - _VIEW_INLINE_BYTES + 1, _VIEW_INLINE_BYTES), strides=(1, 1), writeable=False
    )
    leading = windows[starts]
    short = sizes <= _VIEW_INLINE_BYTES
    leading[short] *= np.arange(_VIEW_INLINE_BYTES) < sizes[short, None]  # inline values are zero-padded
    views[:, 1:] = leading.view(np.int32)
    long_rows = ~short
    views[long_rows, 2] = 0
    views[long_rows, 3] = starts[long_rows]
    null_count = count - int(np.count_nonzero(present))
    validity = pa.py_buffer(np.packbits(present, bitorder="little")) if null_count else None
    view_type = pa.string_view() if arrow_type == pa.string() else pa.binary_view()
    viewed = pa.Array.from_buffers(
        view_type, count, [validity, pa.py_buffer(views), pa.py_buffer(buf)], null_count=null_count
    )
    return viewed.cast(arrow_type)


def _decode_group(group: list[_Section], records: RecordRange, object_key: str) -> pa.RecordBatch:
    # One buffer for the whole group, sized up front (the padding stays zero), each section copied once.
    joined = bytearray(sum(len(section.data) for section in group) + len(_BUFFER_PADDING))
    section_begins = []
    starts: list[int] = []
    begin = 0
    for section in group:
        end = begin + len(section.data)
        section_begins.append(begin)
        joined[begin:end] = section.data
        _find_record_starts(joined, begin, end, section, object_key, starts)
        begin = end
    buf = np.frombuffer(joined, dtype=np.uint8)
    counts = np.array([section.header.records_count for section in group], dtype=np.int64)
    rows = len(starts)
    record_starts = np.array(starts, dtype=np.int64)
    section_of = np.repeat(np.arange(len(group)), counts)

    length, position, bad = _varints(buf, record_starts, _MAX_VARINT_BYTES)
    record_end = position + length  # _find_record_starts checked that every record ends inside its section
    position = position + 1  # attributes: unused by every message format so far
    timestamp_delta, position, too_long = _varints(buf, np.minimum(position, record_end), _MAX_VARLONG_BYTES)
    bad |= too_long
    offset_delta, position, too_long = _varints(buf, np.minimum(position, record_end), _MAX_VARINT_BYTES)
    bad |= too_long
    key_length, position, too_long = _varints(buf, np.minimum(position, record_end), _MAX_VARINT_BYTES)
    bad |= too_long | (key_length < -1)
    key_start = position
    position = position + np.maximum(key_length, 0)
    value_length, position, too_long = _varints(buf, np.minimum(position, record_end), _MAX_VARINT_BYTES)
    bad |= too_long | (value_length < -1)
    value_start = position
    position = position + np.maximum(value_length, 0)
    bad |= position > record_end
    position = np.minimum(position, record_end)
    if records.include_headers:
        headers, position, header_bad = _decode_headers(buf, position, record_end)
        bad |= header_bad | (position != record_end)
    else:
        # The headers are not wanted: the record length already says where the record ends and the
        # batch CRC vouches for the bytes, so only the header count is looked at.
        header_count, position, too_long = _varints(buf, position, _MAX_VARINT_BYTES)
        bad |= too_long | (header_count < 0) | (position > record_end)
        bad |= (header_count == 0) & (position != record_end)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        index = int(section_of[first])
        index_in_section = first - int(counts[:index].sum())
        raise _record_error(
            object_key,
            group[index],
            index_in_section,
            int(record_starts[first]) - section_begins[index],
            "its fields do not fit its length (bad varint, negative or overlong key, value or header)",
        )

    headers_of = [section.header for section in group]
    offsets = np.array([h.base_offset for h in headers_of], dtype=np.int64)[section_of] + offset_delta
    timestamps = np.array([h.base_timestamp for h in headers_of], dtype=np.int64)[section_of] + timestamp_delta
    log_append = np.array([h.timestamp_type is TimestampType.LOG_APPEND_TIME for h in headers_of])[section_of]
    if log_append.any():
        max_timestamps = np.array([h.max_timestamp for h in headers_of], dtype=np.int64)[section_of]
        timestamps = np.where(log_append, max_timestamps, timestamps)
    columns = [
        _binary_column(buf, key_start, key_length, pa.binary()),
        _binary_column(buf, value_start, value_length, pa.binary()),
        pa.repeat(pa.scalar(records.topic, pa.string()), rows),
        pa.array(np.full(rows, records.partition, dtype=np.int32)),
        pa.array(offsets),
        pa.array(timestamps * 1000).view(pa.timestamp("us", tz="UTC")),
        pa.array(log_append.astype(np.int32)),
    ]
    if records.include_headers:
        columns.append(headers)
    batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(records.include_headers))
    wanted = (offsets >= records.start_offset) & (offsets < records.end_offset)
    if not wanted.all():
        batch = batch.filter(pa.array(wanted))
    return batch


def _decode_headers(
    buf: np.ndarray, position: np.ndarray, record_end: np.ndarray
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """The headers column (null where a record has none, as Spark's Kafka source), the positions after
    the headers, and which records are malformed."""
    header_count, position, bad = _varints(buf, position, _MAX_VARINT_BYTES)
    # Each header takes at least two bytes, which bounds the loop below even for corrupt counts.
    bad |= (header_count < 0) | (header_count > (record_end - position) // 2)
    header_count = np.where(bad, 0, header_count)
    list_offsets = np.zeros(len(header_count) + 1, dtype=np.int32)
    np.cumsum(header_count, out=list_offsets[1:])
    total = int(list_offsets[-1])
    key_starts = np.zeros(total, dtype=np.int64)
    key_lengths = np.zeros(total, dtype=np.int64)
    value_starts = np.zeros(total, dtype=np.int64)
    value_lengths = np.zeros(total, dtype=np.int64)
    position = np.minimum(position, record_end)
    for number in range(int(header_count.max(initial=0))):
        having = np.flatnonzero(header_count > number)
        slot = list_offsets[having] + number
        key_length, at, too_long = _varints(buf, position[having], _MAX_VARINT_BYTES)
        bad[having] |= too_long | (key_length < 0)
        key_starts[slot] = at
        key_lengths[slot] = np.maximum(key_length, 0)
        at = np.minimum(at + np.maximum(key_length, 0), record_end[having])
        value_length, at, too_long = _varints(buf, at, _MAX_VARINT_BYTES)
        bad[having] |= too_long | (value_length < -1)
        value_starts[slot] = at
        value_lengths[slot] = value_length
        end = at + np.maximum(value_length, 0)
        bad[having] |= end > record_end[having]
        position[having] = np.minimum(end, record_end[having])
    if bad.any():
        return pa.nulls(len(header_count), HEADERS_TYPE), position, bad
    keys = _binary_column(buf, key_starts, key_lengths, pa.string())
    try:
        keys.validate(full=True)  # header keys are UTF-8 strings, as Kafka's Header.key()
    except pa.ArrowInvalid:
        entry = next(i for i, (s, n) in enumerate(zip(key_starts, key_lengths, strict=True)) if not _is_utf8(buf, s, n))
        record = int(np.searchsorted(list_offsets, entry, side="right")) - 1
        bad[record] = True
        return pa.nulls(len(header_count), HEADERS_TYPE), position, bad
    values = _binary_column(buf, value_starts, value_lengths, pa.binary())
    entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_STRUCT))
    has_headers = header_count > 0
    null_count = len(header_count) - int(np.count_nonzero(has_headers))
    validity = pa.py_buffer(np.packbits(has_headers, bitorder="little")) if null_count else None
    column = pa.Array.from_buffers(
        HEADERS_TYPE, len(header_count), [validity, pa.py_buffer(list_offsets)], null_count=null_count, children=[entries]
    )
    return column, position, bad


def _is_utf8(buf: np.ndarray, start: int, length: int) -> bool:
    try:
        buf[start : start + length].tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
