"""The leader-epoch cache of a partition and its checkpoint file, as in Kafka's LeaderEpochFileCache.

Each entry says "leader epoch E started writing at offset S". Followers use it after a leader change to
find where their log diverges (OffsetsForLeaderEpoch), and the partition log truncates it together
with the log.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import read_checkpoint, write_checkpoint
from .errors import CorruptCheckpointError

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCheckpoint:
    """In-memory epoch entries mirrored to the file ``leader-epoch-checkpoint``.

    File layout (Kafka's, text): a version line ``0``, a count line, then one ``epoch startOffset`` line
    per entry in increasing epoch and offset order. Not checksummed; every change rewrites the file
    atomically (temp file, fsync, rename, fsync of the directory), so a crash leaves the old or the new
    list. A malformed file raises CorruptCheckpointError on load.

    Thread-safety: mutated only by the partition's single writer; readers see an immutable tuple that
    each mutation replaces, so a concurrent lookup sees either the old or the new list.

    Writes owed: an entry may be recorded before its file write (``assign(..., write=False)``,
    `assign_unwritten`), or written without fsyncs (``durable=False``). `write_pending` (any thread; a
    lock orders the file writes) then writes the list as it is when it runs, durably, and
    ``unwritten`` stays true until a durable write of the current list has completed. Two rules keep
    recovery right, and the log follows both:

    - **Before a batch**, a killed process must leave a file that names every epoch the batches carry,
      since recovery checks the batches above the recovery point against it. An empty file (or none)
      is the exception: recovery then rebuilds the cache from those batches. So ``due_before_batches``
      is true only while the file holds entries and lacks the current ones: the log then writes it
      before a batch of the epoch. A new log's first entry (`assign_unwritten`, on a cache of a
      directory just made: ``new``) is therefore not written at its first batch: a topic of 1,000
      partitions writes no checkpoint file when it is created or first written.
    - **Before the recovery point passes the batches** of an entry, its durable write (``unwritten``) is
      paid, since recovery does not re-read batches below the recovery point: a power loss then leaves a
      file that covers them.
    """

    def __init__(self, path: Path, *, new: bool = False) -> None:
        """Load ``path``; with ``new`` (its directory was just made, so it holds no file) read nothing."""
        self.path = path
        entries = [] if new else read_checkpoint(path, fields_per_entry=2) or []
        loaded = tuple(EpochEntry(epoch, start) for epoch, start in entries)
        for previous, entry in zip(loaded, loaded[1:], strict=False):
            if entry.epoch <= previous.epoch or entry.start_offset < previous.start_offset:
                raise CorruptCheckpointError(path, f"entries not increasing: {previous} then {entry}")
        if any(entry.epoch < 0 or entry.start_offset < 0 for entry in loaded):
            raise CorruptCheckpointError(path, "negative epoch or offset")
        self._entries: tuple[EpochEntry, ...] = loaded
        self._unwritten = False  # a durable write of the current entries is owed
        self._file_stale = False  # the file (durable or not) lacks the current entries
        self._file_empty = not loaded  # the file holds no entry (or there is no file)
        self._writing = threading.Lock()

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def unwritten(self) -> bool:
        """Whether a durable write is owed: the file may lack the current entries, or not hold them durably."""
        return self._unwritten

    @property
    def due_before_batches(self) -> bool:
        """Whether the file must be written before a batch of the latest epoch: it holds entries, and
        not the current ones (see the class doc)."""
        return self._file_stale and not self._file_empty

    def assign(self, epoch: int, start_offset: int, *, durable: bool = True, write: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; return whether anything changed.

        As in Kafka: nothing happens if ``epoch`` is already the latest epoch with a start at or below
        ``start_offset``; otherwise every entry with an epoch >= ``epoch`` or a start offset >=
        ``start_offset`` is dropped first, so the list stays increasing in both. With ``durable``
        False the file is replaced without fsyncs (see ``checkpoint.atomic_write``), and a durable
        write is owed (``unwritten``). With ``write`` False only the list changes: the
        caller has `write_pending` run before any batch of the epoch is written (off the writer's
        thread if it likes). See the class doc on writes owed.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {epoch} and start offset {start_offset} must be non-negative")
        latest = self.latest_entry
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return False
        kept = tuple(e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset)
        if write:
            self._replace((*kept, EpochEntry(epoch, start_offset)), durable=durable)
            self._unwritten = not durable
        else:
            self._entries = (*kept, EpochEntry(epoch, start_offset))
            self._unwritten = self._file_stale = True
        return True

    def assign_unwritten(self, epoch: int, start_offset: int) -> bool:
        """`assign` without a file write, for a cache that is empty: the first entry of a new log, written
        by `write_pending` before the recovery point passes a batch (not before the first batch: an
        empty file lets recovery rebuild the cache). Returns whether it recorded the entry."""
        if self._entries:
            return False
        return self.assign(epoch, start_offset, write=False)

    def write_pending(self) -> None:
        """Write the list durably if a write is owed (any thread)."""
        with self._writing:
            if not self._unwritten:
                return
            entries = self._entries
            write_checkpoint(self.path, [(e.epoch, e.start_offset) for e in entries])
            self._file_empty = not entries
            if self._entries is entries:  # else the writer recorded more meanwhile: still unwritten
                self._unwritten = self._file_stale = False

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds ``offset``; None if the offset is below the first entry."""
        entries = self._entries
        index = bisect.bisect_right(entries, offset, key=lambda e: e.start_offset) - 1
        return entries[index].epoch if index >= 0 else None

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """The OffsetsForLeaderEpoch answer for ``epoch``: (epoch found, end offset).

        The end offset is the start offset of the first epoch above ``epoch``, or ``log_end_offset``
        when ``epoch`` is the latest. The epoch found is the largest epoch <= ``epoch`` (``epoch``
        itself if older than every entry). An undefined or unknown-newer epoch gives
        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
        """
        entries = self._entries
        if epoch == UNDEFINED_EPOCH or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if entries[-1].epoch == epoch:
            return epoch, log_end_offset
        higher = bisect.bisect_right(entries, epoch, key=lambda e: e.epoch)
        if higher == len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, entries[0].start_offset
        return entries[higher - 1].epoch, entries[higher].start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated to it)."""
        kept = tuple(e for e in self._entries if e.start_offset < end_offset)
        if len(kept) != len(self._entries):
            self._replace(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below ``start_offset``; the epoch covering it now starts there."""
        entries = self._entries
        below = [e for e in entries if e.start_offset <= start_offset]
        if not below or (len(below) == 1 and below[0].start_offset == start_offset):
            return
        kept = tuple(e for e in entries if e.start_offset > start_offset)
        self._replace((EpochEntry(below[-1].epoch, start_offset), *kept))

    def clear(self) -> None:
        if self._entries:
            if self._file_empty:  # nothing of them is in the file
                with self._writing:
                    self._entries, self._unwritten, self._file_stale = (), False, False
            else:
                self._replace(())

    def _replace(self, entries: tuple[EpochEntry, ...], *, durable: bool = True) -> None:
        with self._writing:
            write_checkpoint(self.path, [(e.epoch, e.start_offset) for e in entries], durable=durable)
            self._entries = entries
            self._unwritten = self._file_stale = False
            self._file_empty = not entries
