"""The sparse offset index of one segment: where in the .log file to start looking for an offset.

A fetch for offset O looks up the largest indexed offset <= O, jumps to its file position and walks
batch headers from there; the index keeps that walk under `index.interval.bytes` plus one batch.
"""

from __future__ import annotations

import bisect
import operator
import struct
import sys
from array import array
from pathlib import Path

from .errors import CorruptIndexError
from .index_file import IndexFile

OFFSET_INDEX_ENTRY = struct.Struct(
    ">i"  # relative offset: last offset of the indexed batch minus the segment's base offset
    "i"  # position: byte position of that batch in the .log file
)


def _strictly_increasing(column: array) -> bool:
    return all(map(operator.lt, column, column[1:]))


class OffsetIndex(IndexFile):
    """`<base offset>.index`: sparse map from offsets to .log positions, as Kafka's OffsetIndex.

    Byte layout: a sequence of 8-byte big-endian entries (relative offset int32, position int32), no
    header, no checksum. An entry (R, P) says that the batch starting at byte P of the segment ends at
    offset base + R. Kafka's rule decides when to add one: when more than `index.interval.bytes` of
    batches were appended since the previous entry, the next batch is indexed. Both columns strictly
    increase; the first batch of a segment is never indexed (position 0 needs no entry).

    The file holds exactly the entries written (no preallocation), so it needs no trimming on close.
    Crash behaviour: entries reach the file on flush only; loading checks the size is whole entries
    and both columns strictly increase, raising CorruptIndexError otherwise, and the owning segment
    then rebuilds the index from its log. Entries whose bytes were damaged but still look ordered are
    caught when used: the segment checks the batch header found at each looked-up position.

    Thread-safety: one writer (append, truncate, flush) and any number of concurrent readers (lookup):
    the writer appends the offset before the position and readers only use entries present in both.
    """

    entry_size = OFFSET_INDEX_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, base_offset, max_index_bytes)
        self._offsets = array("i")
        self._positions = array("i")

    @classmethod
    def load(cls, path: Path, base_offset: int, max_index_bytes: int) -> OffsetIndex:
        """Read the index file (missing means empty); raise CorruptIndexError if it fails the sanity check."""
        index = cls(path, base_offset, max_index_bytes)
        columns = array("i", index._read_file())
        if sys.byteorder == "little":
            columns.byteswap()
        offsets, positions = columns[0::2], columns[1::2]
        if not (_strictly_increasing(offsets) and _strictly_increasing(positions)):
            number = next(
                n
                for n in range(1, len(offsets))
                if offsets[n] <= offsets[n - 1] or positions[n] <= positions[n - 1]
            )
            raise CorruptIndexError(
                path, "entries do not strictly increase", entry=number, offset=base_offset + offsets[number]
            )
        if offsets and (offsets[0] < 0 or positions[0] < 0):
            raise CorruptIndexError(path, "negative relative offset or position", entry=0)
        index._offsets, index._positions = offsets, positions
        index._update_full()
        return index

    def __len__(self) -> int:
        return min(len(self._offsets), len(self._positions))

    def entry(self, number: int) -> tuple[int, int]:
        """(absolute offset, position) of entry ``number``."""
        return self.base_offset + self._offsets[number], self._positions[number]

    @property
    def last_entry(self) -> tuple[int, int] | None:
        count = len(self)
        return self.entry(count - 1) if count else None

    def append(self, offset: int, position: int) -> None:
        """Index the batch at ``position`` whose last offset is ``offset``."""
        relative = offset - self.base_offset
        offsets, positions = self._offsets, self._positions
        if offsets and (relative <= offsets[-1] or position <= positions[-1]):
            raise ValueError(
                f"index entry ({offset}, {position}) does not follow {self.last_entry} in {self.path}"
            )
        offsets.append(relative)
        positions.append(position)
        if len(offsets) >= self.max_entries:
            self._full = True

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the entry with the largest offset <= ``offset``; (base offset, 0) if none."""
        count = len(self)
        number = bisect.bisect_right(self._offsets, offset - self.base_offset, 0, count) - 1
        if number < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[number], self._positions[number]

    def lookup_by_position(self, position: int) -> tuple[int, int] | None:
        """(offset, position) of the entry with the largest position <= ``position``; None if none."""
        count = len(self)
        number = bisect.bisect_right(self._positions, position, 0, count) - 1
        if number < 0:
            return None
        return self.base_offset + self._offsets[number], self._positions[number]

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        keep = bisect.bisect_left(self._offsets, offset - self.base_offset, 0, len(self))
        del self._offsets[keep:]
        del self._positions[keep:]
        self._entries_dropped()

    def reset(self) -> None:
        del self._offsets[:]
        del self._positions[:]
        self._entries_dropped()

    def _pack_entries(self, start: int, stop: int) -> bytes:
        columns = array("i", bytes(8 * (stop - start)))
        columns[0::2] = self._offsets[start:stop]
        columns[1::2] = self._positions[start:stop]
        if sys.byteorder == "little":
            columns.byteswap()
        return columns.tobytes()
