"""Remote reads against moto: the same bytes as the local log, offsets out of range, ListOffsets."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from broker_core.aws import AwsSettings
from broker_core.log.errors import OffsetOutOfRangeError
from broker_core.records.header import iter_headers
from tests.tiered_storage.conftest import BASE_TIMESTAMP_MS, LeaderPartition, fill
from tiered_storage.manifest import ManifestStore
from tiered_storage.object_store import SegmentObjectStore
from tiered_storage.remote_reader import RemoteLogReader
from tiered_storage.retention import TieredRetention, apply_local_retention
from tiered_storage.uploader import PartitionUploader

T = TypeVar("T")
LOCAL_RETENTION_ZERO = TieredRetention(
    retention_ms=-1, retention_bytes=-1, local_retention_ms=0, local_retention_bytes=0
)


def with_reader(
    leader: LeaderPartition,
    manifest: ManifestStore,
    settings: AwsSettings,
    work: Callable[[RemoteLogReader], Awaitable[T]],
    **reader_options: int,
) -> T:
    """Tier the leader's ready segments, then run ``work`` with a reader of them."""

    async def run() -> T:
        async with SegmentObjectStore(settings) as objects:
            reader = RemoteLogReader(manifest, objects, lambda topic: True, **reader_options)
            await PartitionUploader(leader, manifest, objects, on_change=reader.invalidate).run_once()
            return await work(reader)

    return asyncio.run(run())


@pytest.fixture
def tiered(leader: LeaderPartition) -> LeaderPartition:
    fill(leader.log, 50)
    leader.high_watermark = leader.log.log_end_offset
    return leader


# Small chunks make reads span several ranges and read-ahead cross segment ends.
READER_SHAPES = [{}, {"chunk_bytes": 2500, "readahead_chunks": 2}]


@pytest.mark.parametrize("reader_options", READER_SHAPES)
def test_every_remote_read_returns_the_bytes_the_local_log_returns(
    tiered: LeaderPartition,
    manifest: ManifestStore,
    aws_settings: AwsSettings,
    bucket: str,
    reader_options: dict[str, int],
) -> None:
    log = tiered.log
    remote_end = log.segments[-2].next_offset
    cases = [
        (offset, max_bytes, min_one)
        for offset in range(0, remote_end, 7)
        for max_bytes in (0, 100, 1700, 5000, 1 << 20)
        for min_one in (True, False)
    ]
    expected = [log.read_bytes(o, m, min_one_batch=b) for o, m, b in cases]

    async def read_all(reader: RemoteLogReader) -> list[bytes]:
        return [await reader.read(tiered, o, m, min_one_batch=b) for o, m, b in cases]

    def work(reader: RemoteLogReader) -> Awaitable[list[bytes]]:
        apply_local_retention(log, remote_end - 1, LOCAL_RETENTION_ZERO, now_ms=2**62)
        assert log.log_start_offset == remote_end
        return read_all(reader)

    got = with_reader(tiered, manifest, aws_settings, work, **reader_options)
    mismatches = [(case, len(a), len(b)) for case, a, b in zip(cases, expected, got, strict=True) if a != b]
    assert mismatches == []
    assert any(expected)


@pytest.mark.parametrize("reader_options", READER_SHAPES)
def test_concurrent_sequential_consumers_each_read_every_offset_once_in_order(
    tiered: LeaderPartition,
    manifest: ManifestStore,
    aws_settings: AwsSettings,
    bucket: str,
    reader_options: dict[str, int],
) -> None:
    log = tiered.log
    remote_end = log.segments[-2].next_offset

    async def consume(reader: RemoteLogReader, start: int, max_bytes: int) -> list[int]:
        offsets: list[int] = []
        offset = start
        while offset < remote_end:
            data = await reader.read(tiered, offset, max_bytes, min_one_batch=True)
            for _, header in iter_headers(data, check_crc=True):
                offsets.extend(range(max(offset, header.base_offset), header.next_offset))
            offset = offsets[-1] + 1
            await asyncio.sleep(0)
        return offsets

    async def two_consumers(reader: RemoteLogReader) -> tuple[list[int], list[int], int]:
        apply_local_retention(log, remote_end - 1, LOCAL_RETENTION_ZERO, now_ms=2**62)
        first, second = await asyncio.gather(consume(reader, 0, 3000), consume(reader, 13, 7000))
        return first, second, reader.stats.window_hits

    first, second, window_hits = with_reader(tiered, manifest, aws_settings, two_consumers, **reader_options)
    assert first == list(range(remote_end))
    assert second == list(range(13, remote_end))
    assert window_hits > 0


def test_an_offset_below_the_remote_log_start_is_out_of_range(
    tiered: LeaderPartition, manifest: ManifestStore, aws_settings: AwsSettings, bucket: str
) -> None:
    async def work(reader: RemoteLogReader) -> int:
        rows = await reader.remote_segments(tiered)
        apply_local_retention(tiered.log, rows[-1].end_offset, LOCAL_RETENTION_ZERO, now_ms=2**62)
        await PartitionUploader(tiered, manifest, reader.objects, on_change=reader.invalidate).expire(
            rows[:1]
        )
        with pytest.raises(OffsetOutOfRangeError) as raised:
            await reader.read(tiered, 0, 1000, min_one_batch=True)
        return raised.value.log_start_offset

    second_base = tiered.log.segments[1].base_offset
    assert with_reader(tiered, manifest, aws_settings, work) == second_base


def test_list_offsets_find_the_remote_log_start_and_remote_timestamps(
    tiered: LeaderPartition, manifest: ManifestStore, aws_settings: AwsSettings, bucket: str
) -> None:
    log = tiered.log
    remote_end = log.segments[-2].next_offset
    # Record at offset o has timestamp BASE + 10 * o (fill's rule), so a timestamp between two
    # records names the later one.
    probes = [0, 3, 17, remote_end // 2, remote_end - 1]
    expected = {o: log.offset_for_timestamp(BASE_TIMESTAMP_MS + 10 * o - 5) for o in probes}

    async def work(reader: RemoteLogReader) -> tuple[tuple[int, int, int] | None, dict[int, object], object]:
        apply_local_retention(log, remote_end - 1, LOCAL_RETENTION_ZERO, now_ms=2**62)
        earliest = await reader.list_offset(tiered, -2)
        found = {o: await reader.list_offset(tiered, BASE_TIMESTAMP_MS + 10 * o - 5) for o in probes}
        beyond = await reader.list_offset(tiered, BASE_TIMESTAMP_MS + 10 * remote_end + 5)
        return earliest, found, beyond

    earliest, found, beyond = with_reader(tiered, manifest, aws_settings, work)
    assert earliest == (0, -1, 0)
    assert found == {o: (expected[o][0], expected[o][1], 0) for o in probes}
    assert all(expected[o][0] == o for o in probes)
    assert beyond is None


@pytest.mark.faults  # uploads and reads against moto, a few seconds: in `make faults`
def test_the_log_start_delete_records_set_bounds_remote_reads_and_list_offsets(
    tiered: LeaderPartition, manifest: ManifestStore, aws_settings: AwsSettings, bucket: str
) -> None:
    log = tiered.log
    remote_end = log.segments[-2].next_offset
    log_start = log.segments[1].base_offset + 3
    expected_first = log.read_bytes(log_start, 1 << 20)

    async def work(reader: RemoteLogReader) -> dict[str, object]:
        apply_local_retention(log, remote_end - 1, LOCAL_RETENTION_ZERO, now_ms=2**62)
        before = await reader.log_start_offset(tiered)
        moved = await reader.advance_log_start(tiered, log_start)
        lower = await reader.advance_log_start(tiered, 1)
        with pytest.raises(OffsetOutOfRangeError) as raised:
            await reader.read(tiered, 0, 1 << 20, min_one_batch=True)
        return {
            "before": before,
            "moved": (moved, lower),
            "out of range": raised.value.log_start_offset,
            "at start": await reader.read(tiered, log_start, 1 << 20, min_one_batch=True),
            "log start": await reader.log_start_offset(tiered),
            "earliest": await reader.list_offset(tiered, -2),
            # offset 0's timestamp: the first record at or after it that is still readable is the log start.
            "by time": await reader.list_offset(tiered, BASE_TIMESTAMP_MS),
        }

    got = with_reader(tiered, manifest, aws_settings, work)
    assert got["before"] == 0
    assert got["moved"] == (log_start, log_start)
    assert got["out of range"] == log_start
    assert got["at start"] == expected_first
    assert got["log start"] == log_start
    assert got["earliest"] == (log_start, -1, 0)
    assert got["by time"] == (log_start, BASE_TIMESTAMP_MS + 10 * log_start, 0)
