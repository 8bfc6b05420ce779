"""The per-partition uploader against moto: what gets tiered, exactly once, and what survives failures."""

from __future__ import annotations

import asyncio
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from broker_core.aws import AwsSettings
from broker_core.retry import RetryPolicy
from tests.tiered_storage.conftest import LeaderPartition, fill
from tiered_storage.indexes import decode_indexes
from tiered_storage.layout import new_segment_id
from tiered_storage.manifest import ManifestStore, SegmentState
from tiered_storage.object_store import ObjectStoreError, SegmentObjectStore, UploadTuning
from tiered_storage.retention import TieredRetention, apply_local_retention
from tiered_storage.uploader import PartitionUploader

FAST_RETRIES = RetryPolicy(attempts=4, base_s=0.001, cap_s=0.01)


async def run_uploader(
    partition: LeaderPartition, manifest: ManifestStore, settings: AwsSettings, **store_options: Any
) -> PartitionUploader:
    async with SegmentObjectStore(settings, retry=FAST_RETRIES, **store_options) as objects:
        uploader = PartitionUploader(partition, manifest, objects)
        await uploader.run_once()
        return uploader


def s3_bytes(settings: AwsSettings, key: str) -> bytes:
    return (
        boto3.client("s3", **settings.boto3_kwargs())
        .get_object(Bucket=settings.bucket, Key=key)["Body"]
        .read()
    )


def s3_keys(settings: AwsSettings) -> set[str]:
    listing = boto3.client("s3", **settings.boto3_kwargs()).list_objects_v2(Bucket=settings.bucket)
    return {obj["Key"] for obj in listing.get("Contents", [])}


def local_file_bytes(partition: LeaderPartition, base_offset: int) -> bytes:
    segment = next(s for s in partition.log.segments if s.base_offset == base_offset)
    return segment.log_path.read_bytes()


def test_sealed_segments_below_the_high_watermark_are_tiered_with_their_bytes_and_indexes(
    leader: LeaderPartition, manifest: ManifestStore, aws_settings: AwsSettings, bucket: str
) -> None:
    fill(leader.log, 60)
    leader.high_watermark = leader.log.log_end_offset
    sealed = leader.log.segments[:-1]
    assert len(sealed) >= 3

    asyncio.run(run_uploader(leader, manifest, aws_settings))

    rows = manifest.list_segments(leader.topic_id, 0)
    assert [(r.base_offset, r.end_offset) for r in rows] == [
        (s.base_offset, s.next_offset - 1) for s in sealed
    ]
    for row, segment in zip(rows, sealed, strict=True):
        assert s3_bytes(aws_settings, row.log_key) == local_file_bytes(leader, segment.base_offset)
        assert row.size_bytes == segment.size
        assert row.max_timestamp_ms == segment.max_timestamp
        assert row.epoch_entries == ((0, segment.base_offset),)
        indexes = decode_indexes(s3_bytes(aws_settings, row.indexes_key))
        assert indexes.offsets == tuple(
            segment.offset_index.entry(n)[0] for n in range(len(segment.offset_index))
        )
        assert indexes.timestamps[-1] == segment.max_timestamp
    assert manifest.partition_head(leader.topic_id, 0).end_offset == sealed[-1].next_offset - 1


def test_a_segment_reaching_the_high_watermark_waits(
    leader: LeaderPartition, manifest: ManifestStore, aws_settings: AwsSettings, bucket: str
) -> None:
    fill(leader.log, 60)
    second = leader.log.segments[1]
    leader.high_watermark = second.next_offset - 1
    asyncio.run(run_uploader(leader, manifest, aws_settings))
    assert [r.base_offset for r in manifest.list_segments(leader.topic_id, 0)] == [0]


def test_a_segment_holding_an_open_transaction_waits_until_the_transaction_ends(
    leader: LeaderPartition, manifest: ManifestStore, aws_settings: AwsSettings, bucket: str
) -> None:
    fill(leader.log, 60)
    leader.high_watermark = leader.log.log_end_offset
    second = leader.log.segments[1]
    leader.open_transaction_at = second.base_offset + 1
    asyncio.run(run_uploader(leader, manifest, aws_settings))
    assert [r.base_offset for r in manifest.list_segments(leader.topic_id, 0)] == [0]
    leader.open_transaction_at = None
    asyncio.run(run_uploader(leader, manifest, aws_settings))
    assert [r.base_offset for r in manifest.list_segments(leader.topic_id, 0)] == [
        s.base_offset for s in leader.log.segments[:-1]]


def test_running_again_or_after_a_restart_uploads_nothing_twice(
    leader: LeaderPartition, manifest: ManifestStore, aws_settings: AwsSettings, bucket: str
) -> None:
    fill(leader.log, 40)
    leader.high_watermark = leader.log.log_end_offset
    asyncio.run(run_uploader(leader, manifest, aws_settings))
    first_rows = manifest.list_segments(leader.topic_id, 0)
    fill(leader.log, 30)
    leader.high_watermark = leader.log.log_end_offset

    async def twice() -> None:
        async with SegmentObjectStore(aws_settings, retry=FAST_RETRIES) as objects:
            restarted = PartitionUploader(leader, manifest, objects)
            await restarted.run_once()
            await restarted.run_once()

    asyncio.run(twice())
    rows = manifest.list_segments(leader.topic_id, 0, list(SegmentState))
    assert rows[: len(first_rows)] == first_rows
    assert all(r.state is SegmentState.COPY_FINISHED for r in rows)
    ends = [r.end_offset for r in rows]
    assert [r.base_offset for r in rows[1:]] == [end + 1 for end in ends[:-1]]
    assert len(s3_keys(aws_settings)) == 2 * len(rows)


def test_a_copy_left_unfinished_by_a_crash_is_cleaned_and_uploaded_again_once(
    leader: LeaderPartition, manifest: ManifestStore, aws_settings: AwsSettings, bucket: str
) -> None:
    fill(leader.log, 30)
    leader.high_watermark = leader.log.log_end_offset
    first = leader.log.segments[0]
    crashed = manifest.start_copy(
        topic=leader.topic,
        topic_id=leader.topic_id,
        partition=0,
        segment_id=new_segment_id(),
        base_offset=0,
        end_offset=first.next_offset - 1,
        max_timestamp_ms=first.max_timestamp,
        size_bytes=first.size,
        leader_epoch=0,
        epoch_entries=[(0, 0)],
    )
    s3 = boto3.client("s3", **aws_settings.boto3_kwargs())
    s3.put_object(Bucket=bucket, Key=crashed.log_key, Body=local_file_bytes(leader, 0))

    asyncio.run(run_uploader(leader, manifest, aws_settings))

    rows = manifest.list_segments(leader.topic_id, 0, list(SegmentState))
    crashed_now = next(r for r in rows if r.segment_id == crashed.segment_id)
    assert crashed_now.state is SegmentState.DELETE_FINISHED
    assert crashed.log_key not in s3_keys(aws_settings)
    finished = [r for r in rows if r.state is SegmentState.COPY_FINISHED]
    assert [r.base_offset for r in finished].count(0) == 1


def test_a_failed_upload_is_fenced_and_deletes_no_local_data(
    leader: LeaderPartition, manifest: ManifestStore, aws_settings: AwsSettings
) -> None:
    fill(leader.log, 40)
    leader.high_watermark = leader.log.log_end_offset
    segments_before = [s.base_offset for s in leader.log.segments]
    # No bucket was created: every PutObject fails with NoSuchBucket.
    with pytest.raises(ObjectStoreError):
        asyncio.run(run_uploader(leader, manifest, aws_settings))
    uploader_end = manifest.partition_head(leader.topic_id, 0)
    assert uploader_end is None
    # Fenced: no upload of this run can commit any more; their deletion waits for S3 to answer.
    states = {r.state for r in manifest.list_segments(leader.topic_id, 0, list(SegmentState))}
    assert states == {SegmentState.DELETE_STARTED}
    everything_old = TieredRetention(
        retention_ms=-1, retention_bytes=-1, local_retention_ms=0, local_retention_bytes=0
    )
    apply_local_retention(leader.log, -1, everything_old, now_ms=2**62)
    assert [s.base_offset for s in leader.log.segments] == segments_before
    assert leader.log.log_start_offset == 0


class ThrottlingClient:
    """Answers the first ``failures`` S3 calls with SlowDown, then passes calls to the real client."""

    def __init__(self, client: Any, failures: int) -> None:
        self._client = client
        self.failures_left = failures

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._client, name)

        async def call(**kwargs: Any) -> Any:
            if self.failures_left > 0:
                self.failures_left -= 1
                raise ClientError(
                    {"Error": {"Code": "SlowDown", "Message": "Reduce your request rate"}}, name
                )
            return await real(**kwargs)

        return call


def test_throttled_s3_requests_are_retried_until_the_segment_is_tiered(
    leader: LeaderPartition, manifest: ManifestStore, aws_settings: AwsSettings, bucket: str
) -> None:
    fill(leader.log, 30)
    leader.high_watermark = leader.log.log_end_offset

    async def upload_through_throttling() -> int:
        async with SegmentObjectStore(aws_settings) as real:
            throttling = ThrottlingClient(real.client, failures=3)
            objects = SegmentObjectStore(aws_settings, retry=FAST_RETRIES, client=throttling)
            await PartitionUploader(leader, manifest, objects).run_once()
            return throttling.failures_left

    assert asyncio.run(upload_through_throttling()) == 0
    rows = manifest.list_segments(leader.topic_id, 0)
    assert len(rows) == len(leader.log.segments) - 1
    assert s3_bytes(aws_settings, rows[0].log_key) == local_file_bytes(leader, 0)


def test_large_segments_go_up_in_parts_and_arrive_whole(
    leader: LeaderPartition, manifest: ManifestStore, aws_settings: AwsSettings, bucket: str, tmp_path: Any
) -> None:
    from broker_core.log.partition_log import PartitionLog
    from tests.tiered_storage.conftest import small_segments_config

    big = PartitionLog.open(
        tmp_path / "big-0", small_segments_config(segment_bytes=12 * 1024 * 1024), topic="big"
    )
    try:
        fill(big, 1300, records=10, value_size=1000)
        big.roll()
        partition = LeaderPartition("big", 0, leader.topic_id, big, high_watermark=big.log_end_offset)
        tuning = UploadTuning(multipart_threshold_bytes=6 * 1024 * 1024, part_bytes=5 * 1024 * 1024)
        asyncio.run(run_uploader(partition, manifest, aws_settings, tuning=tuning))
        rows = manifest.list_segments(leader.topic_id, 0)
        assert rows and rows[0].size_bytes > tuning.multipart_threshold_bytes
        for row in rows:
            segment = next(s for s in big.segments if s.base_offset == row.base_offset)
            assert s3_bytes(aws_settings, row.log_key) == segment.log_path.read_bytes()
    finally:
        big.close()


def test_after_a_leader_change_only_the_part_above_the_remote_end_is_uploaded(
    leader: LeaderPartition, manifest: ManifestStore, aws_settings: AwsSettings, bucket: str
) -> None:
    fill(leader.log, 40)
    leader.high_watermark = leader.log.log_end_offset
    first = leader.log.segments[0]
    # Another leader's segment ended in the middle of our first segment.
    cut = first.find_batch((first.base_offset + first.next_offset) // 2)[1].last_offset
    other = manifest.start_copy(
        topic=leader.topic,
        topic_id=leader.topic_id,
        partition=0,
        segment_id=new_segment_id(),
        base_offset=0,
        end_offset=cut,
        max_timestamp_ms=-1,
        size_bytes=1,
        leader_epoch=0,
        epoch_entries=[(0, 0)],
    )
    manifest.finish_copy(other)
    leader.leader_epoch = 1

    asyncio.run(run_uploader(leader, manifest, aws_settings))

    rows = manifest.list_segments(leader.topic_id, 0)
    assert rows[1].base_offset == cut + 1
    assert rows[1].end_offset == first.next_offset - 1
    sliced = s3_bytes(aws_settings, rows[1].log_key)
    position = first.find_batch(cut + 1)[0]
    assert sliced == local_file_bytes(leader, 0)[position:]
    indexes = decode_indexes(s3_bytes(aws_settings, rows[1].indexes_key))
    assert indexes.base_offset == cut + 1
    assert all(p < len(sliced) for p in indexes.positions)
    assert [r.base_offset for r in rows[2:]] == [s.base_offset for s in leader.log.segments[1:-1]]
