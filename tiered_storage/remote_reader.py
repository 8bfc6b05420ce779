"""Remote reads: Fetch and ListOffsets below the local log start, served from S3 through the manifest.

When a consumer asks a tiered partition's leader for an offset its local log no longer holds, the
broker finds the remote segment holding it in the partition's COPY_FINISHED manifest rows (cached,
never an S3 listing), maps the offset to a byte position with the segment's ".indexes" object
(cached), and range-GETs from there. It returns exactly what the local log's `read` would have:
whole batches from the one holding the offset, within one segment, within ``max_bytes`` except
that with ``min_one_batch`` the first batch comes whole.

Object stores charge a fixed latency per request (tens of milliseconds on S3, and on moto), so
the reader does not issue one small GET per fetch. Each partition being read has a read window on
its current segment: ranges of ``chunk_bytes`` (at least the fetch's ``max_bytes``) fetched as
tasks, with ``readahead_chunks`` more always in flight beyond the last byte served. A consumer
reading history sequentially finds its next fetch already in memory (its offset is where the
previous read stopped, so not even an index lookup is needed), and at the end of a segment the
first range of the next segment is already on its way. Memory is bounded by ``max_windows``
windows of ``(1 + readahead_chunks)`` chunks.

The partition's log start in the manifest (moved by DeleteRecords, `advance_log_start`) bounds
every read: an offset below it is out of range, ListOffsets never answers one, and segments wholly
below it are not read. The leader that moved it forgets its cached copy at once; other brokers'
copies are at most ``segments_ttl_s`` old.

Thread-safety: a RemoteLogReader belongs to the broker's event loop; its coroutines may run
concurrently. Manifest queries run in worker threads.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from broker_core.log.errors import OffsetOutOfRangeError
from broker_core.log.transaction_index import AbortedTxn
from broker_core.protocol.messages import EARLIEST_TIMESTAMP
from broker_core.records.batch import decode_batch
from broker_core.records.errors import RecordsError
from broker_core.records.header import (
    BATCH_HEADER,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    TimestampType,
)
from broker_core.server.remote_reads import RemoteStorageError
from tiered_storage.indexes import CorruptIndexesObjectError, SegmentIndexes, decode_indexes
from tiered_storage.manifest import ManifestError, ManifestStore, RemoteLog, RemoteSegment
from tiered_storage.object_store import ObjectStoreError, SegmentObjectStore
from tiered_storage.uploader import TieredPartition

log = logging.getLogger(__name__)

MIB = 1024 * 1024
_TIMESTAMP_SCAN_BYTES = 256 * 1024


@dataclass
class _PartitionSegments:
    remote: RemoteLog
    segments: list[RemoteSegment]  # the readable ones: holding offsets at or above the log start
    base_offsets: list[int]
    loaded_at: float


@dataclass
class _Chunk:
    """Bytes [start, start + length) of a segment object, being fetched or fetched."""

    start: int
    length: int
    task: asyncio.Task[bytes]

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass
class _ReadWindow:
    """A partition's read-ahead over one remote segment, and where its last read stopped."""

    segment: RemoteSegment
    chunks: list[_Chunk] = field(default_factory=list)
    next_offset: int = -1
    next_position: int = -1

    def clear(self) -> None:
        # Tasks are dropped, never cancelled: a concurrent read of the same range may be awaiting one.
        self.chunks.clear()


@dataclass
class RemoteReadStats:
    """Counters for the bench and logs."""

    range_gets: int = 0
    window_hits: int = 0
    indexes_loaded: int = 0
    bytes_read: int = 0


class RemoteLogReader:
    """Reads tiered partitions' history from S3 for the Fetch and ListOffsets handlers.

    ``is_tiered(topic)`` says whether a topic has remote storage enabled; reads of other topics
    never reach S3. The segment list of a partition is re-read from the manifest when it is older
    than ``segments_ttl_s``, when the uploader or retention changed it (`invalidate`), or once when
    an offset falls outside it.
    """

    def __init__(
        self,
        manifest: ManifestStore,
        objects: SegmentObjectStore,
        is_tiered: Callable[[str], bool],
        *,
        segments_ttl_s: float = 10.0,
        indexes_cache_entries: int = 1024,
        chunk_bytes: int = 4 * MIB,
        readahead_chunks: int = 1,
        max_windows: int = 32,
    ) -> None:
        self.manifest = manifest
        self.objects = objects
        self.is_tiered = is_tiered
        self.segments_ttl_s = segments_ttl_s
        self.chunk_bytes = chunk_bytes
        self.readahead_chunks = readahead_chunks
        self.stats = RemoteReadStats()
        self._segments: dict[tuple[str, int], _PartitionSegments] = {}
        self._indexes: OrderedDict[str, SegmentIndexes] = OrderedDict()
        self._indexes_cache_entries = indexes_cache_entries
        # Keyed by (topic id, partition, segment id): a partition has one window per segment it is
        # reading, normally its current one and the next one being read ahead.
        self._windows: OrderedDict[tuple[str, int, str], _ReadWindow] = OrderedDict()
        self._max_windows = max_windows

    # -- manifest cache ----------------------------------------------------------------------

    def invalidate(self, partition: TieredPartition) -> None:
        """Forget the cached segment list of ``partition`` (the manifest changed)."""
        self._segments.pop((partition.topic_id, partition.index), None)

    async def _cached(self, partition: TieredPartition, *, refresh: bool = False) -> _PartitionSegments:
        key = (partition.topic_id, partition.index)
        cached = self._segments.get(key)
        now = time.monotonic()
        if cached is None or refresh or now - cached.loaded_at > self.segments_ttl_s:
            try:
                remote = await asyncio.to_thread(self.manifest.remote_log, partition.topic_id, partition.index)
            except ManifestError as err:
                raise RemoteStorageError(f"manifest of {partition.topic}-{partition.index}: {err}") from err
            segments = remote.readable
            cached = _PartitionSegments(remote, segments, [s.base_offset for s in segments], now)
            self._segments[key] = cached
        return cached

    async def remote_log(self, partition: TieredPartition, *, refresh: bool = False) -> RemoteLog:
        """The partition's COPY_FINISHED segments (all of them) and its manifest log start (cached)."""
        return (await self._cached(partition, refresh=refresh)).remote

    async def remote_segments(
        self, partition: TieredPartition, *, refresh: bool = False
    ) -> list[RemoteSegment]:
        """The partition's readable COPY_FINISHED segments by base offset (cached): those holding an
        offset at or above the log start."""
        return (await self._cached(partition, refresh=refresh)).segments

    async def log_start_offset(self, partition: TieredPartition) -> int:
        """The partition's log start: its oldest remote offset when older than the local log start,
        and never below the log start DeleteRecords set in the manifest."""
        local_start = partition.log.log_start_offset
        cached = await self._cached(partition)
        segments = cached.segments
        start = segments[0].base_offset if segments and segments[0].base_offset < local_start else local_start
        return max(start, cached.remote.log_start_offset)

    async def advance_log_start(self, partition: TieredPartition, offset: int) -> int:
        """DeleteRecords: raise the manifest's log start of ``partition`` to ``offset`` (never lower it);
        return the manifest's log start. Raises RemoteStorageError when DynamoDB fails."""
        try:
            start = await asyncio.to_thread(
                self.manifest.advance_log_start, partition.topic_id, partition.index, offset
            )
        except ManifestError as err:
            raise RemoteStorageError(f"manifest of {partition.topic}-{partition.index}: {err}") from err
        self.invalidate(partition)
        return start

    async def _segment_for(self, partition: TieredPartition, offset: int) -> RemoteSegment | None:
        """The remote segment holding ``offset``, or the next one when ``offset`` falls in a gap
        between two segments (data never tiered, as a local log skips to its next segment); None
        below the first segment or past the last one."""
        for refresh in (False, True):
            segments = await self.remote_segments(partition, refresh=refresh)
            cached = self._segments[(partition.topic_id, partition.index)]
            number = bisect.bisect_right(cached.base_offsets, offset) - 1
            if number >= 0 and segments[number].contains(offset):
                return segments[number]
            if refresh and 0 <= number < len(segments) - 1:
                return segments[number + 1]
        return None

    async def _indexes_for(self, segment: RemoteSegment) -> SegmentIndexes:
        cached = self._indexes.get(segment.segment_id)
        if cached is not None:
            self._indexes.move_to_end(segment.segment_id)
            return cached
        try:
            indexes = decode_indexes(await self.objects.get_bytes(segment.indexes_key))
        except CorruptIndexesObjectError as err:
            raise RemoteStorageError(f"indexes object {segment.indexes_key}: {err}") from err
        self.stats.indexes_loaded += 1
        self._indexes[segment.segment_id] = indexes
        while len(self._indexes) > self._indexes_cache_entries:
            self._indexes.popitem(last=False)
        return indexes

    # -- fetch -------------------------------------------------------------------------------

    async def read(
        self, partition: TieredPartition, offset: int, max_bytes: int, *, min_one_batch: bool
    ) -> bytes:
        """Whole batches from the remote batch holding ``offset``; b"" when nothing fits.

        Raises OffsetOutOfRangeError when no remote segment holds ``offset`` or a later one below
        the local log, RemoteStorageError when S3 or the manifest fails.
        """
        for attempt in range(2):
            below_start = offset < (await self._cached(partition)).remote.log_start_offset
            segment = None if below_start else await self._segment_for(partition, offset)
            if segment is None or segment.base_offset >= partition.log.log_start_offset:
                # Nothing remote holds the offset, and what follows it is local: below the log start.
                start = await self.log_start_offset(partition)
                raise OffsetOutOfRangeError(
                    topic=partition.topic,
                    partition=partition.index,
                    offset=offset,
                    log_start_offset=start,
                    log_end_offset=partition.log.log_end_offset,
                )
            try:
                return await self._read_segment(
                    partition, segment, max(offset, segment.base_offset), max_bytes, min_one_batch
                )
            except ObjectStoreError as err:
                self._drop_window(partition, segment)
                if attempt == 0 and _is_missing(err):
                    # Retention may have deleted the segment since the list was cached: look again.
                    self.invalidate(partition)
                    continue
                raise RemoteStorageError(str(err)) from err
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _read_segment(
        self,
        partition: TieredPartition,
        segment: RemoteSegment,
        offset: int,
        max_bytes: int,
        min_one_batch: bool,
    ) -> bytes:
        window = self._window(partition, segment)
        if window.next_offset == offset:
            # Where the previous read stopped: the batch holding `offset` starts right there.
            self.stats.window_hits += 1
            start_position = window.next_position
            must_start_by = start_position
        else:
            indexes = await self._indexes_for(segment)
            start_position = indexes.position_for_offset(offset)
            following = bisect.bisect_right(indexes.offsets, offset)
            # The batch holding `offset` starts at or before the next index entry's position.
            must_start_by = (
                indexes.positions[following] if following < len(indexes.positions) else segment.size_bytes
            )
        size = segment.size_bytes
        buffer = bytearray(
            await self._window_bytes(
                window, start_position, min(size, must_start_by + max(max_bytes, HEADER_SIZE))
            )
        )

        async def ensure(length: int) -> bool:
            """Make buffer hold at least ``length`` bytes (from start_position) if the segment has them."""
            have = len(buffer)
            if have >= length:
                return True
            if start_position + have >= size:
                return False
            end = min(size, start_position + max(length, have + max_bytes))
            buffer.extend(await self._window_bytes(window, start_position + have, end))
            return len(buffer) >= length

        position = 0
        while True:
            if not await ensure(position + HEADER_SIZE):
                return b""
            first = self._parse(buffer, position, segment, start_position)
            if first.last_offset >= offset:
                break
            position += first.size
        first_position = position
        if first.size > max_bytes and not min_one_batch:
            return b""
        limit = first_position + max(max_bytes, first.size)
        stop = first_position
        next_offset = first.base_offset
        # Every batch that fits below `limit` is already in the buffer (it was read up to there),
        # so the walk reads more only for a first batch larger than the buffer.
        while stop + HEADER_SIZE <= limit:
            if not await ensure(stop + HEADER_SIZE):
                break
            header = self._parse(buffer, stop, segment, start_position)
            if stop + header.size > limit:
                break
            if not await ensure(stop + header.size):
                raise RemoteStorageError(
                    f"{segment.log_key} ends inside the batch at {start_position + stop}"
                )
            stop += header.size
            next_offset = header.next_offset
        window.next_offset, window.next_position = next_offset, start_position + stop
        self._read_ahead(partition, window, start_position + stop, max_bytes)
        data = bytes(buffer[first_position:stop])
        self.stats.bytes_read += len(data)
        return data

    def _parse(self, buffer: bytearray, position: int, segment: RemoteSegment, base: int) -> BatchHeader:
        header = _header_only(buffer, position)
        if header is None:
            raise RemoteStorageError(f"{segment.log_key}: bad batch header at byte {base + position}")
        return header

    async def _get(self, segment: RemoteSegment, position: int, length: int) -> bytes:
        self.stats.range_gets += 1
        return await self.objects.get_range(segment.log_key, position, length)

    # -- read windows ------------------------------------------------------------------------

    def _window(self, partition: TieredPartition, segment: RemoteSegment) -> _ReadWindow:
        key = (partition.topic_id, partition.index, segment.segment_id)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _ReadWindow(segment)
            while len(self._windows) > self._max_windows:
                _, evicted = self._windows.popitem(last=False)
                evicted.clear()
        else:
            self._windows.move_to_end(key)
        return window

    def _drop_window(self, partition: TieredPartition, segment: RemoteSegment) -> None:
        window = self._windows.pop((partition.topic_id, partition.index, segment.segment_id), None)
        if window is not None:
            window.clear()

    def _chunk(self, segment: RemoteSegment, start: int, length: int) -> _Chunk:
        length = min(length, segment.size_bytes - start)
        task = asyncio.create_task(self._get(segment, start, length), name=f"range {segment.log_key}@{start}")
        task.add_done_callback(_consume_exception)
        return _Chunk(start, length, task)

    async def _window_bytes(self, window: _ReadWindow, start: int, end: int) -> bytes:
        """Bytes [start, end) of the window's segment, from its chunks, fetching what they lack."""
        if end <= start:
            return b""
        kept = [chunk for chunk in window.chunks if chunk.end > start]
        if not kept or kept[0].start > start:
            kept = [self._chunk(window.segment, start, max(end - start, self.chunk_bytes))]
        while kept[-1].end < end:
            kept.append(self._chunk(window.segment, kept[-1].end, max(end - kept[-1].end, self.chunk_bytes)))
        window.chunks = kept
        parts = []
        for chunk in kept:
            if chunk.start >= end:
                break
            data = await asyncio.shield(chunk.task)
            parts.append(memoryview(data)[max(0, start - chunk.start) : end - chunk.start])
        return b"".join(parts)

    def _read_ahead(
        self, partition: TieredPartition, window: _ReadWindow, position: int, max_bytes: int
    ) -> None:
        """Keep ``readahead_chunks`` ranges in flight beyond ``position``; at the segment's end, start
        the next segment's first range."""
        segment = window.segment
        chunk_bytes = max(self.chunk_bytes, max_bytes)
        if position < segment.size_bytes:
            ahead = sum(1 for chunk in window.chunks if chunk.start >= position)
            while ahead < self.readahead_chunks and (
                not window.chunks or window.chunks[-1].end < segment.size_bytes
            ):
                start = window.chunks[-1].end if window.chunks else position
                window.chunks.append(self._chunk(segment, start, chunk_bytes))
                ahead += 1
            return
        cached = self._segments.get((partition.topic_id, partition.index))
        if cached is None:
            return
        number = bisect.bisect_right(cached.base_offsets, segment.base_offset)
        if number >= len(cached.segments) or cached.segments[number].base_offset != window.next_offset:
            return
        following = self._window(partition, cached.segments[number])
        if not following.chunks:
            following.next_offset, following.next_position = window.next_offset, 0
            following.chunks.append(self._chunk(following.segment, 0, chunk_bytes))
        self._drop_window(partition, segment)

    # -- read_committed ----------------------------------------------------------------------

    async def aborted_transactions(
        self, partition: TieredPartition, fetch_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset) for a read_committed
        read of the remote segment holding ``fetch_offset``, from its indexes object (which lists every
        aborted transaction overlapping the segment). Raises RemoteStorageError when S3 fails."""
        segment = await self._segment_for(partition, fetch_offset)
        if segment is None:
            return []
        try:
            indexes = await self._indexes_for(segment)
        except ObjectStoreError as err:
            raise RemoteStorageError(str(err)) from err
        return indexes.aborted_between(fetch_offset, upper_bound_offset)

    # -- list offsets ------------------------------------------------------------------------

    async def list_offset(self, partition: TieredPartition, timestamp: int) -> tuple[int, int, int] | None:
        """ListOffsets over the remote tier: (offset, timestamp, leader epoch), None to keep the local answer.

        ``timestamp`` -2 (earliest) gives the remote log start when it is below the local one (the
        timestamp is then -1, as Kafka answers); a timestamp >= 0 gives the first remote record at or
        after it below the local log start.
        """
        if timestamp == EARLIEST_TIMESTAMP:
            start = await self.log_start_offset(partition)
            if start == partition.log.log_start_offset:
                return None
            segment = await self._segment_for(partition, start)
            return start, -1, -1 if segment is None else _epoch_in(segment, start)
        if timestamp < 0:
            return None
        found = await self.offset_for_timestamp(partition, timestamp)
        if found is None:
            return None
        offset, record_timestamp = found
        segment = await self._segment_for(partition, offset)
        return offset, record_timestamp, -1 if segment is None else _epoch_in(segment, offset)

    async def offset_for_timestamp(
        self, partition: TieredPartition, timestamp_ms: int
    ) -> tuple[int, int] | None:
        """Kafka's ListOffsets by time over the remote tier below the local log start.

        (offset, timestamp) of the first remote record with a timestamp >= ``timestamp_ms``, None
        if the remote segments below the local log hold none (the local log is searched next).
        """
        local_start = partition.log.log_start_offset
        log_start = (await self._cached(partition)).remote.log_start_offset
        try:
            for segment in await self.remote_segments(partition):
                if segment.base_offset >= local_start:
                    break
                if segment.max_timestamp_ms < timestamp_ms:
                    continue
                found = await self._find_timestamp(segment, timestamp_ms, log_start)
                if found is not None:
                    return found
        except ObjectStoreError as err:
            raise RemoteStorageError(str(err)) from err
        return None

    async def _find_timestamp(
        self, segment: RemoteSegment, timestamp_ms: int, min_offset: int
    ) -> tuple[int, int] | None:
        """The first record of ``segment`` at or above ``min_offset`` (the log start) with a timestamp
        >= ``timestamp_ms``."""
        indexes = await self._indexes_for(segment)
        position = indexes.position_for_timestamp(timestamp_ms)
        buffer = b""
        buffer_start = position
        while position < segment.size_bytes:
            relative = position - buffer_start
            if relative + HEADER_SIZE > len(buffer):
                buffer = await self._get(
                    segment, position, min(_TIMESTAMP_SCAN_BYTES, segment.size_bytes - position)
                )
                buffer_start, relative = position, 0
            header = _header_only(buffer, relative)
            if header is None:
                raise RemoteStorageError(f"{segment.log_key}: bad batch header at byte {position}")
            if header.max_timestamp >= timestamp_ms and header.last_offset >= min_offset:
                if relative + header.size > len(buffer):
                    buffer = await self._get(segment, position, header.size)
                    buffer_start, relative = position, 0
                if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
                    return max(header.base_offset, min_offset), header.max_timestamp
                try:
                    batch = decode_batch(buffer, relative, verify_crc=False)
                except RecordsError as err:
                    raise RemoteStorageError(f"{segment.log_key}: batch at {position}: {err}") from err
                for record in batch.records:
                    if record.timestamp >= timestamp_ms and record.offset >= min_offset:
                        return record.offset, record.timestamp
            position += header.size
        return None


def _header_only(buffer: bytes | bytearray, position: int) -> BatchHeader | None:
    """The sanity-checked 61-byte header at ``position``, whether or not the batch body is in ``buffer``.

    (parse_header wants the whole batch; a range GET may hold only its start.) None if it is not
    a RecordBatch v2 header.
    """
    header = BatchHeader(*BATCH_HEADER.unpack_from(buffer, position))
    if (
        header.magic != CURRENT_MAGIC
        or header.batch_length < HEADER_SIZE - LOG_OVERHEAD
        or header.last_offset_delta < 0
    ):
        return None
    return header


def _epoch_in(segment: RemoteSegment, offset: int) -> int:
    """The leader epoch of ``offset`` by the segment's epoch entries; -1 if they do not say."""
    epoch = -1
    for entry_epoch, start in segment.epoch_entries:
        if start > offset:
            break
        epoch = entry_epoch
    return epoch


def _is_missing(error: ObjectStoreError) -> bool:
    cause = error.cause
    response = getattr(cause, "response", None) or {}
    return str(response.get("Error", {}).get("Code", "")) in ("NoSuchKey", "404", "InvalidRange")


def _consume_exception(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("prefetch %s failed: %s", task.get_name(), task.exception())
