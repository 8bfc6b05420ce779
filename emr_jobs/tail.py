"""The tail of a partition: offsets past the tiered end, read from its leader over the Kafka protocol.

Records a broker has not tiered yet (its active segment and sealed segments not uploaded) are only
on broker disks. The driver asks the leaders for each partition's log start offset and high
watermark (ListOffsets); an executor task then reads ``[start, end)`` of one partition with Fetch
requests through Floe's own client, which routes each request to the partition's current leader
and, when a broker dies or leadership moves, refreshes its metadata and retries on the new leader
(a read changes nothing on a broker, so repeating it is safe). Every fetched batch is CRC-checked
and decoded by the same Arrow decoder as the S3 path, so the two paths give identical rows.

read_committed: the driver plans up to each partition's last stable offset (ListOffsets with
isolation level 1) instead of its high watermark, the tasks fetch with isolation level 1 (the leader
answers up to the LSO, naming the aborted transactions that overlap the fetched range) and drop the
batches of those transactions before decoding, as Kafka's consumer does (``records.isolation``).

One asyncio loop per call: a Spark Python worker runs one task at a time, and the client is not
thread-safe, so nothing is shared between tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from broker_core.client import EARLIEST, LATEST, ClientError, FloeClient
from broker_core.records import decode_batch
from broker_core.records.errors import TruncatedBatchError
from broker_core.records.header import iter_headers
from broker_core.records.isolation import committed, is_abort_marker
from emr_jobs.errors import TailReadError

FETCH_MAX_BYTES = 8 * 1024 * 1024
FETCH_MAX_WAIT_MS = 100


@dataclass(frozen=True)
class TailRead(InputPartition):
    """One Spark input partition: offsets ``[start_offset, end_offset)`` of one partition, from its leader."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int


@dataclass(frozen=True)
class BrokerBounds:
    """A partition's offsets as its leader reports them: log start offset and high watermark (the
    last stable offset for a read_committed reader)."""

    log_start: int
    high_watermark: int


def broker_bounds(bootstrap_servers: str, topic: str, partitions: Sequence[int], *,
                  read_committed: bool = False) -> dict[int, BrokerBounds]:
    """Log start offset and high watermark (``read_committed``: last stable offset) of each of
    ``partitions``, from their leaders."""

    async def ask() -> dict[int, BrokerBounds]:
        async with FloeClient(bootstrap_servers, client_id="floe-spark-driver") as client:
            found = {}
            for partition in partitions:
                log_start, _ = await client.list_offsets(topic, partition, EARLIEST)
                high_watermark, _ = await client.list_offsets(topic, partition, LATEST, read_committed=read_committed)
                found[partition] = BrokerBounds(log_start, high_watermark)
            return found

    try:
        return asyncio.run(ask())
    except ClientError as error:
        raise TailReadError(topic=topic, partition=None, offset=None, reason=f"ListOffsets failed: {error}") from error


def num_partitions(bootstrap_servers: str, topic: str) -> int:
    """The partition count of ``topic`` as the brokers' metadata has it."""

    async def ask() -> int:
        async with FloeClient(bootstrap_servers, client_id="floe-spark-driver") as client:
            return await client.num_partitions(topic)

    try:
        return asyncio.run(ask())
    except ClientError as error:
        raise TailReadError(topic=topic, partition=None, offset=None, reason=f"Metadata failed: {error}") from error


def topics_matching(bootstrap_servers: str) -> list[str]:
    """Every topic the brokers know (for subscribePattern)."""

    async def ask() -> list[str]:
        async with FloeClient(bootstrap_servers, client_id="floe-spark-driver") as client:
            return await client.list_topics()

    try:
        return asyncio.run(ask())
    except ClientError as error:
        raise TailReadError(topic="*", partition=None, offset=None, reason=f"Metadata failed: {error}") from error


def read_tail(bootstrap_servers: str, read: TailRead, include_headers: bool, *,
              read_committed: bool = False) -> Iterator[pa.RecordBatch]:
    """Arrow batches of offsets ``[read.start_offset, read.end_offset)`` of one partition, fetched from
    its leader; ``read_committed`` leaves out the records of aborted transactions."""
    # Imported here, in the executor task: the Arrow decoding pulls in numba (half a second of CPU),
    # which the driver's planning workers, started afresh for every streaming query, do not need.
    from emr_jobs.arrow_records import RecordRange, iter_arrow_batches

    records = RecordRange(read.topic, read.partition, read.start_offset, read.end_offset, include_headers)
    source = f"{read.topic}-{read.partition} (fetched from its leader)"
    yield from iter_arrow_batches(_fetched_chunks(bootstrap_servers, read, read_committed), records,
                                  object_key=source)


def _fetched_chunks(bootstrap_servers: str, read: TailRead, read_committed: bool) -> Iterator[bytes]:
    """Whole batches covering ``[start, end)``, one fetch response's worth at a time (read_committed:
    without the batches of aborted transactions)."""
    loop = asyncio.new_event_loop()
    client = FloeClient(bootstrap_servers, client_id="floe-spark-executor")
    try:
        loop.run_until_complete(client.start())
        offset = read.start_offset
        while offset < read.end_offset:
            try:
                fetched = loop.run_until_complete(
                    client.fetch_raw(read.topic, read.partition, offset, max_bytes=FETCH_MAX_BYTES,
                                     max_wait_ms=FETCH_MAX_WAIT_MS, read_committed=read_committed)
                )
            except ClientError as error:
                raise TailReadError(topic=read.topic, partition=read.partition, offset=offset,
                                    reason=f"fetch failed: {error}") from error
            whole = _whole_batches(fetched.records)
            if not whole:
                if fetched.high_watermark < read.end_offset:
                    raise TailReadError(
                        topic=read.topic, partition=read.partition, offset=offset,
                        reason=f"the high watermark went back to {fetched.high_watermark}, below the planned "
                               f"end {read.end_offset} (an unclean leader change lost records)",
                    )
                continue
            kept = committed_only(whole, fetched.aborted_transactions) if read_committed else whole
            if kept:
                yield kept
            offset = fetched.next_offset
    finally:
        loop.run_until_complete(client.close())
        loop.close()


def _whole_batches(raw: bytes) -> bytes:
    """``raw`` without a last batch the broker cut at its byte limit."""
    end = 0
    try:
        for position, header in iter_headers(raw):
            end = position + header.size
    except TruncatedBatchError:
        pass
    return raw[:end] if end < len(raw) else raw


def committed_only(raw: bytes, aborted_transactions: Sequence[tuple[int, int]]) -> bytes:
    """The whole batches of one read_committed fetch response without those of its aborted
    transactions (producer id, first offset) and without control batches, as Kafka's consumer
    filters a fetch response; only ABORT markers are decoded."""
    if not aborted_transactions:
        return raw  # nothing to drop: the decoder skips control batches itself
    kept = committed(iter_headers(raw), aborted_transactions, lambda item: item[1],
                     lambda item: is_abort_marker(decode_batch(raw, item[0], verify_crc=False)))
    return b"".join(raw[position:position + header.size] for position, header in kept)


def tail_reads(topic: str, ranges: Mapping[int, tuple[int, int]]) -> list[TailRead]:
    """One TailRead per partition with a non-empty ``(start, end)`` range."""
    return [TailRead(topic, partition, start, end) for partition, (start, end) in sorted(ranges.items()) if end > start]


def broker_offsets_for_timestamp(bootstrap_servers: str, topic: str, partitions: Sequence[int],
                                 timestamp_ms: int) -> dict[int, int | None]:
    """Kafka's ListOffsets by timestamp on each partition's leader: the first offset whose timestamp
    is at or after ``timestamp_ms``, or None when no record reaches it."""

    async def ask() -> dict[int, int | None]:
        async with FloeClient(bootstrap_servers, client_id="floe-spark-driver") as client:
            found: dict[int, int | None] = {}
            for partition in partitions:
                offset, _ = await client.list_offsets(topic, partition, timestamp_ms)
                found[partition] = None if offset < 0 else offset
            return found

    try:
        return asyncio.run(ask())
    except ClientError as error:
        raise TailReadError(topic=topic, partition=None, offset=None, reason=f"ListOffsets failed: {error}") from error
