"""The log cleaner's per-record work in native code: numba-compiled walks over record batches.

`walk_batches` reads a buffer of whole v2 batches (a piece of a segment file): each batch's place,
kind and header fields, and for each record of an uncompressed batch whose records take part in
compaction (neither transactional nor control) its offset, a 128-bit hash of its key, whether it has
a key and a null value, where its bytes lie and its timestamp delta. `scan_section` does the same
for one decompressed records section. `map_insert`/`map_lookup` are the offset map's open-addressing
table (`broker_core.log.offset_map.OffsetMap`), `decide` applies the cleaner's record rule to every
record of a buffer at once, and `gather_kept` copies the kept records' bytes end to end. Python
keeps the framing decisions per batch (unchanged, spliced, emptied, dropped), CRCs and compression.

Keys are hashed as two independent 64-bit hashes (a seeded FNV-1a lane and a seeded
multiply-rotate lane, each finished with MurmurHash3's fmix64): 128 bits, as Kafka's MD5 digests.
Neither is cryptographic; the seeds are drawn at random for each offset map, so keys cannot be
chosen offline to collide, and two distinct keys of one pass share both hashes with probability
about 2^-128 per pair.

The functions are compiled on first use and cached (numba's cache: next to this file, or numba's
user cache directory when that is read-only), so a machine pays the compilation once; a cleaner
process loads them when its pool starts it (`warm_up`), not on every pass.
"""

from __future__ import annotations

import numba
import numpy as np

OK = 0
BAD_BATCH_LENGTH = 1  # a batch header's length is below the header's own size
BAD_RECORDS = 2  # a batch's records end early, or a record's fields pass its length

HEADER_SIZE = 61
LOG_OVERHEAD = 12
# Attribute bits of a batch.
_CODEC_MASK = 0x07
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_DELETE_HORIZON = 0x40
# Batch kinds walk_batches reports.
KIND_WHOLE = 0  # transactional or control: kept whole, records not mapped
KIND_SCANNED = 1  # uncompressed, its records scanned into the record arrays
KIND_COMPRESSED = 2  # compressed and mapped: the caller decompresses it and calls scan_section
# The smallest record: a length, attributes, and one-byte timestamp delta, offset delta, key
# length, value length and header count.
MIN_RECORD_BYTES = 7

_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_LANE2_PRIME = np.uint64(0xC2B2AE3D27D4EB4F)
_FMIX1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX2 = np.uint64(0xC4CEB9FE1A85EC53)

_jit = numba.njit(cache=True, nogil=True, boundscheck=False)


# The Spark reader's kernels (emr_jobs/record_kernels.py) have the same varint walk. Each kernel
# module keeps its own: numba's on-disk cache does not notice a change to a jitted function defined in
# another file, so a shared one could leave a stale compiled caller behind; and broker_core may not
# import emr_jobs.
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
            return np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1)), position
        shift += np.uint64(7)
    return 0, -1


@_jit
def _fmix64(h):
    h ^= h >> np.uint64(33)
    h *= _FMIX1
    h ^= h >> np.uint64(33)
    h *= _FMIX2
    h ^= h >> np.uint64(33)
    return h


@_jit
def key_hash(buf, start, length, seed1, seed2):
    """The two 64-bit hashes of ``buf[start:start + length]`` under the seeds (see the module docstring)."""
    size = np.uint64(length)
    h1 = _FNV_OFFSET ^ seed1
    h2 = seed2 ^ (size * _GOLDEN)
    for at in range(start, start + length):
        byte = np.uint64(buf[at])
        h1 = (h1 ^ byte) * _FNV_PRIME
        h2 = (h2 ^ byte) * _LANE2_PRIME
        h2 = (h2 << np.uint64(31)) | (h2 >> np.uint64(33))
    return _fmix64(h1 ^ size), _fmix64(h2 + _GOLDEN)


@_jit
def scan_section(buf, begin, end, count, base_offset, seed1, seed2, row,
                 offsets, hashes1, hashes2, has_key, is_null, starts, ends, timestamp_deltas):
    """Describe the ``count`` records of ``buf[begin:end]`` in the record arrays from ``row`` on.

    Returns (the next free row, -1) or, when the records end early or a record's fields pass its
    length, (row, the position of that record). Values and headers are skipped, not checked.
    """
    position = begin
    for _ in range(count):
        start = position
        if row >= len(offsets):
            return row, start
        length, position = _varint(buf, position, end, _MAX_VARINT_BYTES)
        if position < 0 or length < 0 or position + length > end:
            return row, start
        record_end = position + length
        at = position + 1  # attributes: unused by every message format so far
        timestamp_delta, at = _varint(buf, at, record_end, _MAX_VARLONG_BYTES)
        offset_delta = 0
        key_length = 0
        value_length = 0
        if at >= 0:
            offset_delta, at = _varint(buf, at, record_end, _MAX_VARINT_BYTES)
        if at >= 0:
            key_length, at = _varint(buf, at, record_end, _MAX_VARINT_BYTES)
        if at >= 0 and (key_length < -1 or at + max(key_length, 0) > record_end):
            at = -1
        key_start = at
        if at >= 0:
            value_length, at = _varint(buf, at + max(key_length, 0), record_end, _MAX_VARINT_BYTES)
        if at < 0:
            return row, start
        offsets[row] = base_offset + offset_delta
        if key_length >= 0:
            hashes1[row], hashes2[row] = key_hash(buf, key_start, key_length, seed1, seed2)
            has_key[row] = True
        else:
            hashes1[row] = 0
            hashes2[row] = 0
            has_key[row] = False
        is_null[row] = value_length == -1
        starts[row] = start
        ends[row] = record_end
        timestamp_deltas[row] = timestamp_delta
        row += 1
        position = record_end
    return row, -1


@_jit
def _big_endian(buf, position, size):
    """The signed big-endian integer of ``size`` bytes at ``position``."""
    value = np.uint64(0)
    for at in range(position, position + size):
        value = (value << np.uint64(8)) | np.uint64(buf[at])
    bits = np.uint64(8 * size)
    if size < 8 and value >> (bits - np.uint64(1)):
        value |= ~np.uint64(0) << bits
    return np.int64(value)


@_jit
def walk_batches(buf, seed1, seed2, now_ms,
                 batch_starts, batch_sizes, batch_kinds, batch_firsts, batch_counts, batch_expires,
                 batch_producer_ids, offsets, hashes1, hashes2, has_key, is_null, starts, ends, timestamp_deltas):
    """Walk the whole batches at the start of ``buf`` (a batch cut off at its end is left for the next read).

    Fills the batch arrays (start, size, kind, first record row and record rows of a KIND_SCANNED
    batch, whether its tombstones' delete horizon is at or before ``now_ms``, its producer id) and
    the record arrays. Returns (verdict, batches, bytes consumed, rows, position of the
    bad batch or record, that batch's number).
    """
    cursor = 0
    batches = 0
    row = 0
    total = len(buf)
    while cursor + HEADER_SIZE <= total and batches < len(batch_starts):
        size = LOG_OVERHEAD + _big_endian(buf, cursor + 8, 4)
        if size < HEADER_SIZE:
            return BAD_BATCH_LENGTH, batches, cursor, row, cursor, batches
        if cursor + size > total:
            break
        attributes = _big_endian(buf, cursor + 21, 2)
        batch_starts[batches] = cursor
        batch_sizes[batches] = size
        batch_firsts[batches] = row
        batch_counts[batches] = 0
        batch_producer_ids[batches] = _big_endian(buf, cursor + 43, 8)
        batch_expires[batches] = (attributes & _DELETE_HORIZON) != 0 and _big_endian(buf, cursor + 27, 8) <= now_ms
        if attributes & (_TRANSACTIONAL | _CONTROL):
            batch_kinds[batches] = KIND_WHOLE
        elif attributes & _CODEC_MASK:
            batch_kinds[batches] = KIND_COMPRESSED
        else:
            batch_kinds[batches] = KIND_SCANNED
            count = _big_endian(buf, cursor + 57, 4)
            base_offset = _big_endian(buf, cursor, 8)
            if count < 0:
                return BAD_RECORDS, batches, cursor, row, cursor, batches
            after, bad = scan_section(buf, cursor + HEADER_SIZE, cursor + size, count, base_offset, seed1, seed2,
                                      row, offsets, hashes1, hashes2, has_key, is_null, starts, ends,
                                      timestamp_deltas)
            if bad >= 0:
                return BAD_RECORDS, batches, cursor, row, bad, batches
            batch_counts[batches] = after - row
            row = after
        batches += 1
        cursor += size
    return OK, batches, cursor, row, -1, -1


@_jit
def _slot(table, mask, hash1, hash2):
    """The slot holding the key with these hashes, or the empty slot where it would go (linear probing).

    A slot is a row of ``table``: hash 1, hash 2, offset + 1 (0 for an empty slot), side by side so
    that a probe touches one cache line.
    """
    slot = np.int64(hash1 & mask)
    while table[slot, 2] != 0 and (table[slot, 0] != hash1 or table[slot, 1] != hash2):
        slot = (slot + 1) & np.int64(mask)
    return slot


@_jit
def map_insert(table, mask, used, capacity, hashes1, hashes2, offsets, undo_slots, undo_values):
    """Put each key's offset (the larger one wins) in the table; stop once it would hold more than
    ``capacity`` keys.

    Returns (keys added, rows done); when rows done < len(offsets) the caller undoes with `map_undo`.
    The table must have room for ``capacity + 1`` keys without filling up.
    """
    added = 0
    for row in range(len(offsets)):
        slot = _slot(table, mask, hashes1[row], hashes2[row])
        old = table[slot, 2]
        undo_slots[row] = slot
        undo_values[row] = old
        if old == 0:
            if used + added + 1 > capacity:
                return added, row
            added += 1
            table[slot, 0] = hashes1[row]
            table[slot, 1] = hashes2[row]
        stored = np.uint64(offsets[row] + 1)
        if stored > old:
            table[slot, 2] = stored
    return added, len(offsets)


@_jit
def map_undo(table, undo_slots, undo_values, rows):
    """Undo the first ``rows`` insertions of `map_insert`, last first: the table is as it was before."""
    for row in range(rows - 1, -1, -1):
        table[undo_slots[row], 2] = undo_values[row]


@_jit
def map_rehash(table, new_table, new_mask):
    for slot in range(len(table)):
        if table[slot, 2] != 0:
            target = _slot(new_table, new_mask, table[slot, 0], table[slot, 1])
            new_table[target, 0] = table[slot, 0]
            new_table[target, 1] = table[slot, 1]
            new_table[target, 2] = table[slot, 2]


@_jit
def map_lookup(table, mask, hashes1, hashes2, out):
    """``out[i]`` = the latest offset of key i, -1 when the table does not hold it."""
    for row in range(len(hashes1)):
        out[row] = np.int64(table[_slot(table, mask, hashes1[row], hashes2[row]), 2]) - 1


@_jit
def decide(table, mask,
           batch_firsts, batch_counts, batch_expires,
           offsets, hashes1, hashes2, has_key, is_null, starts, ends, timestamp_deltas,
           keep, batch_kept, batch_kept_nulls, batch_max_deltas, batch_body_bytes):
    """The cleaner's rule for every record of each batch: keep a keyed record whose key has no later
    offset in the map, except a tombstone whose batch's delete horizon has passed (``batch_expires``).

    Per batch: records kept, kept tombstones, the largest kept timestamp delta and the kept bytes.
    """
    for batch in range(len(batch_firsts)):
        kept = 0
        nulls = 0
        max_delta = np.int64(-(2 ** 62))
        body = 0
        for row in range(batch_firsts[batch], batch_firsts[batch] + batch_counts[batch]):
            stays = False
            if has_key[row] and not (is_null[row] and batch_expires[batch]):
                stays = np.int64(table[_slot(table, mask, hashes1[row], hashes2[row]), 2]) - 1 <= offsets[row]
            keep[row] = stays
            if stays:
                kept += 1
                if is_null[row]:
                    nulls += 1
                if timestamp_deltas[row] > max_delta:
                    max_delta = timestamp_deltas[row]
                body += ends[row] - starts[row]
        batch_kept[batch] = kept
        batch_kept_nulls[batch] = nulls
        batch_max_deltas[batch] = max_delta
        batch_body_bytes[batch] = body


@_jit
def gather_kept(buf, starts, ends, keep, first, stop, out):
    """Copy the kept records of rows ``first``..``stop - 1`` end to end into ``out``; return the bytes written."""
    cursor = 0
    for row in range(first, stop):
        if keep[row]:
            length = ends[row] - starts[row]
            out[cursor:cursor + length] = buf[starts[row]:ends[row]]
            cursor += length
    return cursor


class RecordArrays:
    """Room for the records of ``capacity`` rows: what `walk_batches` and `scan_section` fill."""

    def __init__(self, capacity: int) -> None:
        self.offsets = np.empty(capacity, np.int64)
        self.hashes1 = np.empty(capacity, np.uint64)
        self.hashes2 = np.empty(capacity, np.uint64)
        self.has_key = np.empty(capacity, np.bool_)
        self.is_null = np.empty(capacity, np.bool_)
        self.starts = np.empty(capacity, np.int64)
        self.ends = np.empty(capacity, np.int64)
        self.timestamp_deltas = np.empty(capacity, np.int64)
        self.keep = np.empty(capacity, np.bool_)

    def fields(self) -> tuple[np.ndarray, ...]:
        """The arrays in the order the kernels take them."""
        return (self.offsets, self.hashes1, self.hashes2, self.has_key, self.is_null, self.starts, self.ends,
                self.timestamp_deltas)


class BatchArrays:
    """Room for ``capacity`` batches: what `walk_batches` fills and `decide` adds to."""

    def __init__(self, capacity: int) -> None:
        self.starts = np.empty(capacity, np.int64)
        self.sizes = np.empty(capacity, np.int64)
        self.kinds = np.empty(capacity, np.int8)
        self.firsts = np.empty(capacity, np.int64)
        self.counts = np.empty(capacity, np.int64)
        self.expires = np.zeros(capacity, np.bool_)
        self.producer_ids = np.empty(capacity, np.int64)
        self.kept = np.empty(capacity, np.int64)
        self.kept_nulls = np.empty(capacity, np.int64)
        self.max_deltas = np.empty(capacity, np.int64)
        self.body_bytes = np.empty(capacity, np.int64)


def warm_up() -> None:
    """Load (or compile, the first time on a machine) every kernel, on a one-record batch."""
    # Read-only buffers, as the cleaner's are (numpy views of bytes read from a segment).
    record = bytes([14, 0, 0, 0, 2, ord("k"), 2, ord("v"), 0])
    section = np.frombuffer(record, np.uint8)
    records = RecordArrays(4)
    batches = BatchArrays(1)
    seeds = np.uint64(1), np.uint64(2)
    header = bytearray(HEADER_SIZE)
    header[8:12] = (HEADER_SIZE - LOG_OVERHEAD + len(record)).to_bytes(4, "big")
    header[57:61] = (1).to_bytes(4, "big")
    buf = np.frombuffer(bytes(header) + record, np.uint8)
    scan_section(section, 0, len(section), 1, 0, *seeds, 0, *records.fields())
    walk_batches(buf, *seeds, 0, batches.starts, batches.sizes, batches.kinds, batches.firsts, batches.counts,
                 batches.expires, batches.producer_ids, *records.fields())
    table, mask = np.zeros((4, 3), np.uint64), np.uint64(3)
    undo_slots, undo_values = np.empty(1, np.int64), np.empty(1, np.uint64)
    map_insert(table, mask, 0, 4, records.hashes1[:1], records.hashes2[:1], records.offsets[:1], undo_slots,
               undo_values)
    map_undo(table, undo_slots, undo_values, 0)
    grown, grown_mask = np.zeros((8, 3), np.uint64), np.uint64(7)
    map_rehash(table, grown, grown_mask)
    map_lookup(grown, grown_mask, records.hashes1[:1], records.hashes2[:1], np.empty(1, np.int64))
    decide(grown, grown_mask, batches.firsts[:1], batches.counts[:1], batches.expires[:1], *records.fields(),
           records.keep, batches.kept, batches.kept_nulls, batches.max_deltas, batches.body_bytes)
    gather_kept(buf, records.starts, records.ends, records.keep, 0, 1, np.empty(len(buf), np.uint8))
