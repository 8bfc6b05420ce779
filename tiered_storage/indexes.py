"""The ".indexes" object uploaded next to each tiered segment, and the lookups readers make with it.

A remote reader holds only the manifest row and this object (a few KiB: the sparse indexes keep one
entry per ``index.interval.bytes`` of log); with them it turns an offset or a timestamp into a byte
position in the .log object and range-GETs from there, never reading the whole segment.

Byte layout (all integers big-endian), version 2::

    magic                     4 bytes  b"FLXI"
    version                   int16    2
    reserved                  int16    0
    base_offset               int64    the segment's base offset (index entries are relative to it)
    offset_index_length       int32    bytes of section 1, a multiple of 8
    time_index_length         int32    bytes of section 2, a multiple of 12
    leader_epoch_length       int32    bytes of section 3
    producer_snapshot_length  int32    bytes of section 4
    txn_index_length          int32    bytes of section 5, a multiple of 34 (absent in version 1)
    crc32c                    uint32   CRC-32C (Castagnoli) of sections 1-5 as stored
    section 1: the segment's .index file as is: entries (relative offset int32, position int32);
               entry (R, P) says the batch starting at byte P of the .log ends at offset base + R
    section 2: the segment's .timeindex file as is: entries (timestamp int64, relative offset int32);
               entry (T, R) says the largest timestamp up to offset base + R is T
    section 3: the leader-epoch entries covering the segment, in Kafka's checkpoint text format:
               "0\\n<count>\\n" then one "<epoch> <start offset>\\n" line per entry
    section 4: the producer-state snapshot of the segment; empty (the producer state is rebuilt from
               the local log, never from the remote tier)
    section 5: entries in Kafka's .txnindex format (broker_core.log.transaction_index): every aborted
               transaction overlapping the uploaded range, whether its ABORT marker lies in the range
               or later (segments are tiered only below the LSO, so all of them have ended); remote
               read_committed reads (the broker's, the HTTP fetch's, the Spark reader's) skip their
               batches knowing only the indexes of the segment they read

The header is 40 bytes (36 in version 1, which has no section 5 and is still read: no aborted
transactions). Both indexes are sparse (the first batch, at position 0, has no entry), so a
lookup gives a position at or before the wanted batch, and the reader walks batch headers from
there. Decoding checks the magic, version, lengths and CRC and raises CorruptIndexesObjectError
naming the failing field; a SegmentIndexes is immutable and safe to share between threads.
"""

from __future__ import annotations

import bisect
import struct
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

import crc32c

from broker_core.log.errors import CorruptTransactionIndexError
from broker_core.log.transaction_index import ABORTED_TXN, AbortedTxn, decode_entries

INDEXES_MAGIC = b"FLXI"
INDEXES_VERSION = 2
INDEXES_HEADER = struct.Struct(
    ">4s"  # magic
    "h"  # version
    "h"  # reserved, 0
    "q"  # base offset of the segment
    "i"  # offset index section length
    "i"  # time index section length
    "i"  # leader-epoch section length
    "i"  # producer snapshot section length
    "i"  # transaction index section length
    "I"  # CRC-32C of all sections
)
# Version 1: no transaction index section.
INDEXES_HEADER_V1 = struct.Struct(">4shhqiiiiI")
OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
_CHECKPOINT_VERSION = 0


class CorruptIndexesObjectError(ValueError):
    """An indexes object fails decoding: ``reason`` says which field, ``position`` where (bytes)."""

    def __init__(self, reason: str, position: int) -> None:
        super().__init__(f"corrupt indexes object at byte {position}: {reason}")
        self.reason = reason
        self.position = position


def _big_endian_column(data: bytes | memoryview, typecode: str) -> array:
    column = array(typecode, bytes(data))
    if sys.byteorder == "little":
        column.byteswap()
    return column


def encode_leader_epochs(entries: Sequence[tuple[int, int]]) -> bytes:
    """Kafka's checkpoint text of ``(epoch, start offset)`` entries."""
    lines = [str(_CHECKPOINT_VERSION), str(len(entries))]
    lines.extend(f"{epoch} {start}" for epoch, start in entries)
    return ("\n".join(lines) + "\n").encode("ascii")


def _decode_leader_epochs(text: bytes, position: int) -> tuple[tuple[int, int], ...]:
    try:
        lines = text.decode("ascii").split("\n")
        if lines[-1] != "":
            raise ValueError("missing final newline")
        version, count, *rows = lines[:-1]
        if int(version) != _CHECKPOINT_VERSION or int(count) != len(rows):
            raise ValueError(f"version {version}, count {count} for {len(rows)} entries")
        entries = []
        for row in rows:
            epoch, start = row.split(" ")
            entries.append((int(epoch), int(start)))
    except ValueError as err:
        raise CorruptIndexesObjectError(f"leader-epoch section: {err}", position) from err
    return tuple(entries)


def encode_indexes(
    base_offset: int,
    offset_index: bytes,
    time_index: bytes,
    epoch_entries: Sequence[tuple[int, int]],
    producer_snapshot: bytes = b"",
    aborted_transactions: Sequence[AbortedTxn] = (),
) -> bytes:
    """The indexes object of a segment from its .index and .timeindex bytes, its leader epochs and the
    aborted transactions overlapping it."""
    if len(offset_index) % OFFSET_ENTRY_SIZE:
        raise ValueError(
            f"offset index of {len(offset_index)} bytes is not whole {OFFSET_ENTRY_SIZE}-byte entries"
        )
    if len(time_index) % TIME_ENTRY_SIZE:
        raise ValueError(f"time index of {len(time_index)} bytes is not whole {TIME_ENTRY_SIZE}-byte entries")
    epochs = encode_leader_epochs(epoch_entries)
    txn_index = b"".join(entry.encode() for entry in aborted_transactions)
    sections = b"".join((offset_index, time_index, epochs, producer_snapshot, txn_index))
    header = INDEXES_HEADER.pack(
        INDEXES_MAGIC,
        INDEXES_VERSION,
        0,
        base_offset,
        len(offset_index),
        len(time_index),
        len(epochs),
        len(producer_snapshot),
        len(txn_index),
        crc32c.crc32c(sections),
    )
    return header + sections


@dataclass(frozen=True)
class SegmentIndexes:
    """A decoded indexes object: the segment's sparse indexes with absolute offsets, and its epochs.

    ``offsets[i]`` is the last offset of the batch that starts at byte ``positions[i]`` of the .log;
    ``timestamps[i]`` is the largest timestamp of the segment up to offset ``time_offsets[i]``.
    """

    base_offset: int
    offsets: tuple[int, ...]
    positions: tuple[int, ...]
    timestamps: tuple[int, ...]
    time_offsets: tuple[int, ...]
    epoch_entries: tuple[tuple[int, int], ...]
    producer_snapshot: bytes
    aborted_transactions: tuple[AbortedTxn, ...] = ()

    def position_for_offset(self, offset: int) -> int:
        """A byte position at or before the batch holding ``offset`` (0 when no entry is below it).

        The batch at the returned position ends at or before ``offset``, or is the first batch.
        """
        index = bisect.bisect_right(self.offsets, offset) - 1
        return self.positions[index] if index >= 0 else 0

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """An offset at or before the first record whose timestamp is >= ``timestamp_ms``.

        Every batch ending at or before the largest indexed offset whose running maximum timestamp
        is still below ``timestamp_ms`` can be skipped; the answer is the offset after it (the base
        offset when no entry qualifies).
        """
        index = bisect.bisect_left(self.timestamps, timestamp_ms) - 1
        return self.time_offsets[index] + 1 if index >= 0 else self.base_offset

    def position_for_timestamp(self, timestamp_ms: int) -> int:
        """A byte position at or before the first batch with a record timestamp >= ``timestamp_ms``."""
        return self.position_for_offset(self.offset_for_timestamp(timestamp_ms))

    def aborted_between(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset)."""
        return [e for e in self.aborted_transactions
                if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset]

    def index_entries(self) -> list[tuple[int, int]]:
        """``(last offset, position)`` of every indexed batch: the batch boundaries usable as split points."""
        return list(zip(self.offsets, self.positions, strict=True))


def decode_indexes(data: bytes | memoryview) -> SegmentIndexes:
    """Parse and verify an indexes object; raise CorruptIndexesObjectError on any inconsistency."""
    view = memoryview(data)
    if len(view) < INDEXES_HEADER_V1.size:
        raise CorruptIndexesObjectError(f"{len(view)} bytes is shorter than the header", 0)
    magic, version = struct.unpack_from(">4sh", view, 0)
    if magic != INDEXES_MAGIC:
        raise CorruptIndexesObjectError(f"magic {magic!r} is not {INDEXES_MAGIC!r}", 0)
    if version == 1:
        header = INDEXES_HEADER_V1
        _, _, _, base_offset, offset_length, time_length, epoch_length, snapshot_length, crc = (
            header.unpack_from(view, 0))
        txn_length = 0
    elif version == INDEXES_VERSION:
        if len(view) < INDEXES_HEADER.size:
            raise CorruptIndexesObjectError(f"{len(view)} bytes is shorter than the header", 0)
        header = INDEXES_HEADER
        _, _, _, base_offset, offset_length, time_length, epoch_length, snapshot_length, txn_length, crc = (
            header.unpack_from(view, 0))
    else:
        raise CorruptIndexesObjectError(f"unsupported version {version}", 4)
    lengths = (offset_length, time_length, epoch_length, snapshot_length, txn_length)
    if min(lengths) < 0 or header.size + sum(lengths) != len(view):
        raise CorruptIndexesObjectError(f"section lengths {lengths} do not add up to {len(view)} bytes", 16)
    if offset_length % OFFSET_ENTRY_SIZE or time_length % TIME_ENTRY_SIZE or txn_length % ABORTED_TXN.size:
        raise CorruptIndexesObjectError(
            f"index sections of {offset_length}, {time_length} and {txn_length} bytes", 16)
    sections = view[header.size :]
    if crc32c.crc32c(sections) != crc:
        raise CorruptIndexesObjectError("CRC-32C mismatch", header.size - 4)
    offset_section = sections[:offset_length]
    time_section = sections[offset_length : offset_length + time_length]
    epoch_start = offset_length + time_length
    epoch_section = sections[epoch_start : epoch_start + epoch_length]
    snapshot_start = epoch_start + epoch_length
    snapshot = bytes(sections[snapshot_start : snapshot_start + snapshot_length])
    txn_start = snapshot_start + snapshot_length
    try:
        aborted = decode_entries(sections[txn_start:], PurePath("txnindex section"))
    except CorruptTransactionIndexError as err:
        raise CorruptIndexesObjectError(err.reason, header.size + txn_start) from err

    offset_column = _big_endian_column(offset_section, "i")
    time_entries = time_length // TIME_ENTRY_SIZE
    timestamps = tuple(
        struct.unpack_from(">q", time_section, i * TIME_ENTRY_SIZE)[0] for i in range(time_entries)
    )
    time_relative = tuple(
        struct.unpack_from(">i", time_section, i * TIME_ENTRY_SIZE + 8)[0] for i in range(time_entries)
    )
    indexes = SegmentIndexes(
        base_offset=base_offset,
        offsets=tuple(base_offset + r for r in offset_column[0::2]),
        positions=tuple(offset_column[1::2]),
        timestamps=timestamps,
        time_offsets=tuple(base_offset + r for r in time_relative),
        epoch_entries=_decode_leader_epochs(bytes(epoch_section), header.size + epoch_start),
        producer_snapshot=snapshot,
        aborted_transactions=aborted,
    )
    for name, column in (("offset", indexes.offsets), ("position", indexes.positions)):
        if any(b <= a for a, b in zip(column, column[1:], strict=False)):
            raise CorruptIndexesObjectError(f"offset index {name}s are not increasing", header.size)
    if any(b < a for a, b in zip(indexes.timestamps, indexes.timestamps[1:], strict=False)) or any(
        b < a for a, b in zip(indexes.time_offsets, indexes.time_offsets[1:], strict=False)
    ):
        raise CorruptIndexesObjectError("time index is not increasing", header.size + offset_length)
    return indexes
