"""The sparse time index of one segment: from a timestamp to an offset at or before the first batch that reaches it.

ListOffsets by timestamp and time-based retention read it: the last entry of a sealed segment is the
segment's largest timestamp.
"""

from __future__ import annotations

import bisect
import operator
import struct
from array import array
from pathlib import Path

from .errors import CorruptIndexError
from .index_file import IndexFile

TIME_INDEX_ENTRY = struct.Struct(
    ">q"  # timestamp: the largest batch max timestamp of the segment so far
    "i"  # relative offset: last offset of the batch that carries that timestamp, minus the base offset
)


class TimeIndex(IndexFile):
    """`<base offset>.timeindex`: sparse map from timestamps to offsets, as Kafka's TimeIndex.

    Byte layout: a sequence of 12-byte big-endian entries (timestamp int64, relative offset int32), no
    header, no checksum. Entry (T, R) says: the largest timestamp in the segment up to offset base + R
    is T, and the batch ending at base + R carries it. An entry is added next to each offset-index
    entry when the running maximum grew, and once more when the segment is sealed (roll or close), so
    a sealed segment's last entry is its largest timestamp. Timestamps strictly increase and offsets
    increase.

    Crash behaviour: as the offset index (see IndexFile): written on flush, sanity-checked on load
    (CorruptIndexError, then rebuilt from the log), entries verified against the log when used.

    Thread-safety: one writer and concurrent readers; the offset column is appended after the
    timestamp and readers use only entries present in both.
    """

    entry_size = TIME_INDEX_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, base_offset, max_index_bytes)
        self._timestamps = array("q")
        self._offsets = array("i")

    @classmethod
    def load(cls, path: Path, base_offset: int, max_index_bytes: int) -> TimeIndex:
        """Read the index file (missing means empty); raise CorruptIndexError if it fails the sanity check."""
        index = cls(path, base_offset, max_index_bytes)
        entries = list(TIME_INDEX_ENTRY.iter_unpack(index._read_file()))
        timestamps = array("q", [timestamp for timestamp, _ in entries])
        offsets = array("i", [relative for _, relative in entries])
        increasing = all(map(operator.lt, timestamps, timestamps[1:])) and all(
            map(operator.le, offsets, offsets[1:])
        )
        if not increasing:
            number = next(
                n
                for n in range(1, len(entries))
                if timestamps[n] <= timestamps[n - 1] or offsets[n] < offsets[n - 1]
            )
            raise CorruptIndexError(
                path, "entries do not increase", entry=number, offset=base_offset + offsets[number]
            )
        if offsets and offsets[0] < 0:
            raise CorruptIndexError(path, "negative relative offset", entry=0)
        index._timestamps, index._offsets = timestamps, offsets
        index._update_full()
        return index

    def __len__(self) -> int:
        return min(len(self._timestamps), len(self._offsets))

    def entry(self, number: int) -> tuple[int, int]:
        """(timestamp, absolute offset) of entry ``number``."""
        return self._timestamps[number], self.base_offset + self._offsets[number]

    @property
    def last_entry(self) -> tuple[int, int] | None:
        count = len(self)
        return self.entry(count - 1) if count else None

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add (timestamp, offset) if ``timestamp`` is above the last entry's; return whether it was added."""
        timestamps, offsets = self._timestamps, self._offsets
        if timestamps and timestamp <= timestamps[-1]:
            return False
        relative = offset - self.base_offset
        if offsets and relative < offsets[-1]:
            raise ValueError(
                f"time index entry ({timestamp}, {offset}) goes back from {self.last_entry} in {self.path}"
            )
        timestamps.append(timestamp)
        offsets.append(relative)
        if len(offsets) >= self.max_entries:
            self._full = True
        return True

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the entry with the largest timestamp <= ``timestamp``; (-1, base offset) if none.

        The first batch whose max timestamp is >= ``timestamp`` is the batch holding the returned offset
        or a later one, so a search may start at that batch.
        """
        number = bisect.bisect_right(self._timestamps, timestamp, 0, len(self)) - 1
        if number < 0:
            return -1, self.base_offset
        return self.entry(number)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        keep = bisect.bisect_left(self._offsets, offset - self.base_offset, 0, len(self))
        del self._timestamps[keep:]
        del self._offsets[keep:]
        self._entries_dropped()

    def reset(self) -> None:
        del self._timestamps[:]
        del self._offsets[:]
        self._entries_dropped()

    def _pack_entries(self, start: int, stop: int) -> bytes:
        pack = TIME_INDEX_ENTRY.pack
        return b"".join(pack(self._timestamps[n], self._offsets[n]) for n in range(start, stop))
