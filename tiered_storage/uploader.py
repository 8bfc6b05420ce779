"""The per-partition uploader: the leader copies each sealed, committed segment to S3 exactly once.

KIP-405's copy task, run by the tiering service for every partition this broker leads on a topic
with ``remote.storage.enable=true``. A segment is ready when it is sealed (not the active segment)
and its last offset is below the last stable offset (the high watermark, or the first offset of an
open transaction), so only committed data, and no transaction still open, is tiered. For each ready
segment the uploader writes a COPY_STARTED manifest row, uploads the ".indexes" object
(`tiered_storage.indexes`) and the .log bytes as one object (multipart when large), then commits
the row COPY_FINISHED (`ManifestStore.finish_copy`); commits go strictly in offset order. Where to resume comes from
the manifest alone: the partition head's end offset; after a restart or a leader change the next
uploader continues from there. A local segment that reaches below the remote end (a new leader
whose segments were rolled at other offsets) is uploaded from its first batch above the remote
end, with indexes rebuilt for that slice, so remote segments never overlap.

Failures: an upload or commit that fails is fenced with `abort_copy` and its objects deleted (in
that order, so objects never vanish under a committed row); if S3 or DynamoDB is down the fenced
row is remembered and cleaned on the next run. COPY_STARTED rows found when an uploader starts
belong to a previous run (a crash between upload and commit) and are cleaned the same way, as are
DELETE_STARTED rows a crash left half-deleted. Nothing here deletes local data: local retention
(`tiered_storage.retention`) deletes only what the manifest says is committed.

Concurrency: an uploader runs on the broker's event loop; a few segments of its partition may be
in flight at once (while the oldest commits, the next ones are read and sent). File bytes are read
in worker threads from a duplicate of the segment's descriptor, so a segment the log
retires meanwhile stays readable; manifest calls run in worker threads (pynamodb is synchronous).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from broker_core.log.leader_epoch import EpochEntry
from broker_core.log.partition_log import PartitionLog
from broker_core.log.segment import Segment
from broker_core.records.header import BATCH_HEADER, HEADER_SIZE, BatchHeader
from tiered_storage.indexes import encode_indexes
from tiered_storage.layout import new_segment_id
from tiered_storage.manifest import (
    ManifestStore,
    ManifestUnavailableError,
    RemoteSegment,
    SegmentCommitRejectedError,
    SegmentState,
    SegmentStateError,
)
from tiered_storage.object_store import ObjectStoreError, SegmentObjectStore

log = logging.getLogger(__name__)

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class TieredPartition(Protocol):
    """What the uploader needs of a hosted replica (broker_core.server.partition.Partition has it)."""

    topic: str
    index: int
    topic_id: str
    log: PartitionLog
    leader_epoch: int
    high_watermark: int

    @property
    def is_leader(self) -> bool: ...

    @property
    def last_stable_offset(self) -> int: ...


@dataclass(frozen=True, slots=True)
class UploadCandidate:
    """Bytes [position, position + length) of ``segment``: batches with offsets base_offset..end_offset."""

    segment: Segment
    base_offset: int
    end_offset: int
    position: int
    length: int

    @property
    def whole(self) -> bool:
        return self.position == 0 and self.length == self.segment.size


@dataclass(frozen=True, slots=True)
class SliceIndexes:
    offset_index: bytes
    time_index: bytes
    max_timestamp: int


def next_candidate(log_: PartitionLog, high_watermark: int, remote_end_offset: int) -> UploadCandidate | None:
    """The oldest sealed segment with offsets above ``remote_end_offset`` and wholly below the HW.

    A segment straddling the remote end yields the slice from its first batch above it.
    """
    segments = log_.segments
    for segment in segments[:-1]:
        last_offset = segment.next_offset - 1
        if segment.size == 0 or last_offset <= remote_end_offset:
            continue
        if segment.next_offset > high_watermark:
            return None
        if segment.base_offset > remote_end_offset:
            return UploadCandidate(segment, segment.base_offset, last_offset, 0, segment.size)
        found = segment.find_batch(remote_end_offset + 1)
        if found is not None and found[1].base_offset <= remote_end_offset:
            found = segment.find_batch(found[1].next_offset)
        if found is None:
            continue
        position, header = found
        return UploadCandidate(segment, header.base_offset, last_offset, position, segment.size - position)
    return None


def segment_epochs(entries: Sequence[EpochEntry], base_offset: int, end_offset: int) -> list[tuple[int, int]]:
    """The leader-epoch entries covering [base_offset, end_offset], the first clamped to ``base_offset``."""
    covering = []
    for number, entry in enumerate(entries):
        next_start = entries[number + 1].start_offset if number + 1 < len(entries) else None
        if (next_start is not None and next_start <= base_offset) or entry.start_offset > end_offset:
            continue
        covering.append((entry.epoch, max(entry.start_offset, base_offset)))
    return covering


def packed_indexes(segment: Segment) -> tuple[bytes, bytes]:
    """A whole segment's offset and time indexes in their on-disk byte format, from its in-memory entries."""
    base = segment.base_offset
    offset_index, time_index = segment.offset_index, segment.time_index
    offset_bytes = b"".join(
        _OFFSET_ENTRY.pack(offset - base, position)
        for offset, position in (offset_index.entry(n) for n in range(len(offset_index)))
    )
    time_bytes = b"".join(
        _TIME_ENTRY.pack(timestamp, offset - base)
        for timestamp, offset in (time_index.entry(n) for n in range(len(time_index)))
    )
    return offset_bytes, time_bytes


def scan_slice_indexes(
    fd: int, position: int, length: int, base_offset: int, index_interval_bytes: int
) -> SliceIndexes:
    """Rebuild sparse indexes for bytes [position, position + length) of a segment file, as the log would.

    Positions and relative offsets are relative to the slice (its first batch is at 0 and starts at
    ``base_offset``); the rule is the log's: a batch is indexed once more than
    ``index.interval.bytes`` were written since the previous entry, and the largest timestamp closes
    the time index. Reads only batch headers.
    """
    offset_entries, time_entries = [], []
    since = 0
    max_timestamp, offset_of_max = -1, -1
    last_time_entry = -1
    relative = 0
    while relative < length:
        data = os.pread(fd, HEADER_SIZE, position + relative)
        if len(data) < HEADER_SIZE:
            raise EOFError(f"segment ends inside the batch header at {position + relative}")
        header = BatchHeader(*BATCH_HEADER.unpack(data))
        if header.max_timestamp > max_timestamp:
            max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
        if since > index_interval_bytes:
            offset_entries.append(_OFFSET_ENTRY.pack(header.last_offset - base_offset, relative))
            if max_timestamp > last_time_entry:
                time_entries.append(_TIME_ENTRY.pack(max_timestamp, offset_of_max - base_offset))
                last_time_entry = max_timestamp
            since = 0
        since += header.size
        relative += header.size
    if max_timestamp > last_time_entry:
        time_entries.append(_TIME_ENTRY.pack(max_timestamp, offset_of_max - base_offset))
    return SliceIndexes(b"".join(offset_entries), b"".join(time_entries), max_timestamp)


class PartitionUploader:
    """Uploads one led partition's ready segments for one leadership term (one leader epoch).

    At most ``segments_in_flight`` segments are read and sent at once; each holds its bytes in
    memory while it is sent (up to the multipart threshold, or the parts in flight beyond it).

    ``on_change`` is called after every manifest change this uploader makes (commit or deletion),
    so the remote reader's cache of the partition's segments can be refreshed.

    Invariants (KIP-405): a segment is uploaded only once it is sealed and wholly below the high
    watermark, its objects are in S3 before its manifest row says COPY_FINISHED, and each commit is
    conditional on the partition head's leader epoch not exceeding this uploader's, so an uploader of
    an older term cannot commit once a newer leader has. The tiering service calls it from the broker's event loop, one `run_once` or
    `expire` at a time per partition.
    """

    def __init__(
        self,
        partition: TieredPartition,
        manifest: ManifestStore,
        objects: SegmentObjectStore,
        *,
        on_change: Callable[[TieredPartition], None] | None = None,
        segments_in_flight: int = 2,
    ) -> None:
        self.partition = partition
        self.manifest = manifest
        self.objects = objects
        self.leader_epoch = partition.leader_epoch
        self.segments_in_flight = segments_in_flight
        self.remote_end_offset = -1
        self._on_change = on_change
        self._prepared = False
        self._to_clean: list[RemoteSegment] = []

    @property
    def still_leading(self) -> bool:
        partition = self.partition
        return partition.is_leader and partition.leader_epoch == self.leader_epoch

    async def _manifest(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(method, *args, **kwargs)

    async def prepare(self) -> None:
        """Read the remote end from the manifest and clean rows earlier runs left unfinished."""
        partition = self.partition
        # Two independent reads: one round trip to DynamoDB instead of two before the first upload.
        head, unfinished = await asyncio.gather(
            self._manifest(self.manifest.partition_head, partition.topic_id, partition.index),
            self._manifest(
                self.manifest.list_segments,
                partition.topic_id,
                partition.index,
                (SegmentState.COPY_STARTED, SegmentState.DELETE_STARTED),
            ),
        )
        # A COPY_STARTED row of a higher epoch belongs to a newer leader still at work: not ours to clean.
        self._to_clean = [
            row
            for row in unfinished
            if row.state is SegmentState.DELETE_STARTED or row.leader_epoch <= self.leader_epoch
        ]
        self.remote_end_offset = -1 if head is None else head.end_offset
        self._prepared = True
        await self._clean_leftovers()

    async def _clean_leftovers(self) -> None:
        pending, self._to_clean = self._to_clean, []
        for row in pending:
            if not await self._discard(row):
                self._to_clean.append(row)

    async def _discard(self, row: RemoteSegment) -> bool:
        """Fence (if still COPY_STARTED), delete the objects, finish the deletion; False if it must be retried."""
        try:
            if row.state is SegmentState.COPY_STARTED:
                try:
                    row = await self._manifest(self.manifest.abort_copy, row)
                except SegmentStateError:
                    # The row moved on: committed after all, or already being deleted by someone else.
                    return True
            log.info(
                "deleting the objects of segment %s of %s-%d [%d, %d]",
                row.segment_id,
                row.topic,
                row.partition,
                row.base_offset,
                row.end_offset,
            )
            await self.objects.delete_objects([row.log_key, row.indexes_key])
            await self._manifest(self.manifest.finish_delete, row)
        except SegmentStateError:
            return True
        except (ObjectStoreError, ManifestUnavailableError) as err:
            log.warning(
                "cleaning segment %s of %s-%d failed, will retry: %s",
                row.segment_id,
                row.topic,
                row.partition,
                err,
            )
            return False
        return True

    async def run_once(self) -> list[RemoteSegment]:
        """Upload every ready segment while still leading; return the committed rows, oldest first.

        Up to ``segments_in_flight`` segments upload at once (the next ones are read and sent while
        the oldest commits), but commits happen strictly in offset order, as the head item
        requires. Stops at the first failure, raising it (ObjectStoreError, ManifestError); uploads
        still in flight are then fenced and cleaned, and the next run resumes from the manifest.
        """
        if not self._prepared:
            await self.prepare()
        elif self._to_clean:
            await self._clean_leftovers()
        committed: list[RemoteSegment] = []
        in_flight: deque[asyncio.Task[RemoteSegment | None]] = deque()
        planned_end = self.remote_end_offset
        try:
            while self.still_leading:
                while len(in_flight) < self.segments_in_flight:
                    # Only what lies below the LSO, as Kafka's RemoteLogManager copies: every transaction
                    # begun in a tiered segment has ended, so remote read_committed reads can settle it.
                    candidate = next_candidate(self.partition.log, self.partition.last_stable_offset, planned_end)
                    if candidate is None:
                        break
                    in_flight.append(asyncio.create_task(self._copy(candidate)))
                    planned_end = candidate.end_offset
                if not in_flight:
                    break
                row = await in_flight.popleft()
                if row is None:
                    # The segment left the log before it could be read: plan again from what is committed.
                    await self._cancel(in_flight)
                    planned_end = self.remote_end_offset
                    continue
                finished = await self._commit(row)
                if finished is None:
                    await self._cancel(in_flight)
                    planned_end = self.remote_end_offset
                    continue
                committed.append(finished)
        finally:
            await asyncio.shield(self._cancel(in_flight))
        return committed

    async def _cancel(self, in_flight: deque[asyncio.Task[RemoteSegment | None]]) -> None:
        """Stop uploads still in flight and fence and clean those that finished uncommitted."""
        while in_flight:
            task = in_flight.popleft()
            task.cancel()
            try:
                row = await task
            except (asyncio.CancelledError, Exception):
                continue  # _copy cleaned up after itself
            if row is not None:
                await self._give_up(row)

    async def _copy(self, candidate: UploadCandidate) -> RemoteSegment | None:
        """COPY_STARTED row, then both objects; the uploaded (uncommitted) row, None if the segment is gone."""
        partition = self.partition
        segment = candidate.segment
        if segment.fd < 0:
            return None
        fd = os.dup(segment.fd)
        try:
            if candidate.whole:
                offset_index, time_index = packed_indexes(segment)
                max_timestamp = segment.max_timestamp
            else:
                scanned = await asyncio.to_thread(
                    scan_slice_indexes,
                    fd,
                    candidate.position,
                    candidate.length,
                    candidate.base_offset,
                    partition.log.config.index_interval_bytes,
                )
                offset_index, time_index = scanned.offset_index, scanned.time_index
                max_timestamp = scanned.max_timestamp
            epochs = segment_epochs(
                partition.log.leader_epochs.entries, candidate.base_offset, candidate.end_offset
            )
            # Every aborted transaction overlapping the range, its marker here or in a later local
            # segment: below the LSO all of them have ended, so a reader needs no other segment's.
            aborted = partition.log.aborted_transactions(candidate.base_offset, candidate.end_offset + 1)
            indexes = encode_indexes(candidate.base_offset, offset_index, time_index, epochs,
                                     aborted_transactions=aborted)
            row = await self._manifest(
                self.manifest.start_copy,
                topic=partition.topic,
                topic_id=partition.topic_id,
                partition=partition.index,
                segment_id=new_segment_id(),
                base_offset=candidate.base_offset,
                end_offset=candidate.end_offset,
                max_timestamp_ms=max(max_timestamp, -1),
                size_bytes=candidate.length,
                leader_epoch=self.leader_epoch,
                epoch_entries=epochs,
            )
            # Both objects at once (the small one costs a round trip, not a transfer); if either fails
            # or this task is cancelled, the other is stopped before the row's objects are cleaned.
            uploads = [
                asyncio.ensure_future(self.objects.put_bytes(row.indexes_key, indexes)),
                asyncio.ensure_future(
                    self.objects.upload_file_range(row.log_key, fd, candidate.position, candidate.length)
                ),
            ]
            try:
                await asyncio.gather(*uploads)
            except BaseException:
                for upload in uploads:
                    upload.cancel()
                await asyncio.shield(asyncio.gather(*uploads, return_exceptions=True))
                await asyncio.shield(self._give_up(row))
                raise
            return row
        finally:
            os.close(fd)

    async def _commit(self, row: RemoteSegment) -> RemoteSegment | None:
        """COPY_STARTED -> COPY_FINISHED; None (row fenced and cleaned) if the head refused it."""
        partition = self.partition
        try:
            finished = await self._manifest(self.manifest.finish_copy, row)
        except SegmentCommitRejectedError as err:
            log.info("segment %s not committed: %s", row.segment_id, err)
            await self._give_up(row)
            head = await self._manifest(self.manifest.partition_head, partition.topic_id, partition.index)
            self.remote_end_offset = -1 if head is None else head.end_offset
            return None
        except ManifestUnavailableError:
            # The commit may have happened: only a fresh look at the manifest can tell.
            self._prepared = False
            raise
        except BaseException:
            await asyncio.shield(self._give_up(row))
            raise
        self.remote_end_offset = finished.end_offset
        log.info(
            "tiered %s-%d [%d, %d] (%d bytes) as segment %s",
            partition.topic,
            partition.index,
            finished.base_offset,
            finished.end_offset,
            finished.size_bytes,
            finished.segment_id,
        )
        if self._on_change is not None:
            self._on_change(partition)
        return finished

    async def expire(self, rows: list[RemoteSegment]) -> int:
        """Delete remote segments retention condemned, oldest first: DELETE_STARTED, objects, DELETE_FINISHED.

        Returns how many left the readable remote log. A deletion whose objects could not be
        deleted stays DELETE_STARTED and is retried on the next run.
        """
        expired = 0
        for row in rows:
            try:
                deleting = await self._manifest(self.manifest.start_delete, row)
            except SegmentStateError:
                continue
            expired += 1
            if self._on_change is not None:
                self._on_change(self.partition)
            log.info(
                "retention deletes remote segment %s of %s-%d [%d, %d]",
                row.segment_id,
                row.topic,
                row.partition,
                row.base_offset,
                row.end_offset,
            )
            await self._give_up(deleting)
        return expired

    async def _give_up(self, row: RemoteSegment) -> None:
        if not await self._discard(row):
            self._to_clean.append(row)
