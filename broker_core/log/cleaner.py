"""Kafka's log cleaner for one partition log: keep the latest record of every key, never renumbering offsets.

A compacted log (cleanup.policy names compact) has a clean head, already cleaned, and a dirty tail
written since; the offset `cleaner-offset-checkpoint` (in the partition directory) separates them.
Cleaning is three steps, split between the log's writer and a cleaner process:

- `plan_cleaning` (on the log's writer, the broker's event loop) picks the cleanable section: sealed
  segments from the log start up to the first uncleanable offset, which is the base offset of the
  first segment that is the active one, reaches the high watermark, or holds a record younger than
  min.compaction.lag.ms. It is due when the dirty bytes are at least min.cleanable.dirty.ratio of the
  section, or when its oldest dirty record is older than max.compaction.lag.ms. The plan carries a
  picklable `CleaningJob` naming the segment files and their sizes.
- `clean` (in a cleaner process through `clean_in_process`, or on any thread) opens those files and
  builds an `OffsetMap` of key -> latest offset over whole dirty segments (as many as the map
  holds), then rewrites the section up to the end of the mapped segments
  in groups of consecutive segments whose sizes add up to at most segment.bytes, into `.cleaned`
  files, renamed to `.swap` once fsynced (see `broker_core.log.swap`).
- `apply_cleaning` (on the writer again) opens each group's `.swap` segment and swaps it in with
  `PartitionLog.replace_segments`, which refuses a group whose segments changed meanwhile, and moves
  the checkpoint to the end of the mapped section.

Record rules, as Kafka's Cleaner: a record stays when no later record of its key is in the map and it
has a key; a tombstone (null value) stays until delete.retention.ms after the pass that first saw it,
which stamps that deadline into its batch (KIP-534: the delete-horizon attribute, with the batch's
baseTimestamp holding the deadline, record timestamps unchanged). Batches keep their base offset,
lastOffsetDelta, partition leader epoch, producer id, epoch and base sequence, and codec; a batch left
with no record is dropped, except the last batch of a producer (kept as an empty batch so producer
state survives a restart) and the last batch of a group (so the cleaned segment ends where its group
ended). Transactional batches and control batches (markers) are kept whole and their keys are not
mapped: Floe keeps them rather than decide which aborted or finished transactions Kafka could drop.
Reading and writing go through an `IoThrottle`: each cleaner process holds its share of
log.cleaner.io.max.bytes.per.second.

The per-record work runs in native code (`broker_core.log.cleaner_kernels`): segments are read in
pieces of 1 MiB whose batches and records one kernel call walks into arrays (offset, 128-bit key hash,
null value, byte range, timestamp delta), the offset map is an open-addressing table of those hashes,
one call decides every record of a piece, and one copies the kept records' bytes; Python then handles
each batch as a whole (header, CRC, codec). A compressed batch is decompressed once and walked the
same way. `scan_records` is the record-at-a-time Python scan the kernels are tested against.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c

from broker_core.records.batch import build_batch, decode_batch
from broker_core.records.compression import compress, decompress
from broker_core.records.errors import CorruptBatchError
from broker_core.records.header import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    CRC_OFFSET,
    CURRENT_MAGIC,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    Compression,
    TimestampType,
    compute_crc,
)
from broker_core.records.varint import MAX_VARLONG_SIZE, decode_unsigned_varint

from .checkpoint import (
    CLEANER_CHECKPOINT_FILE,
    fsync_directory,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from .config import LogConfig
from .errors import CorruptCheckpointError, LogError
from .offset_map import OffsetMap
from .partition_log import PartitionLog, SegmentSwap
from .segment import (
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    AppendedBatch,
    Segment,
    segment_file_name,
)
from .swap import CLEANED_SUFFIX, SWAP_SUFFIX

READ_CHUNK_BYTES = 1 << 20
WRITE_CHUNK_BYTES = 1 << 20
_LAST_OFFSET_DELTA = 23  # byte position of lastOffsetDelta in a batch (under the CRC)
_UNLIMITED_RATE = 1e300


class CleaningAbortedError(LogError):
    """The pass was asked to stop (the broker is stopping); its `.cleaned` files were removed."""


class OffsetMapTooSmallError(LogError):
    """Not even one dirty segment's keys fit the offset map: log.cleaner.dedupe.buffer.size is too small."""

    def __init__(self, *, path: Path, keys: int, capacity: int) -> None:
        super().__init__(
            f"segment {path} holds {keys} keys but the cleaner's offset map holds {capacity}: "
            "raise log.cleaner.dedupe.buffer.size or lower segment.bytes"
        )
        self.keys = keys
        self.capacity = capacity


class IoThrottle:
    """A byte rate (log.cleaner.io.max.bytes.per.second, or a cleaner process's share of it) that the
    callers of one process share: each sleeps as long as its bytes put them ahead of the rate."""

    def __init__(self, bytes_per_second: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if bytes_per_second <= 0:
            raise ValueError(f"an I/O rate must be positive, got {bytes_per_second}")
        self._rate = bytes_per_second
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._start = clock()
        self._bytes = 0

    def acquire(self, nbytes: int) -> None:
        if self._rate >= _UNLIMITED_RATE:
            return
        with self._lock:
            now = self._clock()
            self._bytes += nbytes
            wait = self._start + self._bytes / self._rate - now
            if wait <= 0 and now - self._start > 1.0:
                self._start, self._bytes = now, 0
        if wait > 0:
            self._sleep(wait)


# ---------------------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class CleaningJob:
    """What the cleaning step needs, and nothing of the live log: it can be sent to another process.

    The segments are read by file name, ``sizes`` bytes each; ``ends`` are the offsets where the
    segment after each one began when the plan was made.
    """

    directory: Path
    config: LogConfig
    base_offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    ends: tuple[int, ...]
    first_dirty_offset: int
    producer_last_offsets: frozenset[tuple[int, int]]
    now_ms: int


@dataclass(frozen=True)
class CleaningPlan:
    """What one pass may clean: ``segments`` from the log start, with their sizes when the plan was made."""

    log: PartitionLog
    segments: tuple[Segment, ...]
    job: CleaningJob
    first_uncleanable_offset: int
    dirty_ratio: float

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.job.sizes


def read_cleaner_checkpoint(log: PartitionLog) -> int:
    """The first dirty offset: the checkpoint, if it lies within the log, else the log start."""
    try:
        offset = read_offset_checkpoint(log.directory / CLEANER_CHECKPOINT_FILE)
    except CorruptCheckpointError:
        offset = None
    if offset is None or not log.log_start_offset <= offset <= log.log_end_offset:
        return log.log_start_offset
    return offset


def plan_cleaning(
    log: PartitionLog,
    *,
    high_watermark: int,
    producer_last_offsets: frozenset[tuple[int, int]] = frozenset(),
    now_ms: int,
    force: bool = False,
) -> CleaningPlan | None:
    """The next pass over ``log``, or None when it is not compacted or not due (``force``: due if anything is dirty).

    Called on the log's writer. ``producer_last_offsets`` are (producer id, last offset) of each
    producer's last batch, which the pass keeps.
    """
    config = log.config
    if not config.compact:
        return None
    segments = log.segments
    first_dirty = read_cleaner_checkpoint(log)
    cleanable: list[Segment] = []
    for number, segment in enumerate(segments[:-1]):
        next_base = segments[number + 1].base_offset
        if next_base > high_watermark:
            break
        if config.min_compaction_lag_ms > 0 and segment.largest_timestamp > now_ms - config.min_compaction_lag_ms:
            break
        cleanable.append(segment)
    if not cleanable:
        return None
    ends = tuple(segments[number + 1].base_offset for number in range(len(cleanable)))
    sizes = tuple(segment.size for segment in cleanable)
    dirty_bytes = sum(size for segment, size in zip(cleanable, sizes, strict=True) if segment.base_offset >= first_dirty)
    total_bytes = sum(sizes)
    if dirty_bytes == 0:
        return None
    ratio = dirty_bytes / total_bytes if total_bytes else 0.0
    oldest_dirty = min(
        (segment.first_batch_timestamp for segment in cleanable if segment.base_offset >= first_dirty), default=now_ms
    )
    overdue = now_ms - oldest_dirty > config.max_compaction_lag_ms
    if not (force or overdue or ratio >= config.min_cleanable_dirty_ratio):
        return None
    job = CleaningJob(
        directory=log.directory,
        config=config,
        base_offsets=tuple(segment.base_offset for segment in cleanable),
        sizes=sizes,
        ends=ends,
        first_dirty_offset=first_dirty,
        producer_last_offsets=producer_last_offsets,
        now_ms=now_ms,
    )
    return CleaningPlan(log=log, segments=tuple(cleanable), job=job, first_uncleanable_offset=ends[-1],
                        dirty_ratio=1.0 if overdue else ratio)


# ---------------------------------------------------------------------------------------- cleaning


@dataclass(frozen=True)
class CleanedGroup:
    """Plan segments ``numbers`` (consecutive) and the base offset of the `.swap` segment replacing them."""

    numbers: tuple[int, ...]
    base_offset: int


@dataclass
class CleaningResult:
    groups: list[CleanedGroup]
    first_dirty_after: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int


class _Piece:
    """Whole batches read from one segment at ``position``, walked by `cleaner_kernels.walk_batches`:
    their places, kinds and records in ``batches`` and ``records`` (arrays the pass reuses)."""

    def __init__(self, data: bytes, position: int, count: int, consumed: int, rows: int, batches: Any,
                 records: Any) -> None:
        self.data = data
        self.view = memoryview(data)
        self.position = position
        self.count = count
        self.consumed = consumed
        self.rows = rows
        self.batches = batches
        self.records = records

    def batch(self, number: int) -> tuple[memoryview, BatchHeader]:
        start = int(self.batches.starts[number])
        header = BatchHeader(*BATCH_HEADER.unpack_from(self.data, start))
        return self.view[start:start + header.size], header


class _Pass:
    """One cleaning pass's reading, throttling and abort checks (in one cleaner process or thread)."""

    def __init__(self, job: CleaningJob, offset_map: OffsetMap, throttle: IoThrottle | None, abort: Any) -> None:
        self.job = job
        self.offset_map = offset_map
        self.seeds = offset_map.seeds
        self.throttle = throttle
        self.abort = abort
        self.bytes_read = 0
        self.bytes_written = 0
        self.records_read = 0
        self.records_kept = 0
        self.max_decompressed = job.config.max_decompressed_bytes
        self.fds: list[int] = []
        self._scratch: tuple[Any, Any] | None = None
        self._scratch_bytes = 0

    def open(self) -> None:
        """Open every segment of the job by name (FileNotFoundError if retention took one meanwhile)."""
        for base_offset in self.job.base_offsets:
            self.fds.append(os.open(self.job.directory / segment_file_name(base_offset, LOG_SUFFIX), os.O_RDONLY))

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def check_abort(self) -> None:
        if self.abort is not None and self.abort.is_set():
            raise CleaningAbortedError("the cleaner is stopping")

    def io(self, nbytes: int) -> None:
        if self.throttle is not None:
            self.throttle.acquire(nbytes)

    def _arrays(self, nbytes: int) -> tuple[Any, Any]:
        """Batch and record arrays with room for what ``nbytes`` of batches can hold (reused piece after piece)."""
        from .cleaner_kernels import MIN_RECORD_BYTES, BatchArrays, RecordArrays

        if self._scratch is None or nbytes > self._scratch_bytes:
            self._scratch_bytes = max(nbytes, READ_CHUNK_BYTES)
            self._scratch = (BatchArrays(self._scratch_bytes // HEADER_SIZE + 1),
                             RecordArrays(self._scratch_bytes // MIN_RECORD_BYTES + 1))
        return self._scratch

    def _walk(self, data: bytes, position: int) -> _Piece:
        import numpy as np

        from . import cleaner_kernels as kernels

        batches, records = self._arrays(len(data))
        verdict, count, consumed, rows, bad_position, _ = kernels.walk_batches(
            np.frombuffer(data, np.uint8), *self.seeds, self.job.now_ms, batches.starts, batches.sizes,
            batches.kinds, batches.firsts, batches.counts, batches.expires, batches.producer_ids, *records.fields())
        if verdict == kernels.BAD_BATCH_LENGTH:
            length = int.from_bytes(data[bad_position + 8:bad_position + 12], "big", signed=True)
            raise CorruptBatchError(f"batch length {length} in a segment of {self.job.directory}",
                                    position=position + bad_position)
        if verdict == kernels.BAD_RECORDS:
            base_offset = int.from_bytes(data[consumed:consumed + 8], "big", signed=True)
            raise CorruptBatchError(f"records of the batch at offset {base_offset} end early",
                                    position=position + bad_position)
        return _Piece(data, position, count, consumed, rows, batches, records)

    def pieces(self, number: int) -> Iterator[_Piece]:
        """The batches of plan segment ``number``, read in large chunks, walked a chunk at a time."""
        fd, size = self.fds[number], self.job.sizes[number]
        position = 0
        while position < size:
            self.check_abort()
            chunk = os.pread(fd, min(READ_CHUNK_BYTES, size - position), position)
            if len(chunk) < HEADER_SIZE:
                raise CorruptBatchError(f"a segment of {self.job.directory} ends inside a batch header",
                                        position=position)
            self.io(len(chunk))
            self.bytes_read += len(chunk)
            piece = self._walk(chunk, position)
            if piece.count == 0:  # one batch larger than a chunk
                whole = os.pread(fd, LOG_OVERHEAD + int.from_bytes(chunk[8:12], "big", signed=True), position)
                self.io(len(whole) - len(chunk))
                piece = self._walk(whole, position)
                if piece.count == 0:
                    raise CorruptBatchError(f"a segment of {self.job.directory} ends inside a batch",
                                            position=position)
            yield piece
            position += piece.consumed

    def records(self, data: memoryview, header: BatchHeader) -> list:
        return decode_batch(data, 0, verify_crc=False, max_decompressed_bytes=self.max_decompressed).records

    def compressed_rows(self, data: memoryview, header: BatchHeader) -> tuple[Any, Any, int]:
        """A compressed batch's records section (decompressed once) and its records, as the kernels describe them."""
        import numpy as np

        from . import cleaner_kernels as kernels

        section = np.frombuffer(records_section(data, header, self.max_decompressed), np.uint8)
        records = kernels.RecordArrays(len(section) // kernels.MIN_RECORD_BYTES + 1)
        rows, bad = kernels.scan_section(section, 0, len(section), header.records_count, header.base_offset,
                                         *self.seeds, 0, *records.fields())
        if bad >= 0:
            raise CorruptBatchError(f"records of the batch at offset {header.base_offset} end early", position=bad)
        return section, records, rows


# What the cleaner needs of one record, read without decoding its value or headers (the reference for
# `cleaner_kernels.scan_section`, which gives the same facts with a 128-bit hash for the MD5):
# (offset, MD5 of the key or None, is a tombstone, start and end of its bytes in the records section,
# timestamp delta).
Scanned = tuple[int, bytes | None, bool, int, int, int]


def records_section(data: memoryview, header: BatchHeader, limit: int) -> bytes | memoryview:
    """The batch's records, decompressed when the batch names a codec."""
    section = data[HEADER_SIZE:header.size]
    if header.compression is Compression.NONE:
        return section
    return decompress(header.compression, section, limit=limit)


def scan_records(section: bytes | memoryview, count: int, base_offset: int) -> list[Scanned]:
    """Each record's `Scanned` facts, walking the varints inline (most are one or two bytes) instead of
    decoding whole records: keys are hashed, values and headers skipped."""
    out = []
    position = 0
    md5 = hashlib.md5
    try:
        for _ in range(count):
            start = position
            byte = section[position]
            if byte < 0x80:
                raw, position = byte, position + 1
            elif section[position + 1] < 0x80:
                raw, position = (byte & 0x7F) | (section[position + 1] << 7), position + 2
            else:
                raw, position = decode_unsigned_varint(section, position, MAX_VARLONG_SIZE)
            end = position + ((raw >> 1) ^ -(raw & 1))
            position += 1  # attributes
            byte = section[position]
            if byte < 0x80:
                raw, position = byte, position + 1
            elif section[position + 1] < 0x80:
                raw, position = (byte & 0x7F) | (section[position + 1] << 7), position + 2
            else:
                raw, position = decode_unsigned_varint(section, position, MAX_VARLONG_SIZE)
            timestamp_delta = (raw >> 1) ^ -(raw & 1)
            byte = section[position]
            if byte < 0x80:
                raw, position = byte, position + 1
            elif section[position + 1] < 0x80:
                raw, position = (byte & 0x7F) | (section[position + 1] << 7), position + 2
            else:
                raw, position = decode_unsigned_varint(section, position, MAX_VARLONG_SIZE)
            offset = base_offset + ((raw >> 1) ^ -(raw & 1))
            byte = section[position]
            if byte < 0x80:
                raw, position = byte, position + 1
            elif section[position + 1] < 0x80:
                raw, position = (byte & 0x7F) | (section[position + 1] << 7), position + 2
            else:
                raw, position = decode_unsigned_varint(section, position, MAX_VARLONG_SIZE)
            key_length = (raw >> 1) ^ -(raw & 1)
            digest = None
            if key_length >= 0:
                digest = md5(section[position:position + key_length], usedforsecurity=False).digest()
                position += key_length
            byte = section[position]
            if byte < 0x80:
                raw = byte
            elif section[position + 1] < 0x80:
                raw = (byte & 0x7F) | (section[position + 1] << 7)
            else:
                raw, _ = decode_unsigned_varint(section, position, MAX_VARLONG_SIZE)
            out.append((offset, digest, raw == 1, start, end, timestamp_delta))
            position = end
    except IndexError:
        raise CorruptBatchError(f"records of the batch at offset {base_offset} end early", position=position) from None
    return out


def _spliced(header: BatchHeader, body: bytes, kept: int, max_timestamp_delta: int) -> bytes:
    """``header``'s batch holding only ``kept`` records, ``body`` their bytes copied as they were.

    Valid because the base offset and base timestamp stay, so each record's deltas still hold; the
    header keeps everything but the record count, max timestamp, length and CRC.
    """
    codec = header.compression
    payload = body if codec is Compression.NONE else compress(codec, body)
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = header.base_timestamp + max_timestamp_delta
    head = bytearray(BATCH_HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), header.partition_leader_epoch,
        CURRENT_MAGIC, 0, header.attributes, header.last_offset_delta, header.base_timestamp, max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, kept,
    ))
    crc = crc32c.crc32c(payload, crc32c.crc32c(memoryview(head)[ATTRIBUTES_OFFSET:]))
    head[CRC_OFFSET:CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    return bytes(head) + payload


def build_offset_map(run: _Pass, offset_map: OffsetMap) -> int:
    """Map whole dirty segments while they fit; return how many plan segments the cleaned section spans."""
    import numpy as np

    from .cleaner_kernels import KIND_COMPRESSED

    job = run.job
    spanned = 0
    mapped_any = False
    for number, base_offset in enumerate(job.base_offsets):
        if base_offset < job.first_dirty_offset:
            spanned = number + 1
            continue
        parts: list[tuple[Any, Any, Any]] = []
        last_offset = -1
        for piece in run.pieces(number):
            if piece.count:
                last_offset = piece.batch(piece.count - 1)[1].last_offset
            records, keyed = piece.records, piece.records.has_key[:piece.rows]
            parts.append((records.hashes1[:piece.rows][keyed], records.hashes2[:piece.rows][keyed],
                          records.offsets[:piece.rows][keyed]))
            for batch in np.flatnonzero(piece.batches.kinds[:piece.count] == KIND_COMPRESSED):
                _, records, rows = run.compressed_rows(*piece.batch(int(batch)))
                keyed = records.has_key[:rows]
                parts.append((records.hashes1[:rows][keyed], records.hashes2[:rows][keyed],
                              records.offsets[:rows][keyed]))
        hashes1, hashes2, offsets = (np.concatenate([part[n] for part in parts]) if parts else
                                     np.empty(0, np.uint64 if n < 2 else np.int64) for n in range(3))
        if not offset_map.merge_rows(hashes1, hashes2, offsets, last_offset):
            if not mapped_any:
                keys = len(np.unique(np.stack([hashes1, hashes2], axis=1), axis=0))
                raise OffsetMapTooSmallError(
                    path=job.directory / segment_file_name(base_offset, LOG_SUFFIX),
                    keys=keys, capacity=offset_map.capacity)
            break
        mapped_any = True
        spanned = number + 1
    return spanned


def _groups(job: CleaningJob, spanned: int) -> list[list[int]]:
    """Plan segment numbers in groups whose sizes, index room and offset range fit one segment.

    Index room is counted as Kafka does, by the most entries the group's bytes could need: one per
    index.interval.bytes, which a segment.index.bytes index must hold.
    """
    config = job.config
    max_entries = config.segment_index_bytes // 12
    groups: list[list[int]] = []
    for number in range(spanned):
        if groups:
            group = groups[-1]
            size = sum(job.sizes[n] for n in group) + job.sizes[number]
            if (
                size <= config.segment_bytes
                and size // max(config.index_interval_bytes, 1) < max_entries
                and job.ends[number] - 1 - job.base_offsets[group[0]] <= INT32_MAX
            ):
                group.append(number)
                continue
        groups.append([number])
    return groups


def _rebuilt(header: BatchHeader, kept: list, base_timestamp: int, horizon: bool) -> bytes:
    """A batch of ``kept`` records with ``header``'s identity: base offset, lastOffsetDelta, producer fields, codec."""
    log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
    data = bytearray(build_batch(
        kept,
        compression=header.compression,
        base_offset=header.base_offset,
        base_timestamp=base_timestamp,
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        timestamp_type=header.timestamp_type,
        log_append_time=header.max_timestamp if log_append else None,
    ))
    data[_LAST_OFFSET_DELTA:_LAST_OFFSET_DELTA + 4] = header.last_offset_delta.to_bytes(4, "big", signed=True)
    if horizon:
        attributes = int.from_bytes(data[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2], "big", signed=True)
        data[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2] = (attributes | DELETE_HORIZON_MASK).to_bytes(2, "big", signed=True)
    data[CRC_OFFSET:CRC_OFFSET + 4] = compute_crc(data, 0, len(data)).to_bytes(4, "big")
    return bytes(data)


def empty_batch(header: BatchHeader) -> bytes:
    """Kafka's empty batch: ``header`` with no records (the offsets it spans and its producer fields kept)."""
    data = bytearray(BATCH_HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD, header.partition_leader_epoch, CURRENT_MAGIC, 0,
        header.attributes & ~0x07, header.last_offset_delta, header.base_timestamp, header.max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, 0,
    ))
    data[CRC_OFFSET:CRC_OFFSET + 4] = compute_crc(data, 0, len(data)).to_bytes(4, "big")
    return bytes(data)


def _cleaned(run: _Pass, data: memoryview, header: BatchHeader, counts: tuple[int, int, int, int],
             body: Callable[[], bytes], kept_offsets: Callable[[], list[int]],
             keep_header: bool) -> bytes | memoryview | None:
    """A mapped batch as the cleaned segment holds it: unchanged, rebuilt with fewer records, empty,
    or None (dropped). ``counts``: its records, those kept, kept tombstones, largest kept timestamp delta."""
    count, kept, kept_tombstones, max_delta = counts
    run.records_read += count
    run.records_kept += kept
    stamps_horizon = not header.attributes & DELETE_HORIZON_MASK and kept_tombstones > 0
    if kept == count and not stamps_horizon:
        return data
    if not kept:
        return empty_batch(header) if keep_header else None
    if stamps_horizon:
        # The base timestamp becomes the horizon, so every record's timestamp delta is rewritten.
        offsets = set(kept_offsets())
        records = [record for record in run.records(data, header) if record.offset in offsets]
        job = run.job
        return _rebuilt(header, records, job.now_ms + job.config.delete_retention_ms, True)
    return _spliced(header, body(), kept, max_delta)


def _clean_compressed(run: _Pass, data: memoryview, header: BatchHeader, keep_header: bool) -> bytes | memoryview | None:
    """`_cleaned` for a compressed mapped batch: decompressed once, walked and decided by the kernels."""
    import numpy as np

    from . import cleaner_kernels as kernels

    section, records, rows = run.compressed_rows(data, header)
    batch = kernels.BatchArrays(1)
    batch.firsts[0], batch.counts[0] = 0, rows
    batch.expires[0] = bool(header.attributes & DELETE_HORIZON_MASK) and header.base_timestamp <= run.job.now_ms
    run.offset_map.decide(batch, records, 1)

    def body() -> bytes:
        out = np.empty(int(batch.body_bytes[0]), np.uint8)
        kernels.gather_kept(section, records.starts, records.ends, records.keep, 0, rows, out)
        return out.tobytes()

    counts = (rows, int(batch.kept[0]), int(batch.kept_nulls[0]), int(batch.max_deltas[0]))
    return _cleaned(run, data, header, counts, body,
                    lambda: records.offsets[:rows][records.keep[:rows]].tolist(), keep_header)


def _clean_piece(run: _Pass, piece: _Piece, writer: _GroupWriter) -> BatchHeader | None:
    """Write the cleaned form of every batch of ``piece``; return the last batch's header.

    A batch left with no record and no producer whose last batch it could be goes without a look at
    its header; every other batch is handled on its own.
    """
    import numpy as np

    from . import cleaner_kernels as kernels

    batches, records, count = piece.batches, piece.records, piece.count
    if not count:
        return None
    run.offset_map.decide(batches, records, count)
    body_bytes = batches.body_bytes[:count]
    bodies = np.empty(int(body_bytes.sum()), np.uint8)
    kernels.gather_kept(np.frombuffer(piece.data, np.uint8), records.starts, records.ends, records.keep, 0,
                        piece.rows, bodies)
    body_starts = np.cumsum(body_bytes) - body_bytes
    counts = batches.counts[:count]
    dropped = (batches.kinds[:count] == kernels.KIND_SCANNED) & (counts > 0) & (batches.kept[:count] == 0)
    producer_last_offsets = run.job.producer_last_offsets
    if producer_last_offsets:
        producers = np.fromiter({producer for producer, _ in producer_last_offsets}, np.int64)
        dropped &= ~np.isin(batches.producer_ids[:count], producers)
    run.records_read += int(counts[dropped].sum())
    for number in np.flatnonzero(~dropped).tolist():
        data, header = piece.batch(number)
        keep_header = (header.producer_id, header.last_offset) in producer_last_offsets
        kind = batches.kinds[number]
        if kind == kernels.KIND_WHOLE:
            cleaned: bytes | memoryview | None = data
        elif kind == kernels.KIND_COMPRESSED:
            cleaned = _clean_compressed(run, data, header, keep_header)
        else:
            first, stop = int(batches.firsts[number]), int(batches.firsts[number] + batches.counts[number])
            at, size = int(body_starts[number]), int(body_bytes[number])
            cleaned = _cleaned(
                run, data, header,
                (stop - first, int(batches.kept[number]), int(batches.kept_nulls[number]),
                 int(batches.max_deltas[number])),
                lambda at=at, size=size: bodies[at:at + size].tobytes(),
                lambda first=first, stop=stop: records.offsets[first:stop][records.keep[first:stop]].tolist(),
                keep_header)
        if cleaned is not None:
            writer.add(cleaned, header)
    return piece.batch(count - 1)[1]


class _GroupWriter:
    """Appends cleaned batches to a new `.cleaned` segment in large writes."""

    def __init__(self, run: _Pass, base_offset: int) -> None:
        config = run.job.config
        self.run = run
        self.segment = Segment.create(
            run.job.directory, base_offset,
            index_interval_bytes=config.index_interval_bytes,
            segment_index_bytes=config.segment_index_bytes,
            now_ms=run.job.now_ms,
            suffix=CLEANED_SUFFIX,
        )
        self.segment.offsets_may_skip = True
        self.buffer = bytearray()
        self.described: list[AppendedBatch] = []
        self.last_offset = -1

    def add(self, data: bytes | memoryview, header: BatchHeader) -> None:
        max_timestamp = header.max_timestamp
        if not isinstance(data, memoryview):
            max_timestamp = BATCH_HEADER.unpack_from(data, 0)[8]
        self.described.append((len(self.buffer), len(data), header.last_offset, max_timestamp))
        self.buffer += data
        self.last_offset = header.last_offset
        if len(self.buffer) >= WRITE_CHUNK_BYTES:
            self.write()

    def write(self) -> None:
        if self.described:
            self.run.io(len(self.buffer))
            self.run.bytes_written += len(self.buffer)
            self.segment.append(bytes(self.buffer), self.described)
            self.buffer = bytearray()
            self.described = []

    def finish(self) -> None:
        """Write what is buffered, fsync, and rename the files to `.swap` (the point recovery completes from)."""
        self.write()
        segment = self.segment
        segment.seal()
        segment.flush(fsync=True)
        segment.rename_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
        segment.close()
        fsync_directory(segment.directory)


def clean(
    job: CleaningJob,
    offset_map: OffsetMap,
    *,
    throttle: IoThrottle | None = None,
    abort: Any = None,
) -> CleaningResult:
    """Build the offset map and write the cleaned segments of ``job``; see the module docstring.

    Nothing of the log changes here: the result's segments are `.swap` files until `apply_cleaning`.
    ``abort`` (a threading or multiprocessing Event) stops the pass between pieces of 1 MiB. On any
    error (CleaningAbortedError included) every file this pass wrote is removed.
    """
    run = _Pass(job, offset_map, throttle, abort)
    done: list[CleanedGroup] = []
    writer: _GroupWriter | None = None
    try:
        run.open()
        spanned = build_offset_map(run, offset_map)
        for group in _groups(job, spanned):
            writer = _GroupWriter(run, job.base_offsets[group[0]])
            last: BatchHeader | None = None
            for number in group:
                for piece in run.pieces(number):
                    last = _clean_piece(run, piece, writer) or last
            if last is not None and writer.last_offset < last.last_offset:
                writer.add(empty_batch(last), last)
            writer.finish()
            done.append(CleanedGroup(tuple(group), job.base_offsets[group[0]]))
            writer = None
    except BaseException:
        if writer is not None:
            writer.segment.close_and_delete()
        for group in done:
            _delete_swap_files(job.directory, group.base_offset)
        raise
    finally:
        run.close()
    return CleaningResult(
        groups=done,
        first_dirty_after=job.ends[spanned - 1] if spanned else job.first_dirty_offset,
        bytes_read=run.bytes_read,
        bytes_written=run.bytes_written,
        records_read=run.records_read,
        records_kept=run.records_kept,
    )


# A cleaner process's own state, set once by `init_cleaner_process` when its pool starts it.
_process_abort: Any = None
_process_throttle: IoThrottle | None = None


_PR_SET_PDEATHSIG = 1
CLEANER_NICENESS = 10


def init_cleaner_process(abort: Any, bytes_per_second: float) -> None:
    """Pool initializer of a cleaner process: the broker's abort event, this process's share of the I/O
    rate, and a lower CPU priority (nice +10).

    The process is killed with its broker (Linux PR_SET_PDEATHSIG): a pass outliving a killed broker
    could rename a `.swap` into place under the restarted broker, which recovers the directory
    assuming nothing else writes to it.
    """
    global _process_abort, _process_throttle
    _process_abort = abort
    _process_throttle = IoThrottle(bytes_per_second)
    # Below the broker in CPU priority: where cores are short, requests go first and cleaning waits.
    os.nice(CLEANER_NICENESS)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (AttributeError, OSError):  # not Linux: a clean stop still ends passes through the abort event
        pass
    # The kernels load from numba's cache (or compile, once per machine) here, once per process,
    # not in the first pass.
    from .cleaner_kernels import warm_up

    warm_up()


def clean_in_process(job: CleaningJob, map_capacity: int) -> CleaningResult:
    """`clean` in a cleaner process (pickled in, pickled out), with its throttle and abort event."""
    return clean(job, OffsetMap(map_capacity), throttle=_process_throttle, abort=_process_abort)


def open_cleaned(plan: CleaningPlan, result: CleaningResult) -> list[Segment | None]:
    """Open each group's `.swap` segment, None for one that does not read back whole (any thread: nobody else sees them yet)."""
    config = plan.job.config
    opened: list[Segment | None] = []
    for group in result.groups:
        segment, problem = Segment.open(
            plan.job.directory, group.base_offset, index_interval_bytes=config.index_interval_bytes,
            segment_index_bytes=config.segment_index_bytes, suffix=SWAP_SUFFIX,
        )
        segment.offsets_may_skip = True
        if problem is None and segment.check_tail():
            opened.append(segment)
        else:
            segment.close_and_delete()
            opened.append(None)
    return opened


def swap_group(plan: CleaningPlan, group: CleanedGroup, segment: Segment | None) -> SegmentSwap | None:
    """Put one group's opened segment in place of its old segments in the segment list (on the log's
    writer); None when `open_cleaned` could not open it or the old segments changed since the plan
    (retention, truncation, a closed log). The returned swap's file step (`SegmentSwap.finish`) is
    the caller's to run, on any thread; a refused segment's files are the caller's to delete."""
    if segment is None:
        return None
    old = [plan.segments[n] for n in group.numbers]
    return plan.log.swap_segments(old, [plan.sizes[n] for n in group.numbers], segment)


def swap_cleaned(plan: CleaningPlan, result: CleaningResult, opened: list[Segment | None]) -> int:
    """Swap the opened segments in, file steps included (on the log's writer); return how many groups went in.

    A group whose old segments changed since the plan (retention, truncation, a closed log) is
    discarded, as is one `open_cleaned` could not open.
    """
    swapped = 0
    for group, segment in zip(result.groups, opened, strict=True):
        swap = swap_group(plan, group, segment)
        if swap is not None:
            swap.finish()
            swapped += 1
        elif segment is not None:
            segment.close_and_delete()
    return swapped


def write_cleaner_checkpoint(plan: CleaningPlan, result: CleaningResult) -> None:
    """Move the first dirty offset past the cleaned section (after every group of the pass went in)."""
    write_offset_checkpoint(plan.job.directory / CLEANER_CHECKPOINT_FILE, result.first_dirty_after)


def apply_cleaning(plan: CleaningPlan, result: CleaningResult) -> int:
    """`open_cleaned`, `swap_cleaned` and, when every group went in, `write_cleaner_checkpoint`, on the caller's thread."""
    swapped = swap_cleaned(plan, result, open_cleaned(plan, result))
    if swapped == len(result.groups) and swapped:
        write_cleaner_checkpoint(plan, result)
    return swapped


def discard(directory: Path, result: CleaningResult) -> None:
    """Remove the `.swap` files of a result that will not be applied (its directory may be gone with its topic)."""
    for group in result.groups:
        _delete_swap_files(directory, group.base_offset)


def _delete_swap_files(directory: Path, base_offset: int) -> None:
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        try:
            (directory / (segment_file_name(base_offset, suffix) + SWAP_SUFFIX)).unlink(missing_ok=True)
        except OSError:
            continue
