"""Segments that left a partition log but whose files must outlive it for file.delete.delay.ms.

A fetch may hold a FileSlice (an open descriptor and a position) of a segment that retention,
truncation or a roll over an empty segment then takes out of the log. `RetiredSegments` renames such a
segment's files to `*.deleted` at once, so a restart never mistakes them for live data (recovery
deletes `*.deleted` files), and closes and unlinks them once the delay has passed on the monotonic
clock it is given. With a delay of 0 the files go at once. It is owned and called by the log's
single writer, except that the file step of a cleaner swap (`PartitionLog.swap_segments`) retires
the swapped-out segments from a worker thread: the queue itself is guarded by a lock. Readers only
ever hold descriptors, which stay valid until the close.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .segment import Segment


class RetiredSegments:
    """The queue of retired segments, each with the monotonic time (seconds) after which its files go."""

    def __init__(self, delete_delay_ms: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._delete_delay_ms = delete_delay_ms
        self._clock = clock
        self._pending: list[tuple[float, Segment]] = []
        self._lock = threading.Lock()

    def retire(self, segments: list[Segment]) -> None:
        """Take ``segments`` out of service: rename to *.deleted now, close and unlink after the delay."""
        delay_ms = self._delete_delay_ms
        for segment in segments:
            if delay_ms == 0:
                segment.close_and_delete()
            else:
                segment.mark_deleted()
                with self._lock:
                    self._pending.append((self._clock() + delay_ms / 1000, segment))

    def delete_expired(self) -> None:
        """Close and unlink the retired segments whose delay has passed."""
        for segment in self.take_expired():
            segment.close_and_delete()

    def take_expired(self) -> list[Segment]:
        """The retired segments whose delay has passed, out of the queue: the caller closes and unlinks
        them (`Segment.close_and_delete`), on whichever thread it likes."""
        now = self._clock()
        with self._lock:
            due = [segment for deadline, segment in self._pending if deadline <= now]
            if due:
                self._pending = [(d, s) for d, s in self._pending if d > now]
        return due

    def delete_all(self) -> None:
        """Close and unlink every retired segment now, delay or not (the log is closing)."""
        with self._lock:
            pending, self._pending = self._pending, []
        for _, segment in pending:
            segment.close_and_delete()
