"""Decode RecordBatch v2 bytes straight into Arrow columns shaped like Spark's Kafka source.

This is the Spark reader's hot loop. ``broker_core.records.batch`` decodes one record at a time into
Python objects, which is right for clients but costs microseconds per record. Here Python only
frames batches (headers, CRCs, decompression) and gathers them into groups, decoded where they lie
in their chunk of the stream when uncompressed and joined into one buffer otherwise; the
per-record work runs in the numba-compiled loops of ``emr_jobs.record_kernels``: one pass checks
every record and notes where each wanted record's fields lie, then keys, values and headers are
copied into the buffers of plain Arrow binary columns. The result is one ``pyarrow.RecordBatch``
per group, with the column types Spark's Arrow conversion expects for key, value, topic,
partition, offset, timestamp, timestampType and (when asked for) headers.

Semantics are those of a Kafka consumer reading uncommitted data: control batches (transaction
markers) are skipped, a LogAppendTime batch gives every record the batch's maxTimestamp, and only
records with ``start_offset <= offset < end_offset`` are returned. Every batch's CRC-32C is verified;
bad bytes raise CorruptSegmentError naming the segment's object key and the byte position in it.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from broker_core.records.batch import MIN_RECORD_BYTES
from broker_core.records.compression import decompress
from broker_core.records.errors import (
    CorruptCompressionError,
    CorruptCrcError,
    DecompressionLimitError,
    RecordsError,
    TruncatedBatchError,
)
from broker_core.records.header import (
    HEADER_SIZE,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    BatchHeader,
    Compression,
    TimestampType,
    parse_header,
    verify_crc,
)
from emr_jobs.errors import CorruptSegmentError
from emr_jobs.record_kernels import (
    BAD_FIELDS,
    BAD_HEADER_KEY,
    BAD_LENGTHS,
    MAX_VARINT_BYTES,
    gather,
    gather_headers,
    scan_records,
)

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
# large enough that the per-call costs of the native walk and of Arrow disappear, small enough to
# bound a Python worker's memory and to keep Arrow's 32-bit binary offsets far from overflowing.
GROUP_MAX_RECORDS = 32_768
GROUP_MAX_BYTES = 16 * 1024 * 1024

def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of the batches this module yields."""
    return pa.schema(ARROW_FIELDS + [HEADERS_FIELD] if include_headers else ARROW_FIELDS)


@dataclass(frozen=True, slots=True)
class RecordRange:
    """Which records of which partition to keep: offsets in ``[start_offset, end_offset)``, except the
    transactional batches of the ``aborted`` transactions (producer id, first offset, last offset)."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    include_headers: bool
    aborted: tuple[tuple[int, int, int], ...] = ()

    def is_aborted(self, header: BatchHeader) -> bool:
        """Whether a transactional batch belongs to one of the aborted transactions."""
        return header.is_transactional and any(
            pid == header.producer_id and first <= header.base_offset <= last for pid, first, last in self.aborted)


@dataclass(frozen=True, slots=True)
class _Section:
    """One batch's records section, ready to decode: its header, where the batch starts, its bytes.

    An uncompressed section's bytes are ``source[start : start + len(data)]`` of the chunk it was
    read in; a decompressed one's are its own (``source`` None).
    """

    header: BatchHeader
    position: int  # of the batch in its segment
    data: bytes | memoryview
    source: bytes | None
    start: int


class _Group:
    """Sections decoded together into one Arrow batch. While all of them lie uncompressed in one
    chunk, they are decoded in place there; otherwise their bytes are first joined."""

    def __init__(self) -> None:
        self.sections: list[_Section] = []
        self.records = self.bytes = 0
        self.source: bytes | None = None  # the one chunk every section lies in, if there is one

    def takes_in_place(self, section: _Section) -> bool:
        """Whether adding ``section`` keeps an in-place group in place (an empty group takes any)."""
        return not self.sections or self.source is None or section.source is self.source

    def add(self, section: _Section) -> None:
        self.source = section.source if not self.sections or section.source is self.source else None
        self.sections.append(section)
        self.records += section.header.records_count
        self.bytes += len(section.data)

    def full(self) -> bool:
        return self.records >= GROUP_MAX_RECORDS or self.bytes >= GROUP_MAX_BYTES


def iter_arrow_batches(
    chunks: Iterable[bytes], records: RecordRange, *, object_key: str, stream_position: int = 0
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records in ``records`` from a stream of whole RecordBatch v2 batches.

    ``chunks`` may cut batches anywhere; the stream must start at a batch boundary of the segment
    object ``object_key``, at byte ``stream_position``, and end at one. Iteration stops early once a
    batch reaches ``end_offset``. Bad bytes raise CorruptSegmentError with the byte position in the
    segment.

    Batches are read where they lie in their chunk; only a batch cut by a chunk's end is copied,
    together with as much of the next chunk as it needs.
    """
    reader = _StreamReader(records, object_key)
    pending = b""  # the start of a batch cut by the previous chunk's end
    pending_position = stream_position  # segment position of pending[0]
    for chunk in chunks:
        chunk_position = pending_position + len(pending)  # segment position of chunk[0]
        cursor = 0
        if pending:
            needed = _bytes_to_finish(pending, chunk)
            if needed is None:
                pending += chunk
                continue
            yield from reader.read(pending + chunk[:needed], 0, pending_position)
            if reader.finished:
                return
            cursor = needed
        cursor = yield from reader.read(chunk, cursor, chunk_position)
        if reader.finished:
            return
        pending = bytes(memoryview(chunk)[cursor:])
        pending_position = chunk_position + cursor
    if pending:
        try:
            parse_header(pending, 0)
        except RecordsError as error:
            raise _segment_error(object_key, pending_position, error) from error
    yield from reader.flush()


def _bytes_to_finish(pending: bytes, chunk: bytes) -> int | None:
    """How many bytes at the start of ``chunk`` complete the batch that ``pending`` starts, or None
    if ``chunk`` is too short. A length too small for a batch asks for a whole batch header, for
    parse_header to refuse."""
    head = pending if len(pending) >= LOG_OVERHEAD else pending + chunk[: LOG_OVERHEAD - len(pending)]
    if len(head) < LOG_OVERHEAD:
        return None
    size = LOG_OVERHEAD + int.from_bytes(head[LENGTH_OFFSET:LOG_OVERHEAD], "big", signed=True)
    needed = max(size, HEADER_SIZE) - len(pending)
    return needed if needed <= len(chunk) else None


class _StreamReader:
    """Turns the batches of the buffers it is given, in stream order, into Arrow batches."""

    def __init__(self, records: RecordRange, object_key: str) -> None:
        self.records = records
        self.object_key = object_key
        self.group = _Group()
        self.finished = False  # a batch at or past end_offset was reached

    def read(self, buffer: bytes, cursor: int, buffer_position: int) -> Generator[pa.RecordBatch, None, int]:
        """Yield what the whole batches of ``buffer`` from ``cursor`` on complete; return where the
        first incomplete batch starts (``buffer`` starts at segment position ``buffer_position``)."""
        records, object_key = self.records, self.object_key
        while True:
            try:
                header = parse_header(buffer, cursor)
            except TruncatedBatchError:
                return cursor
            except RecordsError as error:
                raise _segment_error(object_key, buffer_position, error) from error
            if header.base_offset >= records.end_offset:
                self.finished = True
                yield from self.flush()
                return cursor
            if (header.last_offset >= records.start_offset and not header.is_control and header.records_count
                    and not (records.aborted and records.is_aborted(header))):
                try:
                    verify_crc(buffer, header, cursor)
                except CorruptCrcError as error:
                    raise _segment_error(object_key, buffer_position, error) from error
                section = _section(buffer, cursor, header, buffer_position + cursor, object_key)
                if not self.group.takes_in_place(section):
                    yield from self.flush()
                self.group.add(section)
                if self.group.full():
                    yield from self.flush()
            cursor += header.size

    def flush(self) -> Iterator[pa.RecordBatch]:
        """The Arrow batch of the sections gathered so far, if any."""
        if self.group.sections:
            group, self.group = self.group, _Group()
            yield _decode_group(group, self.records, self.object_key)


def _segment_error(object_key: str, buffer_position: int, error: RecordsError) -> CorruptSegmentError:
    """Re-anchor a records error found in a buffer that starts at ``buffer_position`` of the segment."""
    reason = str(error).removesuffix(f" (at byte {error.position})")
    return CorruptSegmentError(object_key=object_key, position=buffer_position + error.position, reason=reason)


def _section(buffer: bytes, cursor: int, header: BatchHeader, position: int, object_key: str) -> _Section:
    start = cursor + HEADER_SIZE
    data: bytes | memoryview = memoryview(buffer)[start : cursor + header.size]
    if header.compression is Compression.NONE:
        _check_declared_count(header, len(data), position, object_key)
        return _Section(header, position, data, buffer, start)
    try:
        section = _Section(header, position, decompress(header.compression, data), None, 0)
    except CorruptCompressionError as error:
        raise _segment_error(object_key, position + HEADER_SIZE, error) from error
    except DecompressionLimitError as error:
        # Decompression stopped at the limit, so a bomb costs a worker at most that much memory.
        named = DecompressionLimitError(
            codec=header.compression, limit=error.limit, position=0, base_offset=header.base_offset
        )
        raise _segment_error(object_key, position + HEADER_SIZE, named) from error
    _check_declared_count(header, len(section.data), position, object_key)
    return section


def _check_declared_count(header: BatchHeader, records_bytes: int, position: int, object_key: str) -> None:
    """The group's columns are sized by declared record counts: refuse a count the bytes cannot hold."""
    if header.records_count * MIN_RECORD_BYTES > records_bytes:
        raise CorruptSegmentError(
            object_key=object_key, position=position,
            reason=f"the batch at base offset {header.base_offset} declares {header.records_count} records "
                   f"in {records_bytes} bytes of records",
        )


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


def _raise_for_bad_lengths(data: memoryview, begin: int, end: int, section: _Section, object_key: str) -> None:
    """Walk the record lengths of a section that failed the fast walk, and raise for the first bad one."""
    position = begin
    for index in range(section.header.records_count):
        if position >= end:
            raise _record_error(object_key, section, index, position - begin, "starts past the end of the records")
        start = position
        zigzag, shift = 0, 0
        while True:
            if shift >= 7 * MAX_VARINT_BYTES or position >= end:
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


def _decode_group(group: _Group, records: RecordRange, object_key: str) -> pa.RecordBatch:
    sections = group.sections
    begins = np.empty(len(sections), dtype=np.int64)
    ends = np.empty(len(sections), dtype=np.int64)
    if group.source is not None:
        # Every section lies uncompressed in one chunk: decode them there.
        joined = memoryview(group.source).cast("B")
        buf = np.frombuffer(joined, dtype=np.uint8)
        for index, section in enumerate(sections):
            begins[index], ends[index] = section.start, section.start + len(section.data)
    else:
        # One buffer for the whole group, sized up front, each section copied once.
        buf, joined_buffer = _pool_array(group.bytes, np.uint8)
        joined = memoryview(joined_buffer).cast("B")
        begin = 0
        for index, section in enumerate(sections):
            end = begin + len(section.data)
            joined[begin:end] = section.data
            begins[index], ends[index] = begin, end
            begin = end
    headers_of = [section.header for section in sections]
    counts = np.array([h.records_count for h in headers_of], dtype=np.int64)
    total = int(counts.sum())
    offsets = np.empty(total, dtype=np.int64)
    timestamps = np.empty(total, dtype=np.int64)
    timestamp_types = np.empty(total, dtype=np.int32)
    key_starts, key_lengths, value_starts, value_lengths, header_starts, header_counts = (
        np.empty(total, dtype=np.int64) for _ in range(6))
    verdict, rows, key_bytes, value_bytes, header_total, bad_section, bad_record, bad_position = scan_records(
        buf, begins, ends, counts,
        np.array([h.base_offset for h in headers_of], dtype=np.int64),
        np.array([h.base_timestamp for h in headers_of], dtype=np.int64),
        np.array([h.max_timestamp for h in headers_of], dtype=np.int64),
        np.array([h.timestamp_type is TimestampType.LOG_APPEND_TIME for h in headers_of], dtype=np.bool_),
        records.start_offset, records.end_offset, records.include_headers,
        offsets, timestamps, timestamp_types, key_starts, key_lengths, value_starts, value_lengths,
        header_starts, header_counts)
    if verdict == BAD_LENGTHS:
        _raise_for_bad_lengths(joined, int(begins[bad_section]), int(ends[bad_section]), sections[bad_section], object_key)
    if verdict in (BAD_FIELDS, BAD_HEADER_KEY):
        reason = (
            "a header key that is not UTF-8"
            if verdict == BAD_HEADER_KEY
            else "its fields do not fit its length (bad varint, negative or overlong key, value or header)"
        )
        raise _record_error(object_key, sections[bad_section], bad_record, bad_position - int(begins[bad_section]), reason)
    columns = [
        _binary_column(buf, key_starts, key_lengths, rows, key_bytes, pa.binary()),
        _binary_column(buf, value_starts, value_lengths, rows, value_bytes, pa.binary()),
        pa.repeat(pa.scalar(records.topic, pa.string()), rows),
        pa.array(np.full(rows, records.partition, dtype=np.int32)),
        pa.array(offsets[:rows]),
        pa.array(timestamps[:rows]).view(pa.timestamp("us", tz="UTC")),
        pa.array(timestamp_types[:rows]),
    ]
    if records.include_headers:
        columns.append(_headers_column(buf, header_starts[:rows], header_counts[:rows], header_total))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(records.include_headers))


def _validity(present: np.ndarray) -> tuple[pa.Buffer | None, int]:
    null_count = len(present) - int(np.count_nonzero(present))
    return (pa.py_buffer(np.packbits(present, bitorder="little")) if null_count else None), null_count


def _binary_column(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, rows: int, size: int,
                   arrow_type: pa.DataType) -> pa.Array:
    """A binary column of the byte ranges ``buf[start : start + length]`` of the first ``rows`` rows,
    ``size`` bytes in all; a length of -1 is null."""
    value_offsets, offsets_buffer = _pool_array(rows + 1, np.int32)
    data, data_buffer = _pool_array(size, np.uint8)
    gather(buf, starts, lengths, rows, value_offsets, data)
    validity, null_count = _validity(lengths[:rows] >= 0)
    return pa.Array.from_buffers(arrow_type, rows, [validity, offsets_buffer, data_buffer], null_count=null_count)


def _pool_array(count: int, dtype: type[np.generic]) -> tuple[np.ndarray, pa.Buffer]:
    """An uninitialised numpy array over a buffer from Arrow's memory pool, and that buffer.

    The pool (mimalloc or jemalloc) hands freed memory out again, where fresh numpy allocations of
    this size are new pages from the kernel: a page fault and zeroing per 4 KiB written."""
    buffer = pa.allocate_buffer(count * np.dtype(dtype).itemsize)
    return np.frombuffer(buffer, dtype=dtype), buffer


def _headers_column(buf: np.ndarray, header_starts: np.ndarray, header_counts: np.ndarray, total: int) -> pa.Array:
    """The headers column (null where a record has none, as Spark's Kafka source) of headers that
    scan_records checked (their keys UTF-8 among them)."""
    rows = len(header_counts)
    list_offsets = np.empty(rows + 1, dtype=np.int32)
    key_offsets = np.empty(total + 1, dtype=np.int32)
    value_offsets = np.empty(total + 1, dtype=np.int32)
    value_lengths = np.empty(total, dtype=np.int64)
    key_data = np.empty(len(buf), dtype=np.uint8)
    value_data = np.empty(len(buf), dtype=np.uint8)
    gather_headers(buf, header_starts, header_counts, rows, list_offsets, key_offsets, key_data, value_offsets,
                   value_lengths, value_data)
    keys = pa.Array.from_buffers(pa.string(), total, [None, pa.py_buffer(key_offsets),
                                                      pa.py_buffer(key_data[: key_offsets[-1]])])
    validity, null_count = _validity(value_lengths >= 0)
    values = pa.Array.from_buffers(pa.binary(), total, [validity, pa.py_buffer(value_offsets),
                                                         pa.py_buffer(value_data[: value_offsets[-1]])],
                                   null_count=null_count)
    entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_STRUCT))
    validity, null_count = _validity(header_counts > 0)
    return pa.Array.from_buffers(HEADERS_TYPE, rows, [validity, pa.py_buffer(list_offsets)], null_count=null_count,
                                 children=[entries])
