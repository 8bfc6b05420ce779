"""The on-disk log of one partition: Kafka's directory of segments, checkpoints and leader epochs.

`PartitionLog` is what the broker appends produce requests to, what followers append replicated
batches to, what fetches read from (as file slices for sendfile) and what retention trims. Its
directory is `<data>/<topic>-<partition>/` and holds `<20-digit base offset>.log|.index|.timeindex`
per segment (and `.txnindex` for a segment holding ABORT markers), `leader-epoch-checkpoint`,
`recovery-point` and `log-start-offset`. This module keeps
the segment list, the offsets and checkpoints and the order of the steps; the decisions live beside
it: `append` (batch checks and offset assignment), `recovery` (opening after a crash), `retention`
(which segments go) and `retired_segments` (when their files go).
"""

from __future__ import annotations

import bisect
import functools
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from broker_core.clock import wall_clock_ms
from broker_core.records.batch import decode_batch
from broker_core.records.header import TimestampType

from .append import (
    AppendInfo,
    ValidatedBatches,
    check_follower_append,
    check_keys,
    empty_append,
    prepare_leader_append,
    validate_batches,
)
from .checkpoint import (
    CLEANER_CHECKPOINT_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    fsync_directory,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from .config import LogConfig
from .errors import (
    CorruptCheckpointError,
    LeaderEpochOutOfOrderError,
    LogError,
    OffsetOutOfRangeError,
)
from .leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCheckpoint
from .recovery import recover_segments, remove_leftovers
from .retention import retention_rule
from .retired_segments import RetiredSegments
from .segment import LOG_SUFFIX, FileSlice, Segment, segment_file_name
from .swap import SWAP_SUFFIX, finish_swaps
from .transaction_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex, collect_aborted

__all__ = ["AppendInfo", "PartitionLog", "SegmentSwap"]


class FileStep:
    """File work the log handed to another thread after changing its own state. `finish` may run on
    any thread and runs the work once: a second caller waits until the first is done. Until then the
    log finishes it itself before any change that touches those files."""

    def __init__(self, steps: Callable[[], None] | None) -> None:
        self._steps = steps
        self._lock = threading.Lock()

    @property
    def done(self) -> bool:
        return self._steps is None

    def finish(self) -> None:
        with self._lock:
            steps, self._steps = self._steps, None
            if steps is not None:
                steps()


class SegmentSwap(FileStep):
    """The file step of a cleaner swap whose segment list change is already made (`PartitionLog.swap_segments`).

    `finish` renames the swapped-out segments' files to ``*.deleted`` and then the cleaned segment's
    from ``*.swap`` to their plain names, the order crash recovery relies on (`broker_core.log.swap`).
    The log finishes it itself before truncation, retiring the cleaned segment, or close.
    """

    def __init__(self, segment: Segment, steps: Callable[[], None] | None) -> None:
        super().__init__(steps)
        self.segment = segment


def _close_and_delete(segments: list[Segment]) -> None:
    for segment in segments:
        segment.close_and_delete()


class PendingAppend(FileStep):
    """A follower's append whose checks, roll and leader epochs are done and whose bytes are still to
    be written (`PartitionLog.begin_append_as_follower`): `finish` (any thread) writes them; the log
    takes them in (`PartitionLog.finish_append`) on its writer's thread, itself before any other change."""

    def __init__(self, segment: Segment, start: int, view: memoryview, described: list, info: AppendInfo,
                 now_ms: int, on_taken_in: Callable[[AppendInfo], None] | None) -> None:
        super().__init__(self._write)
        self.segment = segment
        self.now_ms = now_ms
        self.error: BaseException | None = None
        self.start = start
        self.view = view
        self.described = described
        self.info = info
        self.on_taken_in = on_taken_in

    def _write(self) -> None:
        try:
            self.segment.write_at(self.start, self.view)
        except BaseException as exc:
            self.error = exc  # the log does not take the append in; whoever does raises it again
            raise


class PartitionLog:
    """A partition's segments, indexes, leader-epoch cache and recovery point.

    On-disk layout: see the module docstring; each structure's class describes its bytes. Offsets are
    contiguous inside a segment; between segments there can be a gap only where a follower was told
    to continue above its log end.

    Durability: appends are written to the page cache and are acknowledged without fsync unless
    ``flush.messages`` / ``flush.ms`` say otherwise (checked on append). `flush` (also run on every
    roll for the sealed segment, and by `close`) fsyncs data and indexes and advances the recovery
    point; a roll's flush runs on the owner's worker thread when it gives one (`run_in_background`),
    as Kafka's log schedules it, and the recovery point moves when it is done. On open, every segment that reaches past the recovery point is re-validated batch by batch
    (header, CRC-32C, contiguous offsets, leader epoch) with its indexes rebuilt, and the log is cut at
    the first bad or partial batch (segments after it are deleted). Segments below the recovery point
    are only checked cheaply (index sanity, the tail after the last index entry); if that fails they
    are re-validated too. A process crash loses nothing acknowledged; an OS crash can lose what was
    above the recovery point.

    Concurrency: one writer per partition. append, append_as_follower, roll, flush, truncate_to,
    truncate_fully_and_start_at, delete_records_before, enforce_retention, delete_expired_segments
    and close must be serialised by the caller (the broker makes them all on its event loop thread).
    read, read_bytes, offset_for_timestamp and the offset properties may run concurrently with the
    writer from other threads: the segment list is replaced, never mutated in place, and each segment publishes its end
    atomically. A follower's append may have its bytes written by another thread between
    `begin_append_as_follower` and `finish_append` (`PendingAppend`); readers do not see them until
    the writer takes the append in, and every writer-side method above takes it in first. A FileSlice's descriptor stays open for ``file.delete.delay.ms`` after its segment
    leaves the log (retention, truncation): the files are renamed to ``*.deleted`` at once and closed
    and unlinked by `delete_expired_segments` (called by the writer-side methods above) once the
    delay has passed, or by `close`. Truncating the active segment shortens its file in place, so a
    slice read before `truncate_to` may then deliver fewer bytes than its length.

    Clocks: times written into segments and checked against segment.ms, retention.ms and flush.ms
    are wall-clock milliseconds, taken from the ``now_ms`` argument of the method when given;
    file.delete.delay.ms runs on the monotonic clock given to `open` (time.monotonic by default).
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        topic: str,
        partition: int,
        segments: list[Segment],
        leader_epochs: LeaderEpochCheckpoint,
        log_start_offset: int,
        recovery_point: int,
        monotonic_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.config = config
        self.topic = topic
        self.partition = partition
        self._segments = segments
        self.leader_epochs = leader_epochs
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._retired = RetiredSegments(config.file_delete_delay_ms, clock=monotonic_clock)
        self._directory_dirty = False
        self._last_flush_ms = wall_clock_ms()
        self._closed = False
        self._unfinished_swap: SegmentSwap | None = None
        # Set by whoever owns the log and has a worker thread for it: runs a roll's flush there (see
        # `_roll_to`). None (tools, tests): a roll flushes on the caller's thread.
        self.run_in_background: Callable[[Callable[[], None]], object] | None = None
        self._pending_flush: FileStep | None = None
        self._pending_flush_segments: tuple[Segment, ...] = ()
        self._pending_append: PendingAppend | None = None
        # Called (on the owner's thread) after every move of the log start, by whoever owns the log:
        # a hosted replica marks the fetch sessions reading it.
        self.on_log_start_moved: Callable[[], None] | None = None
        self.reconfigure(config)

    def reconfigure(self, config: LogConfig) -> None:
        """Take a topic's altered configs: the next append, roll, retention pass and cleaning pass use them.

        Nothing already written changes; a segment rolls under the new segment.bytes/segment.ms when it
        next reaches them. The retired segments' delete delay is kept (they are already scheduled).
        """
        self.finish_append()
        self.config = config
        self._uses_log_append_time = config.uses_log_append_time
        self._max_message_bytes = config.max_message_bytes
        self._max_decompressed_bytes = config.max_decompressed_bytes
        self._segment_bytes = config.segment_bytes
        self._segment_ms = config.segment_ms
        self._has_flush_policy = config.flush_messages is not None or config.flush_ms is not None
        # Segment base offset -> its transaction index; filled by `load_transaction_indexes`.
        self._txn_indexes: dict[int, TransactionIndex] = {}
        # True after a corrupt .txnindex was found on open, until a scan from the log start rebuilt them.
        self.transaction_indexes_lost = False

    # ---------------------------------------------------------------- opening and recovery

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        topic: str = "",
        partition: int = 0,
        monotonic_clock: Callable[[], float] = time.monotonic,
    ) -> PartitionLog:
        """Open (creating if missing) the log in ``directory`` and recover it; see the class docstring.

        ``monotonic_clock`` times file.delete.delay.ms (tests pass a fake one).
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        swap_finished = finish_swaps(directory)
        remove_leftovers(directory)
        leader_epochs = LeaderEpochCheckpoint(directory / LEADER_EPOCH_CHECKPOINT_FILE)
        try:
            recovery_point = read_offset_checkpoint(directory / RECOVERY_POINT_FILE) or 0
        except CorruptCheckpointError:
            recovery_point = 0
        try:
            log_start_offset = read_offset_checkpoint(directory / LOG_START_OFFSET_FILE) or 0
        except CorruptCheckpointError:
            log_start_offset = 0
        stored_log_start_offset = log_start_offset
        # A log with no segment yet (a replica just assigned here) gets its first, empty, segment.
        # Nothing of it needs to be durable: lost in a crash, it is created again the same way. So it
        # is not flushed (eight fsyncs, about 30 ms of a busy disk per replica: what made creating a
        # topic of 1,000 partitions take 20 s on each broker).
        new_log = next(directory.glob(f"*{LOG_SUFFIX}"), None) is None and log_start_offset == 0
        segments, recovered_any = recover_segments(
            directory,
            config,
            leader_epochs,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            clock_ms=wall_clock_ms,
        )
        log_end_offset = segments[-1].next_offset
        log_start_offset = min(max(log_start_offset, segments[0].base_offset), log_end_offset)
        leader_epochs.truncate_from_end(log_end_offset)
        leader_epochs.truncate_from_start(log_start_offset)
        log = cls(
            directory,
            config,
            topic=topic,
            partition=partition,
            segments=segments,
            leader_epochs=leader_epochs,
            log_start_offset=log_start_offset,
            recovery_point=min(recovery_point, log_end_offset),
            monotonic_clock=monotonic_clock,
        )
        log._load_transaction_indexes()
        if new_log:
            log._directory_dirty = True  # the first flush makes the new files' directory entries durable
        elif swap_finished:
            log._directory_dirty = True
            log._write_log_start_offset()
            log.flush()
        elif recovered_any:
            # Recovery's repairs (a cut tail, rebuilt indexes) are not flushed here, and so the
            # recovery point stays where it was: a crash before the next flush finds the same segments
            # past it and repairs them again, the same way. Flushing every recovered replica at once
            # (eight fsyncs each) kept a broker restarted after a SIGKILL with 1,000 replicas from
            # serving for a minute on a busy disk.
            log._directory_dirty = True
            if log_start_offset != stored_log_start_offset:
                log._write_log_start_offset()
        return log

    @classmethod
    def create(cls, directory: Path, config: LogConfig, *, topic: str = "", partition: int = 0,
               monotonic_clock: Callable[[], float] = time.monotonic) -> PartitionLog:
        """A new, empty log in ``directory``, which the caller has just created (so it holds nothing
        to recover): its first segment, and no other file. What `open` does for a directory with no
        segment, without looking for swaps, leftovers, checkpoints, segments or transaction indexes
        first (a topic of 1,000 partitions opens 1,000 of these on each broker). Nothing is flushed:
        lost in a crash, the log is created again the same way by `open`."""
        segment = Segment.create(directory, 0, index_interval_bytes=config.index_interval_bytes,
                                 segment_index_bytes=config.segment_index_bytes, now_ms=wall_clock_ms(),
                                 new_directory=True)
        log = cls(directory, config, topic=topic, partition=partition, segments=[segment],
                  leader_epochs=LeaderEpochCheckpoint(directory / LEADER_EPOCH_CHECKPOINT_FILE, new=True),
                  log_start_offset=0, recovery_point=0, monotonic_clock=monotonic_clock)
        log._directory_dirty = True  # the first flush makes the new files' directory entries durable
        return log

    # ---------------------------------------------------------------- offsets and segments

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        """Everything below this offset was fsynced with its indexes."""
        return self._recovery_point

    @property
    def segments(self) -> list[Segment]:
        """The segments in offset order (a snapshot: the log replaces, never mutates, this list)."""
        return self._segments

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    def _new_segment(self, base_offset: int, now_ms: int) -> Segment:
        segment = Segment.create(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            segment_index_bytes=self.config.segment_index_bytes,
            now_ms=now_ms,
        )
        segment.offsets_may_skip = self.config.compact
        return segment

    # ---------------------------------------------------------------- appending

    def validate(self, records: bytes | bytearray | memoryview, *, as_leader: bool = True) -> ValidatedBatches:
        """Check every batch of ``records`` as an append would (header, max.message.bytes, CRC-32C).

        ``as_leader`` (what a client sent) also checks that each compressed batch decompresses within
        floe.message.max.decompressed.bytes; a follower's batches passed that check on the leader.
        """
        limit = self._max_decompressed_bytes if as_leader else None
        return validate_batches(records, self._max_message_bytes, limit)

    def append(
        self, records: bytes | bytearray | memoryview | ValidatedBatches, *, leader_epoch: int = 0,
        now_ms: int | None = None,
    ) -> AppendInfo:
        """Append a produce request's batches as leader: assign offsets from the log end and stamp ``leader_epoch``.

        Every batch is validated first (header sanity, max.message.bytes, CRC-32C, a record count
        matching its offset range); on any error nothing is written. The input is not modified: each
        batch goes to the file as a patched copy of its first bytes (baseOffset, batchLength,
        partitionLeaderEpoch) followed by the rest of it as given. On a LogAppendTime topic the
        timestamp type, max timestamp and CRC change too, so those batches are copied whole.
        ``records`` may be the result of `validate`, which is then not repeated.
        """
        self.finish_append()
        view, batches = records if isinstance(records, ValidatedBatches) else self.validate(records)
        if self.config.compact:
            check_keys(view, batches, self._max_decompressed_bytes)
        now = wall_clock_ms() if now_ms is None else now_ms
        latest_epoch = self.leader_epochs.latest_epoch
        if latest_epoch is not None and leader_epoch < latest_epoch:
            raise LeaderEpochOutOfOrderError(
                topic=self.topic, partition=self.partition, epoch=leader_epoch, latest_epoch=latest_epoch
            )
        base_offset = self._segments[-1].next_offset
        if not batches:
            return empty_append(base_offset)
        parts, described, info = prepare_leader_append(
            view,
            batches,
            base_offset=base_offset,
            leader_epoch=leader_epoch,
            log_append_time=now if self._uses_log_append_time else -1,
        )
        segment = self._segment_for_append(len(view), base_offset, info.last_offset, now)
        if latest_epoch != leader_epoch:
            self.leader_epochs.assign(leader_epoch, base_offset)
        elif self.leader_epochs.due_before_batches:
            self.leader_epochs.write_pending()  # `start_leader_epoch`'s write, if its worker has not run it yet
        segment.append(parts, described)
        if self._has_flush_policy:
            self._maybe_flush(now)
        return info

    def append_as_follower(
        self, records: bytes | bytearray | memoryview | ValidatedBatches, *, now_ms: int | None = None
    ) -> AppendInfo:
        """Append replicated batches as they are: offsets and leader epochs come from the leader.

        The first batch must start at or above the log end (above it, a new segment starts there) and
        each next batch where the previous one ended, else OffsetsOutOfOrderError; a compacted log
        takes gaps the leader's cleaner left (each batch only has to start above the previous one)
        without rolling; leader epochs must
        not go back, else LeaderEpochOutOfOrderError. Each new epoch is added to the leader-epoch
        cache at its first batch. Nothing is written if any check fails. ``records`` may be the
        result of `validate`, which is then not repeated.
        """
        pending = self.begin_append_as_follower(records, now_ms=now_ms)
        if isinstance(pending, PendingAppend):
            self.finish_append()
            return pending.info
        return pending

    def begin_append_as_follower(
        self, records: bytes | bytearray | memoryview | ValidatedBatches, *, now_ms: int | None = None,
        on_taken_in: Callable[[AppendInfo], None] | None = None,
    ) -> PendingAppend | AppendInfo:
        """`append_as_follower` up to the write of the bytes: the checks, a roll, the new leader epochs.

        Returns the append's info when there is nothing to write; otherwise a `PendingAppend`, whose
        `finish` writes the bytes (on any thread, so that a large replicated append does not hold the
        writer's thread on the disk) and which `finish_append` then takes in: the end readers see,
        the indexes, the flush policy, and ``on_taken_in(info)``. Until then the log end stays where
        it was, and every other change to the log (an append, a roll, truncation, retention, a
        flush, close) takes the pending append in first, waiting for its write if it is under way.
        """
        self.finish_append()
        view, batches = (
            records if isinstance(records, ValidatedBatches) else self.validate(records, as_leader=False)
        )
        now = wall_clock_ms() if now_ms is None else now_ms
        log_end_offset = self.log_end_offset
        if not batches:
            return empty_append(log_end_offset)
        described, new_epochs, info = check_follower_append(
            view,
            batches,
            log_end_offset=log_end_offset,
            latest_epoch=self.leader_epochs.latest_epoch,
            topic=self.topic,
            partition=self.partition,
            allow_gaps=self.config.compact,
        )
        first_offset = info.base_offset
        if first_offset > log_end_offset and not self.config.compact:
            segment = self._roll_to(first_offset, now)
        else:
            segment = self._segment_for_append(len(view), first_offset, info.last_offset, now)
        # Written before the batches' bytes, so a killed process leaves every epoch they carry in the
        # file; without fsyncs (after an election a follower gets such a batch for each partition it
        # follows, and two fsyncs each held the event loop for seconds): the next flush makes it
        # durable before the recovery point passes these batches (LeaderEpochCheckpoint.assign).
        for epoch, start_offset in new_epochs:
            self.leader_epochs.assign(epoch, start_offset, durable=False)
        pending = self._pending_append = PendingAppend(segment, segment.size, view, described, info, now,
                                                              on_taken_in)
        return pending

    @property
    def pending_append(self) -> PendingAppend | None:
        """The follower's append begun and not yet taken in (`begin_append_as_follower`), if any."""
        return self._pending_append

    def finish_append(self) -> None:
        """Take in a follower's pending append (`begin_append_as_follower`), writing its bytes here if
        no other thread has (or waiting for the one that is); nothing when none is pending."""
        pending = self._pending_append
        if pending is None:
            return
        self._pending_append = None
        try:
            pending.finish()
        except BaseException:
            if pending.error is None:
                raise
        if pending.error is not None:
            raise pending.error
        pending.segment.appended(pending.start, pending.view, pending.described)
        if self._has_flush_policy:
            self._maybe_flush(pending.now_ms)
        if pending.on_taken_in is not None:
            pending.on_taken_in(pending.info)

    def _segment_for_append(self, size: int, first_offset: int, last_offset: int, now_ms: int) -> Segment:
        """The active segment, rolled first if this append should not go into it."""
        active = self._segments[-1]
        if active.should_roll(
            size, last_offset, now_ms, segment_bytes=self._segment_bytes, segment_ms=self._segment_ms
        ):
            return self._roll_to(first_offset, now_ms)
        return active

    def roll(self, now_ms: int | None = None) -> Segment:
        """Seal the active segment and start a new one at the log end (no-op on an empty active segment)."""
        self.finish_append()
        return self._roll_to(self.log_end_offset, wall_clock_ms() if now_ms is None else now_ms)

    def _roll_to(self, base_offset: int, now_ms: int) -> Segment:
        """Start a new active segment at ``base_offset`` (>= the log end).

        The sealed segment is flushed and the recovery point moves to ``base_offset``, so recovery
        after a crash only ever has to re-validate the active segment. An empty active segment is
        replaced rather than kept.
        """
        active = self._segments[-1]
        if active.size == 0:
            if active.base_offset == base_offset:
                return active
            self._retire([active])
            new_segment = self._new_segment(base_offset, now_ms)
            self._segments = [*self._segments[:-1], new_segment]
            if len(self._segments) == 1 and base_offset > self._log_start_offset:
                self._log_start_offset = base_offset
                self._write_log_start_offset()
        else:
            active.seal()
            new_segment = self._new_segment(base_offset, now_ms)
            self._segments = [*self._segments, new_segment]
        self._directory_dirty = True
        if self.run_in_background is None:
            self._flush_up_to(base_offset)
        else:
            self._flush_in_background(base_offset)
        self.delete_expired_segments()
        return new_segment

    def _flush_in_background(self, offset: int) -> None:
        """A roll's flush, as Kafka's log does it: the sealed segments' fsyncs, the directory's and the
        recovery point's move to ``offset`` run on the owner's worker thread, so the appends behind
        them (every partition's, on the writer's thread) do not wait on the disk. Until it has run,
        the recovery point stays where it was (a crash re-validates a little more on open), and any
        change to those files on this thread finishes it first (`_finish_flush`)."""
        segments, step = self._flush_step(offset, with_active=False)
        previous = self._pending_flush

        def in_roll_order() -> None:
            if previous is not None:
                previous.finish()  # flushes finish in roll order, so the recovery point only moves up
            step()

        flush = FileStep(in_roll_order)
        self._pending_flush = flush
        self._pending_flush_segments = (*self._pending_flush_segments, *segments) if previous else segments
        self.run_in_background(flush.finish)

    def _finish_flush_of(self, segments: list[Segment]) -> None:
        """`_finish_flush` when the pending flush covers any of ``segments``."""
        pending = self._pending_flush_segments
        if any(segment is other for segment in segments for other in pending):
            self._finish_flush()

    def _finish_flush(self) -> None:
        """Finish the last roll's background flush (waiting for the thread running it, if one is)."""
        flush, self._pending_flush = self._pending_flush, None
        self._pending_flush_segments = ()
        if flush is not None:
            flush.finish()

    # ---------------------------------------------------------------- flushing and closing

    def _maybe_flush(self, now_ms: int) -> None:
        config = self.config
        if (
            config.flush_messages is not None
            and self.log_end_offset - self._recovery_point >= config.flush_messages
        ):
            self.flush()
        elif config.flush_ms is not None and now_ms - self._last_flush_ms >= config.flush_ms:
            self.flush()

    def start_leader_epoch(self, epoch: int) -> None:
        """This replica leads from ``epoch``: record that the epoch starts at the log end, before any
        batch of it, as Kafka's makeLeader does. The file (two fsyncs) is written by the owner's worker
        (`run_in_background`) when it gives one, so that a broker elected leader of hundreds of
        partitions at once does not hold its writer's thread on the disk for each; the first append
        of the epoch writes it first if the worker has not yet."""
        self.finish_append()
        latest = self.leader_epochs.latest_epoch
        if latest is None or latest >= epoch:
            return  # a log with no epoch yet records its first at its first batch (or `begin_first_epoch`)
        self.leader_epochs.assign(epoch, self.log_end_offset, write=False)
        self._off_writer_thread(self.leader_epochs.write_pending)

    def begin_first_epoch(self, epoch: int) -> bool:
        """For a log that holds nothing yet and has no leader epoch recorded: record that ``epoch``
        starts at offset 0, as Kafka records a leader's epoch at its log end when it becomes leader.
        Held in memory only (`LeaderEpochCheckpoint.assign_unwritten`): the checkpoint file is written
        by the next change of the epochs or by the first flush, before the recovery point passes a
        batch; lost in a crash before that, recovery re-validates every batch from offset 0 and
        rebuilds the cache from them. Returns whether it recorded it. Whoever opens a replica may call
        it (off the event loop), so that the first append, as leader or as follower of batches of that
        epoch, rewrites no checkpoint file; a topic of 1,000 partitions writes 1,000 fewer files on
        each broker when it is created."""
        self.finish_append()
        if self.log_end_offset != 0 or self.log_start_offset != 0 or self.leader_epochs.entries:
            return False
        return self.leader_epochs.assign_unwritten(epoch, 0)

    def flush(self) -> None:
        """fsync everything up to the log end (data, indexes, directory) and advance the recovery point."""
        self.finish_append()
        self._flush_up_to(self.log_end_offset)

    def _flush_up_to(self, offset: int) -> None:
        self._finish_flush()
        self._flush_step(offset, with_active=True)[1]()

    def _flush_step(self, offset: int, *, with_active: bool) -> tuple[tuple[Segment, ...], Callable[[], None]]:
        """Flushing up to ``offset`` (>= the recovery point): the segments it fsyncs, chosen on the
        writer's thread (those past the recovery point, and the active one when ``with_active``),
        and the step that fsyncs them, their transaction indexes and the directory if it changed,
        then moves the recovery point. Without the active segment the step touches no file the
        writer still appends to, so it may run on another thread."""
        recovery_point, active = self._recovery_point, self._segments[-1]
        segments = tuple(
            segment for segment in self._segments
            if (segment is active and with_active)
            or (segment is not active and (segment.next_offset > recovery_point or segment.base_offset >= recovery_point))
        )
        indexes = [self._txn_indexes[s.base_offset] for s in segments if s.base_offset in self._txn_indexes]
        directory_dirty, self._directory_dirty = self._directory_dirty, False

        def step() -> None:
            for segment in segments:
                segment.flush(fsync=True)
            for index in indexes:
                index.flush()
            if directory_dirty:
                try:
                    fsync_directory(self.directory)
                except BaseException:
                    self._directory_dirty = True
                    raise
            if offset > self._recovery_point:
                # Durable before the recovery point passes its batches (past it, recovery would not rebuild
                # the cache from them): a new log's first epoch, held in memory, or a follower's entries
                # written without fsyncs (LeaderEpochCheckpoint's class doc).
                self.leader_epochs.write_pending()
                self._recovery_point = offset
                write_offset_checkpoint(self.directory / RECOVERY_POINT_FILE, offset)
            self._last_flush_ms = wall_clock_ms()

        return segments, step

    def close(self) -> None:
        """Clean shutdown: seal and flush the active segment, write the recovery point, close every file."""
        self.finish_append()
        if self._closed:
            return
        self._finish_swap()
        self._segments[-1].seal()
        self.flush()
        self.leader_epochs.write_pending()
        for segment in self._segments:
            segment.close()
        self._retired.delete_all()
        self._closed = True

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- reading

    def _check_range(self, offset: int) -> None:
        log_start_offset, log_end_offset = self._log_start_offset, self.log_end_offset
        if offset < log_start_offset or offset > log_end_offset:
            raise OffsetOutOfRangeError(
                topic=self.topic,
                partition=self.partition,
                offset=offset,
                log_start_offset=log_start_offset,
                log_end_offset=log_end_offset,
            )

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FileSlice | None:
        """Whole batches starting with the one holding ``offset``, from a single segment.

        Stops before the first batch whose last offset is >= ``max_offset`` (the high watermark for
        consumers) and before ``max_bytes`` would be exceeded, except that with ``min_one_batch`` the
        first batch is returned whole even if larger. Returns None when ``offset`` is the log end or
        nothing qualifies. Raises OffsetOutOfRangeError outside [log_start_offset, log_end_offset].
        """
        segments = self._segments
        self._check_range(offset)
        if offset >= segments[-1].next_offset:
            return None
        number = max(0, bisect.bisect_right(segments, offset, key=lambda s: s.base_offset) - 1)
        for segment in segments[number:]:
            if max_offset is not None and segment.base_offset >= max_offset:
                return None
            start = max(offset, segment.base_offset)
            file_slice = segment.read(start, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
            if file_slice is not None:
                return file_slice
            if start < segment.next_offset:
                return None
        return None

    def read_bytes(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> bytes:
        """`read`, returning the slice's bytes (b"" when it returns None)."""
        file_slice = self.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
        if file_slice is None:
            return b""
        return os.pread(file_slice.fd, file_slice.length, file_slice.position)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """Kafka's ListOffsets by time: (offset, timestamp) of the first record at or above log start whose
        timestamp is >= ``timestamp_ms``; None if no record is that recent."""
        log_start_offset = self._log_start_offset
        for segment in self._segments:
            search_from = log_start_offset
            while segment.next_offset > search_from:
                found = segment.find_by_timestamp(timestamp_ms, search_from)
                if found is None:
                    break
                position, header = found
                if header.timestamp_type is TimestampType.LOG_APPEND_TIME and header.records_count:
                    return max(header.base_offset, log_start_offset), header.max_timestamp
                batch = decode_batch(
                    segment.read_batch(position, header),
                    verify_crc=False,
                    max_decompressed_bytes=self._max_decompressed_bytes,
                )
                for record in batch.records:
                    if record.timestamp >= timestamp_ms and record.offset >= log_start_offset:
                        return record.offset, record.timestamp
                # Nothing here after all (the batch straddles the log start, or the cleaner emptied it
                # and it kept its max timestamp): go on with the next batch.
                search_from = header.next_offset
        return None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (epoch, end offset) as LeaderEpochCheckpoint.end_offset_for at the log end."""
        return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    # ---------------------------------------------------------------- transaction indexes

    def _txn_index(self, base_offset: int) -> TransactionIndex:
        index = self._txn_indexes.get(base_offset)
        if index is None:
            index = TransactionIndex(self.directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX))
            self._txn_indexes[base_offset] = index
        return index

    def _load_transaction_indexes(self) -> None:
        """Read every segment's .txnindex; a corrupt one has them all deleted, to be rebuilt from the log start.

        The rebuild is the producer state's scan of the log (`ProducerState.load`), which rewrites the
        indexes from where it starts: see `truncate_transaction_indexes_from`.
        """
        self._txn_indexes = {}
        try:
            for segment in self._segments:
                path = self.directory / segment_file_name(segment.base_offset, TXN_INDEX_SUFFIX)
                self._txn_indexes[segment.base_offset] = TransactionIndex.open(path)
            self._adopt_orphan_transaction_indexes()
        except LogError:
            for segment in self._segments:
                (self.directory / segment_file_name(segment.base_offset, TXN_INDEX_SUFFIX)).unlink(missing_ok=True)
            self._txn_indexes = {}
            self.transaction_indexes_lost = True

    def _adopt_orphan_transaction_indexes(self) -> None:
        """A kill after a cleaner's swap became final (its ``.swap`` files) but before its segments'
        indexes were merged leaves the .txnindex of a segment the cleaned one absorbed: its entries
        move to the index of the segment that now holds its base offset."""
        segments = self._segments
        for path in sorted(self.directory.glob("*" + TXN_INDEX_SUFFIX)):
            base_offset = int(path.name.partition(".")[0])
            if base_offset in self._txn_indexes or not segments or base_offset < segments[0].base_offset:
                continue
            if base_offset >= self.log_end_offset:  # a truncated segment's, killed before it went
                path.unlink()
                continue
            number = bisect.bisect_right(segments, base_offset, key=lambda s: s.base_offset) - 1
            owner = self._txn_index(segments[number].base_offset)
            adopted = sorted({*owner.entries, *TransactionIndex.open(path).entries}, key=lambda e: e.last_offset)
            owner.replace_entries(adopted)
            path.unlink()

    def truncate_transaction_indexes_from(self, offset: int) -> None:
        """Drop every aborted transaction whose marker is at or above ``offset`` (a scan of the log from
        ``offset`` writes them again); from the log start, lost indexes count as rebuilt."""
        self.finish_append()
        for index in self._txn_indexes.values():
            index.truncate_from(offset)
        if offset <= self._log_start_offset:
            self.transaction_indexes_lost = False

    def append_aborted_transaction(self, entry: AbortedTxn) -> None:
        """Record an aborted transaction in the index of the segment holding its marker."""
        self.finish_append()
        segments = self._segments
        number = max(0, bisect.bisect_right(segments, entry.last_offset, key=lambda s: s.base_offset) - 1)
        self._txn_index(segments[number].base_offset).append(entry)

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [fetch_offset, upper_bound_offset) must be told of."""
        segments = self._segments
        number = max(0, bisect.bisect_right(segments, fetch_offset, key=lambda s: s.base_offset) - 1)
        indexes = [self._txn_indexes[s.base_offset].entries for s in segments[number:]
                   if s.base_offset in self._txn_indexes]
        return collect_aborted(indexes, fetch_offset, upper_bound_offset)

    # ---------------------------------------------------------------- truncation and deletion

    def truncate_to(self, offset: int, *, now_ms: int | None = None) -> bool:
        """Follower truncation: drop every batch whose last offset is >= ``offset``; return whether anything went.

        A batch holding ``offset`` goes whole, so the log end becomes that batch's base offset. The
        leader-epoch cache and the recovery point follow the new log end.
        """
        self.finish_append()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            return False
        self._finish_swap()
        self._finish_flush()
        now = wall_clock_ms() if now_ms is None else now_ms
        segments = self._segments
        if segments[0].base_offset > offset:
            self.truncate_fully_and_start_at(offset, now_ms=now)
            return True
        keep = bisect.bisect_right(segments, offset, key=lambda s: s.base_offset)
        removed = segments[keep:]
        self._segments = segments[:keep]
        self._retire(removed)
        self._segments[-1].truncate_to(offset, now)
        self.truncate_transaction_indexes_from(offset)
        log_end_offset = self.log_end_offset
        self.leader_epochs.truncate_from_end(log_end_offset)
        if self._recovery_point > log_end_offset:
            self._recovery_point = log_end_offset
            write_offset_checkpoint(self.directory / RECOVERY_POINT_FILE, log_end_offset)
        if self._log_start_offset > log_end_offset:
            self._log_start_offset = log_end_offset
            self._write_log_start_offset()
        self._truncate_cleaner_checkpoint(log_end_offset)
        self.delete_expired_segments()
        return True

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int | None = None) -> None:
        """Drop the whole log and continue empty at ``offset`` (log start and end both become ``offset``)."""
        self.finish_append()
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        self._finish_swap()
        self._finish_flush()
        now = wall_clock_ms() if now_ms is None else now_ms
        old = self._segments
        self._retire(old)
        self._segments = [self._new_segment(offset, now)]
        self._directory_dirty = True
        self.leader_epochs.clear()
        self._log_start_offset = offset
        self._write_log_start_offset()
        self._recovery_point = offset
        write_offset_checkpoint(self.directory / RECOVERY_POINT_FILE, offset)
        self._truncate_cleaner_checkpoint(offset)
        self.flush()
        self.delete_expired_segments()

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start up to ``offset`` and delete segments wholly below it; return the log start.

        Raises OffsetOutOfRangeError above the log end.
        """
        self.finish_append()
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                topic=self.topic,
                partition=self.partition,
                offset=offset,
                log_start_offset=self._log_start_offset,
                log_end_offset=self.log_end_offset,
            )
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._write_log_start_offset()
            self.leader_epochs.truncate_from_start(offset)
            self._delete_oldest(lambda segment, next_segment: next_segment.base_offset <= offset)
        return self._log_start_offset

    def enforce_retention(
        self,
        now_ms: int | None = None,
        *,
        high_watermark: int | None = None,
        can_delete: Callable[[Segment], bool] | None = None,
    ) -> int:
        """Delete the oldest whole segments that retention.ms or retention.bytes (or the log start) condemn.

        A segment goes when its largest timestamp is more than retention.ms old, or when the log
        without it is still at least retention.bytes, or when it lies wholly below the log start.
        Segments go oldest first and only while each next one qualifies; the active segment never
        goes, nor a segment reaching the ``high_watermark`` (default: the log end), nor one for which
        ``can_delete`` (e.g. "already uploaded to remote storage") says no. The log start offset moves
        to the new first segment. Returns the number of segments deleted.
        """
        self.finish_append()
        condemned = retention_rule(
            self.config,
            now_ms=wall_clock_ms() if now_ms is None else now_ms,
            high_watermark=self.log_end_offset if high_watermark is None else high_watermark,
            log_start_offset=self._log_start_offset,
            size_bytes=self.size_bytes,
            can_delete=can_delete,
        )
        deleted = self._delete_oldest(condemned)
        self.delete_expired_segments()
        return deleted

    def _delete_oldest(self, condemned: Callable[[Segment, Segment], bool]) -> int:
        """Delete segments from the oldest while ``condemned(segment, next segment)``; never the active one."""
        segments = self._segments
        count = 0
        while count < len(segments) - 1 and condemned(segments[count], segments[count + 1]):
            count += 1
        if not count:
            return 0
        self._segments = segments[count:]
        self._retire(segments[:count])
        new_start = self._segments[0].base_offset
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            self._write_log_start_offset()
            self.leader_epochs.truncate_from_start(new_start)
        return count

    def replace_segments(self, old: list[Segment], old_sizes: list[int], cleaned: Segment) -> bool:
        """`swap_segments` with its file step finished on the caller's thread; False if it was refused."""
        swap = self.swap_segments(old, old_sizes, cleaned)
        if swap is None:
            return False
        swap.finish()
        return True

    def swap_segments(self, old: list[Segment], old_sizes: list[int], cleaned: Segment) -> SegmentSwap | None:
        """The cleaner's swap: put ``cleaned`` (files named ``*.swap``) in place of the consecutive ``old``.

        Refused (None, nothing changed) when the log no longer holds exactly ``old`` at those sizes
        (retention, truncation or a close came first), or when ``old`` would include the active
        segment. Otherwise the new segment takes the old ones' place in one replacement of the
        segment list, and the returned `SegmentSwap` holds the file step: the old segments retired
        (renamed ``*.deleted``, their descriptors kept for file.delete.delay.ms as for retention) and
        the new one's files renamed from ``.swap`` to their plain names; see `broker_core.log.swap`
        for why a kill at any point of this leaves a log that opens whole. The file step is left to
        the caller, who may run it on a worker thread: renames wait for the file system's journal,
        which a busy disk (the cleaner's own fsyncs among others) can hold for tens of milliseconds,
        and on the writer's thread that wait would stall every partition's appends and fetches.
        Readers hold descriptors, which renames do not affect.
        """
        self.finish_append()
        self._finish_swap()
        self._finish_flush_of(old)
        segments = self._segments
        if self._closed or not old:
            return None
        try:
            first = next(i for i, segment in enumerate(segments) if segment is old[0])
        except StopIteration:
            return None
        stop = first + len(old)
        if (
            stop >= len(segments)
            or any(a is not b for a, b in zip(segments[first:stop], old, strict=True))
            or [segment.size for segment in old] != old_sizes
        ):
            return None
        cleaned.offsets_may_skip = self.config.compact
        if any(segment.base_offset in self._txn_indexes for segment in old):
            # The cleaner keeps transactional batches and markers whole, so the aborted transactions the
            # old segments' .txnindex files list stay true of the cleaned one: they move to its index,
            # written whole before the others go (a kill in between leaves orphans that the next open
            # adopts, see `_adopt_orphan_transaction_indexes`, and reads tolerate an entry listed
            # twice). Rare, and done here whole, since transaction indexes are read on this thread.
            carried: list[AbortedTxn] = []
            for segment in old:
                index = self._txn_indexes.pop(segment.base_offset, None)
                if index is not None:
                    carried.extend(index.entries)
            self._retire(list(old))
            if carried:
                self._txn_index(cleaned.base_offset).replace_entries(carried)
            self._unlink_transaction_indexes(old, keep=cleaned.base_offset)
            self._segments = [*segments[:first], cleaned, *segments[stop:]]
            cleaned.rename_suffix(SWAP_SUFFIX, "")
            self._directory_dirty = True
            return SegmentSwap(cleaned, None)
        self._segments = [*segments[:first], cleaned, *segments[stop:]]
        self._directory_dirty = True
        retired = list(old)

        def file_step() -> None:
            self._retired.retire(retired)
            self._unlink_transaction_indexes(retired, keep=cleaned.base_offset)
            cleaned.rename_suffix(SWAP_SUFFIX, "")

        swap = SegmentSwap(cleaned, file_step)
        self._unfinished_swap = swap
        return swap

    def _unlink_transaction_indexes(self, segments: list[Segment], *, keep: int) -> None:
        for segment in segments:
            if segment.base_offset != keep:
                (self.directory / segment_file_name(segment.base_offset, TXN_INDEX_SUFFIX)).unlink(missing_ok=True)

    def _finish_swap(self) -> None:
        """Finish the file step of the last swap (waiting for the thread running it, if one is) before
        this thread touches segment files itself."""
        swap, self._unfinished_swap = self._unfinished_swap, None
        if swap is not None:
            swap.finish()

    def _retire(self, segments: list[Segment]) -> None:
        """Take segments out of service: rename to *.deleted now, close and unlink after file.delete.delay.ms."""
        swap = self._unfinished_swap
        if swap is not None and any(segment is swap.segment for segment in segments):
            self._finish_swap()
        self._finish_flush_of(segments)  # its index flushes open the files by name
        self._retired.retire(segments)
        for segment in segments:
            index = self._txn_indexes.pop(segment.base_offset, None)
            if index is not None:
                index.delete()
        if segments:
            self._directory_dirty = True

    def delete_expired_segments(self) -> None:
        """Close and unlink retired segments whose file.delete.delay.ms has passed: on the owner's worker
        thread when it gives one (`run_in_background`), since unlinking a large file waits on the file
        system's journal; nothing in the log refers to them any more, and readers' slices of them have
        had the delay to finish."""
        due = self._retired.take_expired()
        if due:
            self._off_writer_thread(functools.partial(_close_and_delete, due))

    def _off_writer_thread(self, work: Callable[[], None]) -> None:
        """Run ``work`` (file work nothing on the writer's thread waits for) on the owner's worker
        thread when it gives one (`run_in_background`), else here."""
        if self.run_in_background is None:
            work()
        else:
            self.run_in_background(work)

    def _truncate_cleaner_checkpoint(self, offset: int) -> None:
        """Pull a compacted log's first dirty offset back to ``offset``: what is appended after a truncation is dirty."""
        path = self.directory / CLEANER_CHECKPOINT_FILE
        try:
            checkpoint = read_offset_checkpoint(path)
        except CorruptCheckpointError:
            checkpoint = offset + 1
        if checkpoint is not None and checkpoint > offset:
            write_offset_checkpoint(path, offset)

    def _write_log_start_offset(self) -> None:
        write_offset_checkpoint(self.directory / LOG_START_OFFSET_FILE, self._log_start_offset)
        if self.on_log_start_moved is not None:
            self.on_log_start_moved()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, segments={len(self._segments)})"
        )

