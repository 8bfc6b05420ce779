"""The Spark reader's per-record work in native code: numba-compiled loops over decompressed records.

``scan_records`` walks every record of a group of batches once, checking each against its length
and its batch, and notes for each wanted record its offset, timestamp and where its key, value
and headers lie; ``gather`` and ``gather_headers`` then copy those byte ranges into the buffers of
plain Arrow binary columns. Python keeps the framing (batch headers, CRCs, decompression) and the
Arrow assembly; it only falls back to record-at-a-time Python to name a corrupt record.

The functions are compiled on first use and cached next to this file (or in numba's user cache
directory when that is read-only), so a Spark worker pays the compilation once per machine.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# scan_records' verdicts.
OK = 0
BAD_LENGTHS = 1  # a section's record lengths do not add up: the caller names the culprit in Python
BAD_FIELDS = 2  # a record's fields do not fit its length
BAD_HEADER_KEY = 3  # a record's header key is not UTF-8 (Kafka's Header.key() is a String)

MAX_VARINT_BYTES = 5  # the longest varint of 32 bits
_MAX_VARLONG_BYTES = 10

_jit = numba.njit(cache=True, nogil=True, boundscheck=False)


@intrinsic
def _copy_bytes(typingctx, destination, destination_start, source, source_start, count):
    """``destination[destination_start:][:count] = source[source_start:][:count]`` as one memcpy of two
    byte arrays (numba's slice assignment copies byte by byte: ten times slower for record values)."""
    signature = types.void(destination, types.intp, source, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        destination_array = context.make_array(signature.args[0])(context, builder, args[0])
        source_array = context.make_array(signature.args[2])(context, builder, args[2])
        cgutils.raw_memcpy(builder, builder.gep(destination_array.data, [args[1]]),
                           builder.gep(source_array.data, [args[3]]), args[4], 1)
        return context.get_dummy_value()

    return signature, codegen


@_jit
def _varint(buf, position, limit, max_bytes):
    """(zigzag-decoded value, position after it), or position -1 when it is too long or passes ``limit``."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(max_bytes):
        if position >= limit:
            return 0, -1
        byte = np.uint64(buf[position])
        position += 1
        raw |= (byte & np.uint64(0x7F)) << shift
        if byte < 0x80:
            value = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
            return value, position
        shift += np.uint64(7)
    return 0, -1


@_jit
def _utf8(buf, start, end):
    """Whether ``buf[start:end]`` is UTF-8 as Python's strict decoder takes it: no overlong forms,
    no surrogates, nothing past U+10FFFF."""
    at = start
    while at < end:
        lead = buf[at]
        if lead < 0x80:
            at += 1
            continue
        low, high = 0x80, 0xBF  # the range of the second byte
        if 0xC2 <= lead <= 0xDF:
            following = 1
        elif lead == 0xE0:
            following, low = 2, 0xA0
        elif lead == 0xED:
            following, high = 2, 0x9F
        elif 0xE1 <= lead <= 0xEF:
            following = 2
        elif lead == 0xF0:
            following, low = 3, 0x90
        elif lead == 0xF4:
            following, high = 3, 0x8F
        elif 0xF1 <= lead <= 0xF3:
            following = 3
        else:
            return False
        if at + following >= end or not low <= buf[at + 1] <= high:
            return False
        for k in range(2, following + 1):
            if buf[at + k] & 0xC0 != 0x80:
                return False
        at += following + 1
    return True


@_jit
def _nullable_bytes(buf, position, limit):
    """A length-prefixed byte string (length -1 is null) at ``position``: (length, start, position after
    it), the position -1 when the length is bad or the bytes pass ``limit``."""
    length, start = _varint(buf, position, limit, MAX_VARINT_BYTES)
    if start < 0 or length < -1 or start + max(length, 0) > limit:
        return length, start, -1
    return length, start, start + max(length, 0)


@_jit
def scan_records(buf, begins, ends, counts, base_offsets, base_timestamps, max_timestamps, log_append,
                 start_offset, end_offset, want_headers,
                 offsets, timestamps, timestamp_types, key_starts, key_lengths, value_starts, value_lengths,
                 header_starts, header_counts):
    """Walk every record of the sections ``buf[begins[i]:ends[i]]`` and describe the wanted ones.

    A record is wanted when ``start_offset <= offset < end_offset``; its fields go to the output
    arrays at the next free row (key/value length -1 for null; timestamps in microseconds). Every
    record is checked, wanted or not. Returns ``(verdict, rows, key bytes, value bytes, headers,
    section, record, position)``: for BAD_LENGTHS the section whose lengths fail, for BAD_FIELDS or
    BAD_HEADER_KEY the first bad record (its index in its section and its start in ``buf``). Header
    keys are checked to be UTF-8 only when headers are wanted.
    """
    rows = 0
    key_bytes = 0
    value_bytes = 0
    header_total = 0
    field_kind = OK
    field_section = -1
    field_record = -1
    field_position = -1
    for section in range(len(begins)):
        position = begins[section]
        end = ends[section]
        for record in range(counts[section]):
            start = position
            length, position = _varint(buf, position, end, MAX_VARINT_BYTES)
            if position < 0 or length < 0 or position + length > end:
                return BAD_LENGTHS, rows, key_bytes, value_bytes, header_total, section, record, start
            record_end = position + length
            if field_section >= 0:
                position = record_end
                continue
            # Each field is read only while the ones before it were good (at >= 0).
            at = position + 1  # attributes: unused by every message format so far
            timestamp_delta, at = _varint(buf, at, record_end, _MAX_VARLONG_BYTES)
            offset_delta = key_length = key_start = value_length = value_start = header_count = headers_at = 0
            if at >= 0:
                offset_delta, at = _varint(buf, at, record_end, MAX_VARINT_BYTES)
            if at >= 0:
                key_length, key_start, at = _nullable_bytes(buf, at, record_end)
            if at >= 0:
                value_length, value_start, at = _nullable_bytes(buf, at, record_end)
            if at >= 0:
                header_count, at = _varint(buf, at, record_end, MAX_VARINT_BYTES)
                headers_at = at
            if header_count < 0:
                at = -1
            if at >= 0 and want_headers:
                for _ in range(header_count):
                    header_key_length, at = _varint(buf, at, record_end, MAX_VARINT_BYTES)
                    if at < 0 or header_key_length < 0 or at + header_key_length > record_end:
                        at = -1
                        break
                    if not _utf8(buf, at, at + header_key_length):
                        field_kind = BAD_HEADER_KEY
                        at = -1
                        break
                    _, _, at = _nullable_bytes(buf, at + header_key_length, record_end)
                    if at < 0:
                        break
            if at >= 0 and (want_headers or header_count == 0) and at != record_end:
                at = -1
            if at < 0:
                field_section, field_record, field_position = section, record, start
                if field_kind == OK:
                    field_kind = BAD_FIELDS
                position = record_end
                continue
            position = record_end
            offset = base_offsets[section] + offset_delta
            if offset < start_offset or offset >= end_offset:
                continue
            offsets[rows] = offset
            if log_append[section]:
                timestamps[rows] = max_timestamps[section] * 1000
                timestamp_types[rows] = 1
            else:
                timestamps[rows] = (base_timestamps[section] + timestamp_delta) * 1000
                timestamp_types[rows] = 0
            key_starts[rows] = key_start
            key_lengths[rows] = key_length
            value_starts[rows] = value_start
            value_lengths[rows] = value_length
            header_starts[rows] = headers_at
            header_counts[rows] = header_count
            key_bytes += max(key_length, 0)
            value_bytes += max(value_length, 0)
            header_total += header_count
            rows += 1
        if position != end:
            return BAD_LENGTHS, rows, key_bytes, value_bytes, header_total, section, counts[section], position
    if field_section >= 0:
        return field_kind, rows, key_bytes, value_bytes, header_total, field_section, field_record, field_position
    return OK, rows, key_bytes, value_bytes, header_total, -1, -1, -1


@_jit
def gather(buf, starts, lengths, rows, value_offsets, data):
    """Copy ``buf[starts[i]:starts[i] + lengths[i]]`` for ``i < rows`` end to end into ``data``
    (a length of -1, null, adds nothing) and write the Arrow offsets of the result."""
    cursor = 0
    value_offsets[0] = 0
    for row in range(rows):
        length = lengths[row]
        if length > 0:
            _copy_bytes(data, cursor, buf, starts[row], length)
            cursor += length
        value_offsets[row + 1] = cursor


@_jit
def gather_headers(buf, header_starts, header_counts, rows,
                   list_offsets, key_offsets, key_data, value_offsets, value_lengths, value_data):
    """Copy the headers of ``rows`` records (already checked by scan_records) into Arrow buffers:
    the list offsets per record, then per header its key and its value (value length -1 for null)."""
    header = 0
    key_cursor = 0
    value_cursor = 0
    list_offsets[0] = 0
    key_offsets[0] = 0
    value_offsets[0] = 0
    for row in range(rows):
        at = header_starts[row]
        for _ in range(header_counts[row]):
            key_length, at = _varint(buf, at, len(buf), MAX_VARINT_BYTES)
            _copy_bytes(key_data, key_cursor, buf, at, key_length)
            key_cursor += key_length
            at += key_length
            key_offsets[header + 1] = key_cursor
            value_length, at = _varint(buf, at, len(buf), MAX_VARINT_BYTES)
            value_lengths[header] = value_length
            if value_length > 0:
                _copy_bytes(value_data, value_cursor, buf, at, value_length)
                value_cursor += value_length
                at += value_length
            value_offsets[header + 1] = value_cursor
            header += 1
        list_offsets[row + 1] = header


# The sink's side: Kafka's default partitioner and record encoding over Arrow binary columns.
# A column is (offsets, data, valid): Arrow's int32 offsets (one more than rows, already shifted by the
# array's slice offset), its data buffer as bytes, and a boolean per row (False: null).

_MASK32 = np.uint64(0xFFFFFFFF)
_MURMUR_M = np.uint64(0x5BD1E995)


@_jit
def _murmur2(data, start, end):
    """Java's ``Utils.murmur2`` of ``data[start:end]`` as an unsigned 32-bit value (as
    `broker_core.partitioner.murmur2`, which returns it signed)."""
    length = end - start
    h = (np.uint64(0x9747B28C) ^ np.uint64(length)) & _MASK32
    whole = start + length - length % 4
    position = start
    while position < whole:
        k = (np.uint64(data[position]) | (np.uint64(data[position + 1]) << np.uint64(8))
             | (np.uint64(data[position + 2]) << np.uint64(16)) | (np.uint64(data[position + 3]) << np.uint64(24)))
        k = (k * _MURMUR_M) & _MASK32
        k ^= k >> np.uint64(24)
        k = (k * _MURMUR_M) & _MASK32
        h = (h * _MURMUR_M) & _MASK32
        h ^= k
        position += 4
    tail = length % 4
    if tail == 3:
        h ^= np.uint64(data[whole + 2]) << np.uint64(16)
    if tail >= 2:
        h ^= np.uint64(data[whole + 1]) << np.uint64(8)
    if tail >= 1:
        h ^= np.uint64(data[whole])
        h = (h * _MURMUR_M) & _MASK32
    h ^= h >> np.uint64(13)
    h = (h * _MURMUR_M) & _MASK32
    h ^= h >> np.uint64(15)
    return h


@_jit
def key_partitions(key_offsets, key_data, key_valid, num_partitions, partitions):
    """For each row whose ``partitions`` entry is negative and whose key is not null, the partition
    Kafka's default partitioner picks: ``toPositive(murmur2(key)) % num_partitions``."""
    for row in range(partitions.shape[0]):
        if partitions[row] < 0 and key_valid[row]:
            h = _murmur2(key_data, key_offsets[row], key_offsets[row + 1])
            partitions[row] = np.int32((h & np.uint64(0x7FFFFFFF)) % np.uint64(num_partitions))


@_jit
def _zigzag_size(value):
    raw = np.uint64((value << 1) ^ (value >> 63))
    size = 1
    while raw >= np.uint64(0x80):
        raw >>= np.uint64(7)
        size += 1
    return size


@_jit
def _put_zigzag(out, position, value):
    raw = np.uint64((value << 1) ^ (value >> 63))
    while raw >= np.uint64(0x80):
        out[position] = np.uint8((raw & np.uint64(0x7F)) | np.uint64(0x80))
        raw >>= np.uint64(7)
        position += 1
    out[position] = np.uint8(raw)
    return position + 1


@_jit
def _field_size(offsets, valid, row):
    if not valid[row]:
        return 1  # length -1
    length = np.int64(offsets[row + 1] - offsets[row])
    return _zigzag_size(length) + length


@_jit
def _put_field(out, position, offsets, data, valid, row):
    if not valid[row]:
        return _put_zigzag(out, position, np.int64(-1))
    start = np.int64(offsets[row])
    length = np.int64(offsets[row + 1]) - start
    position = _put_zigzag(out, position, length)
    _copy_bytes(out, position, data, start, length)
    return position + length


@_jit
def encode_records(rows, key_offsets, key_data, key_valid, value_offsets, value_data, value_valid):
    """The records section of a RecordBatch v2 holding ``rows`` (indexes into the columns) in that
    order: record i at offset delta i, timestamp delta 0, no headers (Kafka's DefaultRecord layout)."""
    count = rows.shape[0]
    bodies = np.empty(count, np.int64)
    total = 0
    for i in range(count):
        row = rows[i]
        # attributes, timestamp delta 0, offset delta, key, value, header count 0
        body = 2 + _zigzag_size(np.int64(i)) + _field_size(key_offsets, key_valid, row) \
            + _field_size(value_offsets, value_valid, row) + 1
        bodies[i] = body
        total += _zigzag_size(np.int64(body)) + body
    out = np.empty(total, np.uint8)
    position = 0
    for i in range(count):
        row = rows[i]
        position = _put_zigzag(out, position, bodies[i])
        out[position] = 0  # attributes
        out[position + 1] = 0  # timestamp delta
        position = _put_zigzag(out, position + 2, np.int64(i))
        position = _put_field(out, position, key_offsets, key_data, key_valid, row)
        position = _put_field(out, position, value_offsets, value_data, value_valid, row)
        out[position] = 0  # headers
        position += 1
    return out
