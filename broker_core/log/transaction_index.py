"""Kafka's `.txnindex`: the aborted transactions whose ABORT marker lies in one segment.

Byte layout: a sequence of fixed 34-byte entries (big-endian), no header, no checksum, as Kafka's
TransactionIndex/AbortedTxn write them:

    offset  size  field
    0       2     version           0
    2       8     producerId
    10      8     firstOffset       the transaction's first offset in this partition
    18      8     lastOffset        the offset of its ABORT marker
    26      8     lastStableOffset  the partition's LSO once this transaction was complete

Entries are appended in marker order, so lastOffset grows through the file. The file is derived data:
the producer state's scan of the log rewrites every entry at or above the offset it scans from (see
`ProducerState.load`), so after a crash a torn or missing tail is written again; a file whose size is
not a whole number of entries, or whose entries go backwards, raises CorruptTransactionIndexError and
the partition rebuilds every index from the log start. The file of a segment with no aborted
transaction does not exist. Thread-safety: written by the partition's single writer; readers take
`entries`, a tuple replaced (never mutated) on every change.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

from .errors import CorruptTransactionIndexError

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN = struct.Struct(
    ">h"  # version
    "q"  # producerId
    "q"  # firstOffset
    "q"  # lastOffset
    "q"  # lastStableOffset
)
ABORTED_TXN_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: Fetch's (producer_id, first_offset) plus where it ended."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ABORTED_TXN.pack(
            ABORTED_TXN_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def decode_entries(data: bytes | bytearray | memoryview, path: PurePath) -> tuple[AbortedTxn, ...]:
    """Parse a whole .txnindex file's bytes; raise CorruptTransactionIndexError on a partial or disordered file."""
    if len(data) % ABORTED_TXN.size:
        raise CorruptTransactionIndexError(path, f"size {len(data)} is not a multiple of {ABORTED_TXN.size}")
    entries = []
    last = -1
    for number, (version, producer_id, first, end, stable) in enumerate(ABORTED_TXN.iter_unpack(data)):
        if version < 0:
            raise CorruptTransactionIndexError(path, f"negative version {version}", entry=number)
        if end < last or first > end:
            raise CorruptTransactionIndexError(
                path, f"entry [{first}, {end}] out of order after last offset {last}", entry=number
            )
        last = end
        entries.append(AbortedTxn(producer_id, first, end, stable))
    return tuple(entries)


class TransactionIndex:
    """The `<base offset>.txnindex` of one segment, held in memory and appended to on disk."""

    def __init__(self, path: Path, entries: tuple[AbortedTxn, ...] = ()) -> None:
        self.path = path
        self.entries = entries

    @classmethod
    def open(cls, path: Path) -> TransactionIndex:
        """Read ``path`` (a missing file is an empty index); raises CorruptTransactionIndexError."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        return cls(path, decode_entries(data, path))

    def append(self, entry: AbortedTxn) -> None:
        if self.entries and entry.last_offset < self.entries[-1].last_offset:
            raise CorruptTransactionIndexError(
                self.path,
                f"appending last offset {entry.last_offset} below {self.entries[-1].last_offset}",
                entry=len(self.entries),
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, entry.encode())
        finally:
            os.close(fd)
        self.entries = (*self.entries, entry)

    def truncate_from(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset`` (the file goes when none is left)."""
        kept = tuple(e for e in self.entries if e.last_offset < offset)
        if len(kept) == len(self.entries):
            return
        self._rewrite(kept)

    def replace_entries(self, entries: Iterable[AbortedTxn]) -> None:
        """Make ``entries`` (in marker order) the whole index, written to a new file renamed over the old
        one and fsynced, so a kill leaves either index whole."""
        self.entries = tuple(entries)
        temporary = self.path.with_name(self.path.name + ".tmp")
        with open(temporary, "wb") as file:
            file.write(b"".join(entry.encode() for entry in self.entries))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)

    def _rewrite(self, entries: Iterable[AbortedTxn]) -> None:
        self.entries = tuple(entries)
        if not self.entries:
            self.path.unlink(missing_ok=True)
            return
        with open(self.path, "r+b") as file:
            file.truncate(len(self.entries) * ABORTED_TXN.size)

    def flush(self) -> None:
        if not self.entries:
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self) -> None:
        self.entries = ()
        self.path.unlink(missing_ok=True)


def collect_aborted(
    indexes: Iterable[Sequence[AbortedTxn]], fetch_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """The aborted transactions that overlap [fetch_offset, upper_bound_offset), as Kafka's collectAbortedTxns.

    ``indexes`` are the entries of the index of the segment holding ``fetch_offset`` and of every later
    one, in order (lazily: the walk may stop early).
    A transaction overlaps when its marker is at or above the fetch offset and it began below the
    upper bound. The walk stops after the first index holding an entry whose last stable offset
    reaches the upper bound: every transaction begun below the bound had ended by then.
    """
    found = []
    for entries in indexes:
        done = False
        for entry in entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                done = True
        if done:
            break
    # A kill during a cleaner's swap can leave an entry in two segments' indexes (see replace_segments).
    return list(dict.fromkeys(found))
