"""The broker's log cleaner service: Kafka's LogCleaner threads over every compacted replica hosted here.

Each of log.cleaner.threads workers (coroutines on the broker's event loop, each with a thread of
its own) repeats: pick the dirtiest compacted log not being cleaned (dirty ratio at or above its
min.cleanable.dirty.ratio, or a record past max.compaction.lag.ms, the overdue first), run the pass's
reading and writing on its thread (`broker_core.log.cleaner.clean`, throttled by one shared
log.cleaner.io.max.bytes.per.second), then swap the result in on the event loop, where every other
change to a log (appends, rolls, retention, truncation) happens too, so no reader sees a half-swapped
segment list. With nothing to clean a worker waits log.cleaner.backoff.ms. Leaders and followers
alike clean their own copy, each below its own high watermark, as Kafka's replicas do. Stopping sets
an abort flag the threads check between batches and waits for them before the logs are closed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from broker_core.clock import wall_clock_ms
from broker_core.log.cleaner import (
    CleaningAbortedError,
    CleaningPlan,
    CleaningResult,
    IoThrottle,
    OffsetMapTooSmallError,
    apply_cleaning,
    clean,
    discard,
    plan_cleaning,
)
from broker_core.log.offset_map import OffsetMap

from .context import BrokerContext
from .partition import Partition

log = logging.getLogger(__name__)


class LogCleanerService:
    """The cleaner threads of one broker; see the module docstring. Runs on the broker's event loop."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context
        config = context.config
        self.threads = max(1, config.get_int("log.cleaner.threads"))
        self.backoff_s = config.get_int("log.cleaner.backoff.ms") / 1000
        self.dedupe_buffer_bytes = config.get_int("log.cleaner.dedupe.buffer.size")
        self.throttle = IoThrottle(float(config.get("log.cleaner.io.max.bytes.per.second")))
        self._abort = threading.Event()
        self._executor: ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task] = []
        self._cleaning: set[tuple[str, int]] = set()

    async def start(self) -> None:
        self._abort.clear()
        self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="log-cleaner")
        self._tasks = [asyncio.create_task(self._work(), name=f"log-cleaner-{n}") for n in range(self.threads)]

    async def stop(self) -> None:
        self._abort.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, wait=True)
            self._executor = None

    def _pick(self) -> tuple[Partition, CleaningPlan] | None:
        """The dirtiest due log not being cleaned, with its plan (other plans are released at once)."""
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
                if best is not None:
                    best[1].release()
                best = (partition, plan)
            else:
                plan.release()
        return best

    def _clean(self, plan: CleaningPlan, offset_map: OffsetMap) -> CleaningResult:
        """The thread's part; it owns the plan's descriptors from here on, also if its waiter is cancelled."""
        try:
            return clean(plan, offset_map, throttle=self.throttle, abort=self._abort)
        finally:
            plan.release()

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            picked = self._pick()
            if picked is None:
                await asyncio.sleep(self.backoff_s)
                continue
            partition, plan = picked
            name = (partition.topic, partition.index)
            self._cleaning.add(name)
            try:
                offset_map = OffsetMap.for_buffer(self.dedupe_buffer_bytes, self.threads)
                result = await loop.run_in_executor(self._executor, self._clean, plan, offset_map)
            except CleaningAbortedError:
                return
            except OffsetMapTooSmallError as exc:
                log.error("cannot clean %s-%d: %s", partition.topic, partition.index, exc)
                await asyncio.sleep(self.backoff_s)
                continue
            except asyncio.CancelledError:
                self._abort.set()
                raise
            except Exception:
                log.exception("cleaning %s-%d failed", partition.topic, partition.index)
                await asyncio.sleep(self.backoff_s)
                continue
            finally:
                self._cleaning.discard(name)
            if self._abort.is_set():
                for group in result.groups:
                    discard(group)
                return
            swapped = apply_cleaning(plan, result)
            log.info("cleaned %s-%d: %d of %d groups swapped, %d bytes read, %d written, %d of %d records kept",
                     partition.topic, partition.index, swapped, len(result.groups), result.bytes_read,
                     result.bytes_written, result.records_kept, result.records_read)
