"""One segment of a partition log: a .log file of record batches and its two sparse indexes.

A partition log is an ordered list of segments; only the last (active) one is appended to. The
segment knows how to find a batch by offset or timestamp, hand out whole-batch file slices for
sendfile, validate and repair itself after a crash, truncate, roll and delete its files.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker_core.records.errors import RecordsError
from broker_core.records.header import (
    BATCH_HEADER,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    parse_header,
    verify_crc,
)

from .errors import CorruptIndexError
from .offset_index import OffsetIndex
from .time_index import TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
INT32_MAX = 2**31 - 1

Buffer = bytes | bytearray | memoryview
# (position in the appended buffer, batch size, last offset, max timestamp) of one batch being appended.
AppendedBatch = tuple[int, int, int, int]

# Disk blocks an append reserves past its own end (fallocate with FALLOC_FL_KEEP_SIZE: the file's size
# does not change). Writing into reserved blocks skips ext4's per-page delayed-allocation work, which
# makes a write of new bytes cost about 70% more CPU (170 against 100 us per MiB, measured on ext4);
# sealing a segment gives back what it did not use.
RESERVE_AHEAD_BYTES = 1 << 20
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 16
_FALLOC_FL_KEEP_SIZE = 0x01


def _load_fallocate() -> Callable[[int, int, int, int], int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (AttributeError, OSError):  # not Linux: appends simply go without reserving
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    function.restype = ctypes.c_int
    return function


_fallocate = _load_fallocate()


def _write_all(fd: int, parts: list[Buffer], offset: int) -> None:
    """Write ``parts`` back to back from ``offset``, IOV_MAX buffers per pwritev call."""
    for first in range(0, len(parts), _IOV_MAX):
        chunk = parts[first:first + _IOV_MAX]
        written = os.pwritev(fd, chunk, offset)
        for part in chunk:
            size = len(part)
            if written < size:  # regular files rarely write short; finish the rest if they do
                rest = memoryview(part)[written:]
                while rest:
                    done = os.pwrite(fd, rest, offset + size - len(rest))
                    rest = rest[done:]
            written = max(written - size, 0)
            offset += size


def reserve_blocks(fd: int, offset: int, length: int) -> bool:
    """Allocate disk blocks for [offset, offset + length) of ``fd`` without changing its size.

    False when nothing was reserved: a filesystem that cannot (the reservation is then never tried
    again in this process), a full disk (the write that follows reports it) or an interrupted call.
    """
    global _fallocate
    function = _fallocate
    if function is None:
        return False
    if function(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    if ctypes.get_errno() in (errno.EOPNOTSUPP, errno.ENOSYS):
        _fallocate = None
    return False


def _with_suffix(path: Path, old: str, new: str) -> Path:
    name = path.name[: len(path.name) - len(old)] if old else path.name
    return path.with_name(name + new)


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name: the base offset as 20 zero-padded digits, then the suffix."""
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Whole batches of one segment file, ready for ``os.sendfile(sock, fd, position, length)``.

    ``first_offset`` is the base offset of the first batch (it can be below the offset asked for:
    reads start at the batch holding it) and ``last_offset`` the last offset of the last batch.
    """

    fd: int
    path: Path
    position: int
    length: int
    first_offset: int
    last_offset: int


class Segment:
    """`<base offset>.log` with `<base offset>.index` and `<base offset>.timeindex` beside it.

    Byte layout of the .log file: RecordBatch v2 batches back to back (see
    broker_core.records.header), offsets contiguous: the first batch starts at the base offset in the
    file name and each next batch at the previous batch's last offset + 1. Each batch carries its own
    CRC-32C over everything after the CRC field; baseOffset and partitionLeaderEpoch sit outside the
    CRC, so recovery checks them against the contiguity rule and the leader-epoch cache instead.

    Crash behaviour: appends go to the page cache (``os.pwrite``) and survive a process crash; an
    OS crash may lose or tear the unflushed tail. `recover` re-validates every batch (header, CRC,
    offsets, epochs), rebuilds both indexes and truncates the file at the first bad or partial batch.
    Segments wholly below the recovery point are only checked cheaply on open (`check_tail`: index
    sanity, the batches after the last index entry, the last time-index entry), since their bytes
    were fsynced.

    Thread-safety: one writer (append, truncate, roll, recover, delete) and concurrent readers
    (find_batch, read, find_by_timestamp). The writer publishes the data end as one tuple (size,
    next offset) after the bytes and index entries are in place, and readers work from one snapshot
    of it. The file descriptor stays open until `close`, also after `mark_deleted` renamed the files.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        segment_index_bytes: int,
        fd: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        created_ms: int,
        suffix: str = "",
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = directory / (segment_file_name(base_offset, LOG_SUFFIX) + suffix)
        self.fd = fd
        self.offset_index = offset_index
        self.time_index = time_index
        self._index_interval_bytes = index_interval_bytes
        self._segment_index_bytes = segment_index_bytes
        self._end = (0, base_offset)
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self._first_batch_timestamp: int | None = None
        self._created_ms = created_ms
        self._bytes_since_last_index_entry = 0
        # End of the disk blocks reserved for this file (see RESERVE_AHEAD_BYTES); at least its size.
        self._reserved_end = 0
        self.deleted = False
        # A compacted log's cleaner removes records, leaving gaps between batches (never renumbering):
        # then a batch must only start above the previous one, not right after it.
        self.offsets_may_skip = False

    # ---------------------------------------------------------------- construction

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        segment_index_bytes: int,
        now_ms: int,
        suffix: str = "",
        new_directory: bool = False,
    ) -> Segment:
        """A new empty segment; any stale files with the same base offset are replaced.

        ``suffix`` is added to all three file names (the cleaner writes ``.cleaned`` segments).
        ``new_directory``: the caller has just made ``directory``, so there is no stale index to remove.
        """
        log_path = directory / (segment_file_name(base_offset, LOG_SUFFIX) + suffix)
        fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        offset_index = OffsetIndex(
            directory / (segment_file_name(base_offset, INDEX_SUFFIX) + suffix), base_offset, segment_index_bytes
        )
        time_index = TimeIndex(
            directory / (segment_file_name(base_offset, TIME_INDEX_SUFFIX) + suffix), base_offset, segment_index_bytes
        )
        if not new_directory:
            for index in (offset_index, time_index):
                index.path.unlink(missing_ok=True)
        return cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            segment_index_bytes=segment_index_bytes,
            fd=fd,
            offset_index=offset_index,
            time_index=time_index,
            created_ms=now_ms,
            suffix=suffix,
        )

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, *, index_interval_bytes: int, segment_index_bytes: int,
        suffix: str = "",
    ) -> tuple[Segment, CorruptIndexError | None]:
        """Open an existing segment without scanning it: the caller follows with `check_tail` or `recover`.

        Returns the segment and the CorruptIndexError its index files raised on load, if any; in that
        case the segment starts with empty indexes and must be recovered.
        """
        log_path = directory / (segment_file_name(base_offset, LOG_SUFFIX) + suffix)
        fd = os.open(log_path, os.O_RDWR)
        index_path = directory / (segment_file_name(base_offset, INDEX_SUFFIX) + suffix)
        time_index_path = directory / (segment_file_name(base_offset, TIME_INDEX_SUFFIX) + suffix)
        problem = None
        try:
            offset_index = OffsetIndex.load(index_path, base_offset, segment_index_bytes)
            time_index = TimeIndex.load(time_index_path, base_offset, segment_index_bytes)
        except CorruptIndexError as error:
            problem = error
            offset_index = OffsetIndex(index_path, base_offset, segment_index_bytes)
            time_index = TimeIndex(time_index_path, base_offset, segment_index_bytes)
        stat = os.fstat(fd)
        segment = cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            segment_index_bytes=segment_index_bytes,
            fd=fd,
            offset_index=offset_index,
            time_index=time_index,
            created_ms=stat.st_mtime_ns // 1_000_000,
            suffix=suffix,
        )
        segment._end = (stat.st_size, base_offset)
        # Blocks a crashed process reserved past the end are given back when the segment is sealed.
        segment._reserved_end = max(stat.st_size, stat.st_blocks * 512)
        return segment, problem

    # ---------------------------------------------------------------- state

    @property
    def size(self) -> int:
        return self._end[0]

    @property
    def next_offset(self) -> int:
        """One past the last offset in the segment (the base offset when empty)."""
        return self._end[1]

    @property
    def first_batch_timestamp(self) -> int:
        """Max timestamp of the first batch (what segment.ms and max.compaction.lag.ms count from), else the creation time."""
        if self._first_batch_timestamp is not None:
            return self._first_batch_timestamp
        return self._created_ms

    @property
    def largest_timestamp(self) -> int:
        """Largest batch max timestamp, or the file's modification time if no batch carries one (Kafka's rule)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    def should_roll(
        self,
        incoming_bytes: int,
        incoming_last_offset: int,
        now_ms: int,
        *,
        segment_bytes: int,
        segment_ms: int,
    ) -> bool:
        """Kafka's roll rule: a non-empty segment rolls before an append that would overflow its size,
        once it is older than segment.ms (counted from its first batch's timestamp), when an index is
        full, or when the append's offsets no longer fit a 32-bit relative offset."""
        size = self._end[0]
        if size == 0:
            return False
        rolling_timestamp = self._first_batch_timestamp
        if rolling_timestamp is None:
            rolling_timestamp = self._created_ms
        return (
            size > segment_bytes - incoming_bytes
            or now_ms - rolling_timestamp > segment_ms
            or self.offset_index.is_full
            or self.time_index.is_full
            or incoming_last_offset - self.base_offset > INT32_MAX
        )

    # ---------------------------------------------------------------- writing

    def append(self, data: Buffer | list[Buffer], batches: list[AppendedBatch]) -> None:
        """Write ``data`` (whole batches, offsets already assigned and contiguous with this segment) at the end.

        ``data`` is one buffer or a list of byte buffers written back to back (one pwritev call).
        ``batches`` describes each batch of ``data`` in order. Index entries follow Kafka's rule: a batch
        is indexed when more than index.interval.bytes were appended since the previous entry.
        """
        start, _ = self._end
        self.write_at(start, data)
        self.appended(start, data, batches)

    def write_at(self, start: int, data: Buffer | list[Buffer]) -> None:
        """The file half of `append`: write ``data`` at ``start`` (the segment's end when `appended`
        follows), reserving disk blocks ahead. Touches nothing the segment's readers look at, so it
        may run on another thread while no other write or truncation of this segment does."""
        parts = data if isinstance(data, list) else [data]
        position = start + sum(len(part) for part in parts)
        if position > self._reserved_end:
            reserve_from = max(start, self._reserved_end)
            if reserve_blocks(self.fd, reserve_from, position + RESERVE_AHEAD_BYTES - reserve_from):
                self._reserved_end = position + RESERVE_AHEAD_BYTES
        _write_all(self.fd, parts, start)

    def appended(self, start: int, data: Buffer | list[Buffer], batches: list[AppendedBatch]) -> None:
        """The state half of `append`, once `write_at` wrote ``data`` at ``start``: index entries, the
        largest timestamp, and the end readers see."""
        parts = data if isinstance(data, list) else [data]
        position = start + sum(len(part) for part in parts)
        since = self._bytes_since_last_index_entry
        interval = self._index_interval_bytes
        max_timestamp = self.max_timestamp
        offset_of_max = self.offset_of_max_timestamp
        if start == 0 and batches:
            self._first_batch_timestamp = batches[0][3]
        for relative_position, size, last_offset, batch_max_timestamp in batches:
            if batch_max_timestamp > max_timestamp:
                max_timestamp = batch_max_timestamp
                offset_of_max = last_offset
            if since > interval:
                self.offset_index.append(last_offset, start + relative_position)
                self.time_index.maybe_append(max_timestamp, offset_of_max)
                since = 0
            since += size
        self._bytes_since_last_index_entry = since
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = offset_of_max
        self._end = (position, batches[-1][2] + 1)

    def flush(self, *, fsync: bool = True) -> None:
        """Write pending index entries; with ``fsync`` also force the log and both indexes to disk."""
        if fsync:
            os.fsync(self.fd)
        self.offset_index.flush(fsync=fsync)
        self.time_index.flush(fsync=fsync)

    def seal(self) -> None:
        """The segment stops being active: record its largest timestamp as the last time-index entry, and
        give back the disk blocks reserved past its end."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        size = self._end[0]
        if self._reserved_end > size:
            # The size stays and the blocks past it are freed; the modification time is put back, as
            # it stands for the last append where batches carry no timestamps.
            before = os.fstat(self.fd)
            os.ftruncate(self.fd, size)
            os.utime(self.fd, ns=(before.st_atime_ns, before.st_mtime_ns))
            self._reserved_end = size

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Drop every batch whose last offset is >= ``offset`` (a batch holding it goes whole); return bytes removed."""
        size, _ = self._end
        found = self.find_batch(offset)
        if found is None:
            return 0
        position, header = found
        os.ftruncate(self.fd, position)
        self._reserved_end = position
        self.offset_index.truncate_to(header.base_offset)
        self.time_index.truncate_to(header.base_offset)
        self.offset_index.flush(fsync=False)
        self.time_index.flush(fsync=False)
        self._end = (position, header.base_offset)
        self._rescan_after_last_index_entry()
        if position == 0:
            self._first_batch_timestamp = None
            self._created_ms = now_ms
        return size - position

    # ---------------------------------------------------------------- reading

    def _header_at(self, position: int, limit: int) -> BatchHeader | None:
        """The sanity-checked header of the batch at ``position`` if the whole batch lies below ``limit``."""
        if position + HEADER_SIZE > limit:
            return None
        data = os.pread(self.fd, HEADER_SIZE, position)
        if len(data) < HEADER_SIZE:
            return None
        header = BatchHeader(*BATCH_HEADER.unpack(data))
        if (
            header.magic != CURRENT_MAGIC
            or header.batch_length < HEADER_SIZE - LOG_OVERHEAD
            or header.last_offset_delta < 0
            or position + header.size > limit
        ):
            return None
        return header

    def _start_position(self, offset: int, limit: int) -> tuple[int, BatchHeader | None]:
        """(position, header there if already read) from which a header walk can search for ``offset``.

        The looked-up index entry is trusted only if the header at its position ends at its offset;
        otherwise the walk starts at the beginning of the segment.
        """
        entry_offset, position = self.offset_index.lookup(offset)
        if position == 0:
            return 0, None
        header = self._header_at(position, limit)
        if header is None or header.last_offset != entry_offset:
            return 0, None
        return position, header

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``; None if none is here."""
        limit, next_offset = self._end
        if offset >= next_offset:
            return None
        position, header = self._start_position(offset, limit)
        while position < limit:
            if header is None:
                header = self._header_at(position, limit)
                if header is None:
                    return None
            if header.last_offset >= offset:
                return position, header
            position += header.size
            header = None
        return None

    def _boundary_at_or_before(
        self, target: int, position: int, next_base: int, limit: int
    ) -> tuple[int, int]:
        """The last batch boundary <= ``target`` at or after ``position`` (a boundary where ``next_base`` starts).

        Returns (boundary, base offset of the batch starting there). Jumps ahead with the offset index,
        then walks headers.
        """
        header = None
        entry = self.offset_index.lookup_by_position(target)
        if entry is not None and entry[1] > position:
            entry_header = self._header_at(entry[1], limit)
            if entry_header is not None and entry_header.last_offset == entry[0]:
                position, next_base, header = entry[1], entry_header.base_offset, entry_header
        while position < target:
            if header is None:
                header = self._header_at(position, limit)
            if header is None or position + header.size > target:
                break
            position += header.size
            next_base = header.next_offset
            header = None
        return position, next_base

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FileSlice | None:
        """Whole batches from the one holding ``offset``, within ``max_bytes`` and below ``max_offset``.

        Returns None when ``offset`` is past this segment, when the first batch reaches ``max_offset``,
        or when it is larger than ``max_bytes`` and ``min_one_batch`` is false. With ``min_one_batch``
        the first batch is returned whole whatever its size.
        """
        limit, next_offset = self._end
        found = self.find_batch(offset)
        if found is None:
            return None
        position, first = found
        if max_offset is not None and first.last_offset >= max_offset:
            return None
        if first.size > max_bytes and not min_one_batch:
            return None
        stop, stop_base = limit, next_offset
        if max_offset is not None and max_offset < next_offset:
            bound = self.find_batch(max_offset)
            if bound is not None:
                stop, stop_base = bound[0], bound[1].base_offset
        byte_stop = position + max(max_bytes, first.size)
        if byte_stop < stop:
            stop, stop_base = self._boundary_at_or_before(
                byte_stop, position + first.size, first.next_offset, limit
            )
        return FileSlice(
            fd=self.fd,
            path=self.log_path,
            position=position,
            length=stop - position,
            first_offset=first.base_offset,
            last_offset=stop_base - 1,
        )

    def find_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch with max timestamp >= ``timestamp`` and last offset >= ``start_offset``."""
        limit, _ = self._end
        if self.max_timestamp < timestamp:
            return None
        entry_timestamp, entry_offset = self.time_index.lookup(timestamp)
        search_from = max(start_offset, self.base_offset)
        if entry_timestamp >= 0 and entry_offset > search_from:
            entry_batch = self.find_batch(entry_offset)
            if (
                entry_batch is not None
                and entry_batch[1].last_offset == entry_offset
                and entry_batch[1].max_timestamp == entry_timestamp
            ):
                search_from = entry_offset
        found = self.find_batch(search_from)
        if found is None:
            return None
        position, header = found
        while True:
            if header.max_timestamp >= timestamp:
                return position, header
            position += header.size
            next_header = self._header_at(position, limit)
            if next_header is None:
                return None
            header = next_header

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        return os.pread(self.fd, header.size, position)

    # ---------------------------------------------------------------- recovery

    def check_tail(self) -> bool:
        """Cheap consistency check of a segment below the recovery point; sets its end and max timestamp.

        Walks the batches after the last offset-index entry to the end of the file (they must be whole
        and contiguous) and verifies the last entries of both indexes against the batches they name.
        Returns False if anything disagrees: the caller then runs `recover`.
        """
        if not self._rescan_after_last_index_entry():
            return False
        size, next_offset = self._end
        last_time_entry = self.time_index.last_entry
        if last_time_entry is not None:
            timestamp, offset = last_time_entry
            if offset >= next_offset:
                return False
            found = self.find_batch(offset)
            if found is None or found[1].last_offset != offset or found[1].max_timestamp != timestamp:
                return False
        if size:
            first = self._header_at(0, size)
            if first is None or (
                first.base_offset < self.base_offset
                if self.offsets_may_skip
                else first.base_offset != self.base_offset
            ):
                return False
            self._first_batch_timestamp = first.max_timestamp
        return True

    def _rescan_after_last_index_entry(self) -> bool:
        """Walk batch headers from the last offset-index entry to the end of the file.

        Sets the end (size, next offset), the running max timestamp and the bytes since the last index
        entry. Returns False, leaving the end untouched, if the entry does not match its batch or the
        walk meets a bad header, a gap in offsets or a partial batch.
        """
        size = os.fstat(self.fd).st_size
        last_entry = self.offset_index.last_entry
        if last_entry is None:
            position, expected_base, entry_offset = 0, self.base_offset, None
        else:
            entry_offset, position = last_entry
            expected_base = None
        max_timestamp, offset_of_max = self.time_index.last_entry or (-1, -1)
        next_offset = self.base_offset
        while position < size:
            header = self._header_at(position, size)
            if header is None:
                return False
            if expected_base is not None and (
                header.base_offset < expected_base
                if self.offsets_may_skip
                else header.base_offset != expected_base
            ):
                return False
            if entry_offset is not None and header.last_offset != entry_offset:
                return False
            entry_offset = None
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
            position += header.size
            expected_base = next_offset = header.next_offset
        if entry_offset is not None:
            return False
        self._end = (size, next_offset)
        self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max
        self._bytes_since_last_index_entry = size - (last_entry[1] if last_entry else 0)
        return True

    def recover(self, max_message_bytes: int, accept_epoch: Callable[[int, int], bool]) -> int:
        """Validate every batch, rebuild both indexes, cut the file at the first bad batch; return bytes cut.

        A batch is bad if its header fails the sanity checks, its CRC-32C does not match, it is larger
        than ``max_message_bytes``, its base offset does not continue the previous batch (or the file
        name for the first one; in a compacted log, only start above it), or ``accept_epoch(base_offset, partition_leader_epoch)`` says no.
        """
        self.offset_index.reset()
        self.time_index.reset()
        size = os.fstat(self.fd).st_size
        valid = 0
        expected_base = self.base_offset
        max_timestamp, offset_of_max = -1, -1
        last_index_position = 0
        first_timestamp = None
        if size:
            with mmap.mmap(self.fd, size, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    while valid < size:
                        try:
                            header = parse_header(view, valid)
                            verify_crc(view, header, valid)
                        except RecordsError:
                            break
                        if (
                            (
                                header.base_offset < expected_base
                                if self.offsets_may_skip
                                else header.base_offset != expected_base
                            )
                            or header.size > max_message_bytes
                            or header.last_offset - self.base_offset > INT32_MAX
                            or not accept_epoch(header.base_offset, header.partition_leader_epoch)
                        ):
                            break
                        if first_timestamp is None:
                            first_timestamp = header.max_timestamp
                        if header.max_timestamp > max_timestamp:
                            max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
                        if valid - last_index_position > self._index_interval_bytes:
                            self.offset_index.append(header.last_offset, valid)
                            self.time_index.maybe_append(max_timestamp, offset_of_max)
                            last_index_position = valid
                        valid += header.size
                        expected_base = header.next_offset
                finally:
                    view.release()
        if valid < size:
            os.ftruncate(self.fd, valid)
            self._reserved_end = valid
        self._end = (valid, expected_base)
        self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max
        self._first_batch_timestamp = first_timestamp
        self._bytes_since_last_index_entry = valid - last_index_position
        self.seal()
        self.offset_index.flush(fsync=False)
        self.time_index.flush(fsync=False)
        return size - valid

    # ---------------------------------------------------------------- deletion

    def rename_suffix(self, old: str, new: str) -> None:
        """Rename the three files from ``<name><old>`` to ``<name><new>``, indexes first and the .log last.

        The cleaner's crash-safe swap relies on that order: recovery treats a segment as renamed once
        its .log is (see `swap`). Open descriptors and index contents are unaffected.
        """
        for index in (self.offset_index, self.time_index):
            target = _with_suffix(index.path, old, new)
            try:
                index.path.rename(target)
            except FileNotFoundError:
                pass
            index.path = target
        target = _with_suffix(self.log_path, old, new)
        self.log_path.rename(target)
        self.log_path = target

    def mark_deleted(self) -> None:
        """Rename the three files to ``*.deleted``; the open descriptor keeps serving readers until `close`."""
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            try:
                path.rename(path.with_name(path.name + DELETED_SUFFIX))
            except FileNotFoundError:
                continue
        self.deleted = True
        self.log_path = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        self.offset_index.path = self.offset_index.path.with_name(
            self.offset_index.path.name + DELETED_SUFFIX
        )
        self.time_index.path = self.time_index.path.with_name(self.time_index.path.name + DELETED_SUFFIX)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close_and_delete(self) -> None:
        """Close the descriptor and remove the files (under whichever name they have now)."""
        self.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        size, next_offset = self._end
        return f"Segment(base_offset={self.base_offset}, next_offset={next_offset}, size={size})"
