"""What the two sparse segment indexes share: a file of fixed-size big-endian entries mirrored in memory.

Entries live in native arrays (searchable with bisect, a few bytes each) and are written to the file
in batches: new entries accumulate in memory and reach the file on `IndexFile.flush`, which the
segment calls on flush, roll and close. The file therefore never holds more entries than memory and
may hold fewer after a crash; segments above the recovery point have their indexes rebuilt from the
log on open, so a short index is never trusted past the recovery point.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path

from .errors import CorruptIndexError


class IndexFile(ABC):
    """Base of OffsetIndex and TimeIndex: file bookkeeping; subclasses own the entry arrays."""

    entry_size: int = 0

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        # Entries [0, _flushed) are in the file; _file_entries is how many entries the file holds.
        self._flushed = 0
        self._file_entries = 0
        self._full = False

    @abstractmethod
    def __len__(self) -> int: ...

    @property
    def is_full(self) -> bool:
        return self._full

    def _update_full(self) -> None:
        self._full = len(self) >= self.max_entries

    def _read_file(self) -> bytes:
        """The file's bytes (empty if missing); raise CorruptIndexError if not a whole number of entries."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        if len(data) % self.entry_size:
            raise CorruptIndexError(self.path, f"size {len(data)} is not a multiple of {self.entry_size}")
        self._flushed = self._file_entries = len(data) // self.entry_size
        return data

    @abstractmethod
    def _pack_entries(self, start: int, stop: int) -> bytes:
        """The on-disk bytes of entries [start, stop)."""

    def _entries_dropped(self) -> None:
        """Call after removing entries from memory so that flush shortens the file too."""
        self._flushed = min(self._flushed, len(self))
        self._update_full()

    def flush(self, *, fsync: bool) -> None:
        """Write entries not yet in the file, cut off entries truncated since, and optionally fsync."""
        count = len(self)
        if self._flushed == count and self._file_entries == count and not fsync:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if self._file_entries > self._flushed:
                os.ftruncate(fd, self._flushed * self.entry_size)
            data = memoryview(self._pack_entries(self._flushed, count))
            position = self._flushed * self.entry_size
            while data:
                written = os.pwrite(fd, data, position)
                data = data[written:]
                position += written
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._flushed = self._file_entries = count

    @abstractmethod
    def reset(self) -> None:
        """Forget every entry, in memory and (at the next flush) in the file."""
