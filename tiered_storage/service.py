"""The tiering service: the broker subsystem that runs uploads, retention and remote reads of tiered topics.

The broker hosts it as a BrokerService. Every ``remote.log.manager.task.interval.ms`` (Kafka's name
and default, 30 s) it visits each hosted replica of a topic with ``remote.storage.enable=true``:

- on the leader, the partition's `PartitionUploader` (one per leader epoch) uploads the segments
  that became ready, then remote retention (``retention.ms|bytes``) expires the oldest remote
  segments, then local retention (``local.retention.ms|bytes``) deletes local segments the
  manifest says are in S3;
- on a follower, only local retention runs, against the remote end offset in the manifest;
- on both, a local log start below the manifest's (DeleteRecords moved it while this replica was a
  follower that had not fetched it yet, or was down) is moved up to it, and on the leader remote
  retention deletes the segments wholly below it whatever ``retention.*`` say.

At most ``remote.log.manager.copier.thread.pool.size`` partitions are visited at once, each with up
to ``remote.log.upload.segments.in.flight`` segments being sent; a segment below
``remote.log.s3.multipart.threshold.bytes`` goes up in one PutObject (its bytes in memory while it
is sent), a larger one in parts of ``remote.log.s3.multipart.part.bytes``,
``remote.log.s3.multipart.concurrency`` at a time. Remote reads fetch ranges of
``remote.log.reader.chunk.bytes`` with ``remote.log.reader.readahead.chunks`` more in flight
(see `tiered_storage.remote_reader`). A failure
in one partition (S3 or DynamoDB down) is logged and retried on the next visit; local data is
never deleted because of it. Its `RemoteLogReader` (``reader``) serves the Fetch and ListOffsets
handlers' reads below the local log start: the broker's assembly hands it to them as their
`RemoteReads`. Everything runs on the broker's event loop; S3
calls are aioboto3 coroutines and manifest calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from broker_core.clock import wall_clock_ms
from broker_core.metadata.errors import MetadataError
from broker_core.metrics.families import gauge
from broker_core.server.remote_reads import RemoteStorageError
from tiered_storage.manifest import ManifestError, ManifestStore
from tiered_storage.object_store import ObjectStoreError, SegmentObjectStore, UploadTuning
from tiered_storage.remote_reader import RemoteLogReader
from tiered_storage.retention import (
    TieredRetention,
    apply_local_retention,
    is_tiered,
    local_bytes_above,
    remote_segments_to_delete,
)
from tiered_storage.uploader import PartitionUploader, TieredPartition

if TYPE_CHECKING:
    from broker_core.server.context import BrokerContext

log = logging.getLogger(__name__)

_FAILURES = (ObjectStoreError, ManifestError, RemoteStorageError, MetadataError, OSError)


class TieringLagCollector(Collector):
    """``floe_tiering_lag_bytes{topic,partition}`` at scrape time: for each partition of a tiered topic this
    broker leads, the bytes of its sealed local segments holding offsets not yet in S3 (a segment the
    remote end falls inside counts whole). Before the uploader has read the manifest, every sealed byte counts."""

    def __init__(self, service: TieringService) -> None:
        self.service = service

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield gauge("floe_tiering_lag_bytes", "Bytes of sealed local segments not yet copied to S3, per partition led here",
                    ("topic", "partition"), [((topic, str(index)), lag) for (topic, index), lag in self.service.lag_bytes()])


class TieringService:
    """Tiered storage inside one broker: uploader per led partition, retention, and the remote reader."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context
        config = context.config
        self.interval_s = config.get_int("remote.log.manager.task.interval.ms") / 1000
        self.segments_in_flight = config.get_int("remote.log.upload.segments.in.flight")
        self.manifest = ManifestStore(config.aws)
        self.objects = SegmentObjectStore(
            config.aws,
            tuning=UploadTuning(
                multipart_threshold_bytes=config.get_int("remote.log.s3.multipart.threshold.bytes"),
                part_bytes=config.get_int("remote.log.s3.multipart.part.bytes"),
                part_concurrency=config.get_int("remote.log.s3.multipart.concurrency"),
            ),
            observer=context.metrics.s3_call,
        )
        self.reader = RemoteLogReader(
            self.manifest,
            self.objects,
            self._topic_is_tiered,
            chunk_bytes=config.get_int("remote.log.reader.chunk.bytes"),
            readahead_chunks=config.get_int("remote.log.reader.readahead.chunks"),
        )
        self._limiter = asyncio.Semaphore(
            config.get_int("remote.log.manager.copier.thread.pool.size")
        )
        self._uploaders: dict[tuple[str, int], PartitionUploader] = {}
        self._visits: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        context.metrics.add_collector(TieringLagCollector(self))

    def _topic_is_tiered(self, topic: str) -> bool:
        described = self.context.image.topics.get(topic)
        return described is not None and is_tiered(described.configs)

    def lag_bytes(self) -> list[tuple[tuple[str, int], int]]:
        """Per partition of a tiered topic led here, the bytes of its sealed segments not yet in S3."""
        lags = []
        for key, partition in list(self.context.replicas.partitions.items()):
            if not partition.is_leader or not self._topic_is_tiered(partition.topic):
                continue
            uploader = self._uploaders.get(key)
            remote_end = uploader.remote_end_offset if uploader is not None else -1
            lags.append((key, sum(segment.size for segment in partition.log.segments[:-1]
                                  if segment.next_offset - 1 > remote_end)))
        return lags

    # -- BrokerService -----------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.to_thread(self.manifest.ensure_table)
        await self.objects.__aenter__()
        self._loop_task = asyncio.create_task(self._run_forever(), name="tiering")

    async def stop(self) -> None:
        tasks = [task for task in (self._loop_task, *self._visits.values()) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._visits.clear()
        await self.objects.__aexit__(None, None, None)

    # -- the periodic visit ------------------------------------------------------------------

    async def _run_forever(self) -> None:
        while True:
            try:
                self.visit_all()
            except Exception:
                log.exception("tiering round failed")
            await asyncio.sleep(self.interval_s)

    def visit_all(self) -> None:
        """Start a visit of every hosted replica of a tiered topic that is not being visited already."""
        image = self.context.image
        hosted = self.context.replicas.partitions
        for key, partition in list(hosted.items()):
            described = image.topics.get(partition.topic)
            if (
                described is None
                or described.topic_id != partition.topic_id
                or not is_tiered(described.configs)
            ):
                self._uploaders.pop(key, None)
                continue
            running = self._visits.get(key)
            if running is not None and not running.done():
                continue
            limits = TieredRetention.resolve(described.configs, self.context.config)
            self._visits[key] = asyncio.create_task(
                self._visit(key, partition, limits), name=f"tiering {key}"
            )
        for key in [k for k in self._uploaders if k not in hosted]:
            del self._uploaders[key]

    async def visit_and_wait(self) -> None:
        """One full round, waiting for every visit to end (tests and benchmarks use it)."""
        self.visit_all()
        await asyncio.gather(*self._visits.values(), return_exceptions=True)

    async def _visit(self, key: tuple[str, int], partition: TieredPartition, limits: TieredRetention) -> None:
        async with self._limiter:
            log_start = None
            try:
                if partition.is_leader:
                    remote_end = await self._lead(key, partition, limits)
                else:
                    self._uploaders.pop(key, None)
                    head = await asyncio.to_thread(
                        self.manifest.partition_head, partition.topic_id, partition.index
                    )
                    remote_end = -1 if head is None else head.end_offset
                log_start = (await self.reader.remote_log(partition)).log_start_offset
            except _FAILURES as err:
                log.warning("tiering of %s-%d: %s", partition.topic, partition.index, err)
                uploader = self._uploaders.get(key)
                if uploader is None or not partition.is_leader:
                    return
                remote_end = uploader.remote_end_offset
            if self.context.replicas.partitions.get(key) is not partition:
                return  # the replica was closed (reassigned or deleted) while we were away
            if log_start is not None and log_start > partition.log.log_start_offset:
                partition.log.delete_records_before(min(log_start, partition.log.log_end_offset))
            new_start = apply_local_retention(partition.log, remote_end, limits, wall_clock_ms())
            log.debug(
                "%s-%d local log starts at %d, remote end %d",
                partition.topic,
                partition.index,
                new_start,
                remote_end,
            )

    async def _lead(self, key: tuple[str, int], partition: TieredPartition, limits: TieredRetention) -> int:
        uploader = self._uploaders.get(key)
        if uploader is None or uploader.leader_epoch != partition.leader_epoch:
            uploader = PartitionUploader(
                partition, self.manifest, self.objects, on_change=self.reader.invalidate
            )
            self._uploaders[key] = uploader
        upload_failure: Exception | None = None
        try:
            await uploader.run_once()
        except _FAILURES as err:
            upload_failure = err
        # Retention of what is already remote goes on even when this round's upload failed.
        if uploader.still_leading and uploader.remote_end_offset >= 0:
            await self._expire_remote(uploader, limits)
        if upload_failure is not None:
            raise upload_failure
        return uploader.remote_end_offset

    async def _expire_remote(self, uploader: PartitionUploader, limits: TieredRetention) -> None:
        partition = uploader.partition
        remote = await self.reader.remote_log(partition, refresh=True)
        local_only = local_bytes_above(partition.log, uploader.remote_end_offset)
        condemned = remote_segments_to_delete(list(remote.segments), local_only, limits, wall_clock_ms(),
                                              remote.log_start_offset)
        if condemned:
            await uploader.expire(condemned)
