"""The broker's log cleaner service: Kafka's LogCleaner threads over every compacted replica hosted here.

Each of log.cleaner.threads workers (coroutines on the broker's event loop, each with a cleaner
process of its own) repeats: pick the dirtiest compacted log not being cleaned (dirty ratio at or
above its min.cleanable.dirty.ratio, or a record past max.compaction.lag.ms, the overdue first), run
the pass's reading and writing in the process (`broker_core.log.cleaner.clean_in_process`, each
process held to its share of log.cleaner.io.max.bytes.per.second), then swap the result in a group
at a time: the segment list changes on the event loop, where every other change to a log (appends,
rolls, retention, truncation) happens too, so no reader sees a half-swapped segment list, and the
group's file renames then run on a worker thread (`PartitionLog.swap_segments`). Processes rather than threads: a pass is Python work on
every record, and on a thread it would hold the GIL against the event loop (produce p99 went from 38
to 106 ms in bench/cleaner_bench.py on threads). With nothing to clean a worker waits log.cleaner.backoff.ms. Leaders and followers
alike clean their own copy, each below its own high watermark, as Kafka's replicas do. Stopping sets
an abort flag the threads check between batches and waits for them before the logs are closed.
The log.cleaner.* broker settings are dynamic: backoff and dedupe buffer are read at each use, and a
change of threads or I/O rate restarts the cleaners with the new values, as Kafka's reconfigure does.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from broker_core.clock import wall_clock_ms
from broker_core.log.cleaner import (
    CleaningAbortedError,
    CleaningPlan,
    OffsetMapTooSmallError,
    clean_in_process,
    discard,
    init_cleaner_process,
    open_cleaned,
    plan_cleaning,
    swap_group,
    write_cleaner_checkpoint,
)
from broker_core.log.offset_map import OffsetMap

from .context import BrokerContext
from .partition import Partition

log = logging.getLogger(__name__)
# How often the service looks for changed dynamic cleaner settings (they arrive with the metadata image).
RECONFIGURE_CHECK_S = 1.0


class LogCleanerService:
    """The cleaner threads of one broker; see the module docstring. Runs on the broker's event loop."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context
        self.threads, self.io_rate = self._pool_settings()
        # spawn, not fork: the broker has threads running, which a forked child would inherit half-held.
        self._context = multiprocessing.get_context("spawn")
        self._abort = self._context.Event()
        self._executor: ProcessPoolExecutor | None = None
        self._tasks: list[asyncio.Task] = []
        self._cleaning: set[tuple[str, int]] = set()
        self._watcher: asyncio.Task | None = None

    def _live(self, name: str) -> str:
        """A cleaner setting's value now: they are dynamic broker configs (changed live, per broker or cluster-wide)."""
        return self.context.config.live(name, self.context.image.broker_configs)

    @property
    def backoff_s(self) -> float:
        return int(self._live("log.cleaner.backoff.ms")) / 1000

    @property
    def dedupe_buffer_bytes(self) -> int:
        return int(self._live("log.cleaner.dedupe.buffer.size"))

    def _pool_settings(self) -> tuple[int, float]:
        return max(1, int(self._live("log.cleaner.threads"))), float(self._live("log.cleaner.io.max.bytes.per.second"))

    async def start(self) -> None:
        await self._start_pool()
        self._watcher = asyncio.create_task(self._watch_settings(), name="log-cleaner-settings")

    async def _watch_settings(self) -> None:
        """As Kafka's LogCleaner.reconfigure: when log.cleaner.threads or log.cleaner.io.max.bytes.per.second
        change, the cleaners stop (a pass under way is aborted and planned again) and start anew."""
        while True:
            await asyncio.sleep(RECONFIGURE_CHECK_S)
            wanted = self._pool_settings()
            if wanted != (self.threads, self.io_rate):
                log.info("log cleaner: %d threads at %g bytes/s -> %d threads at %g bytes/s", self.threads,
                         self.io_rate, *wanted)
                await self._stop_pool()
                self.threads, self.io_rate = wanted
                await self._start_pool()

    async def _start_pool(self) -> None:
        self._abort.clear()
        self._executor = ProcessPoolExecutor(
            self.threads, mp_context=self._context, initializer=init_cleaner_process,
            initargs=(self._abort, self.io_rate / self.threads),
        )
        self._tasks = [asyncio.create_task(self._work(), name=f"log-cleaner-{n}") for n in range(self.threads)]

    async def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None
        await self._stop_pool()

    async def _stop_pool(self) -> None:
        self._abort.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, wait=True)
            self._executor = None

    def _pick(self) -> tuple[Partition, CleaningPlan] | None:
        """The dirtiest due log not being cleaned, with its plan."""
        now = wall_clock_ms()
        best: tuple[Partition, CleaningPlan] | None = None
        for partition in list(self.context.replicas.partitions.values()):
            if (partition.topic, partition.index) in self._cleaning or not partition.log.config.compact:
                continue
            producers = partition.producers.producers if partition.producers is not None else {}
            last_batches = frozenset(
                (pid, entry.batches[-1].last_offset) for pid, entry in producers.items() if entry.batches
            )
            plan = plan_cleaning(partition.log, high_watermark=partition.high_watermark,
                                 producer_last_offsets=last_batches, now_ms=now)
            if plan is None:
                continue
            if best is None or plan.dirty_ratio > best[1].dirty_ratio:
                best = (partition, plan)
        return best

    async def _work(self) -> None:
        while True:
            picked = self._pick()
            if picked is None:
                await asyncio.sleep(self.backoff_s)
                continue
            partition, plan = picked
            name = (partition.topic, partition.index)
            self._cleaning.add(name)
            try:
                if not await self._clean(partition, plan):
                    return
            finally:
                self._cleaning.discard(name)

    async def _clean(self, partition: Partition, plan: CleaningPlan) -> bool:
        """One pass over ``partition``; False when the service is stopping."""
        loop = asyncio.get_running_loop()
        try:
            capacity = OffsetMap.for_buffer(self.dedupe_buffer_bytes, self.threads).capacity
            result = await loop.run_in_executor(self._executor, clean_in_process, plan.job, capacity)
        except (CleaningAbortedError, BrokenProcessPool):
            return False
        except FileNotFoundError:
            # Retention or a truncation took a segment before the pass opened it; plan again.
            return True
        except OffsetMapTooSmallError as exc:
            log.error("cannot clean %s-%d: %s", partition.topic, partition.index, exc)
            await asyncio.sleep(self.backoff_s)
            return True
        except asyncio.CancelledError:
            self._abort.set()
            raise
        except Exception:
            log.exception("cleaning %s-%d failed", partition.topic, partition.index)
            await asyncio.sleep(self.backoff_s)
            return True
        if self._abort.is_set():
            discard(plan.job.directory, result)
            return False
        # Opening the new segments, the renames of each group's swap and writing the checkpoint (an
        # fsync) go to a worker thread; only the change of the segment list runs on the event loop, a
        # group at a time. File renames wait for the file system's journal, which the cleaner's own
        # fsyncs (and any other writer's) keep busy: on the event loop they stalled every partition's
        # requests for 10-40 ms a pass (bench/cleaner_bench.py, docs/performance.md "Log cleaner").
        opened = await asyncio.to_thread(open_cleaned, plan, result)
        swapped = 0
        for group, segment in zip(result.groups, opened, strict=True):
            swap = swap_group(plan, group, segment)
            if swap is not None:
                await asyncio.to_thread(swap.finish)
                swapped += 1
            elif segment is not None:
                await asyncio.to_thread(segment.close_and_delete)
        if swapped == len(result.groups) and swapped:
            await asyncio.to_thread(write_cleaner_checkpoint, plan, result)
        log.info("cleaned %s-%d: %d of %d groups swapped, %d bytes read, %d written, %d of %d records kept",
                 partition.topic, partition.index, swapped, len(result.groups), result.bytes_read,
                 result.bytes_written, result.records_kept, result.records_read)
        return True
