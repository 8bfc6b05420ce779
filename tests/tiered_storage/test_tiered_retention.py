"""Retention of tiered partitions: local deletion waits for S3, remote deletion follows retention.*."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.aws import AwsSettings
from broker_core.server.config import BrokerConfig
from tests.tiered_storage.conftest import BASE_TIMESTAMP_MS, LeaderPartition, fill
from tiered_storage.manifest import RemoteSegment, SegmentState
from tiered_storage.retention import (
    TieredRetention,
    apply_local_retention,
    local_deletion_point,
    remote_segments_to_delete,
)

NOW_MS = BASE_TIMESTAMP_MS + 10_000_000


def limits(**values: int) -> TieredRetention:
    settings = {
        "retention_ms": -1,
        "retention_bytes": -1,
        "local_retention_ms": -1,
        "local_retention_bytes": -1,
    }
    settings.update(values)
    return TieredRetention(**settings)


def remote_segment(base: int, end: int, size: int, max_timestamp_ms: int) -> RemoteSegment:
    return RemoteSegment(
        topic="events",
        topic_id="id",
        partition=0,
        segment_id=f"s{base}",
        base_offset=base,
        end_offset=end,
        max_timestamp_ms=max_timestamp_ms,
        size_bytes=size,
        leader_epoch=0,
        epoch_entries=((0, base),),
        state=SegmentState.COPY_FINISHED,
        log_key=f"{base}.log",
        indexes_key=f"{base}.indexes",
        created_at_ms=max_timestamp_ms,
        updated_at_ms=max_timestamp_ms,
    )


def test_local_segments_go_only_up_to_the_remote_end(leader: LeaderPartition) -> None:
    fill(leader.log, 40)
    segments = leader.log.segments
    remote_end = segments[1].next_offset - 1
    new_start = apply_local_retention(leader.log, remote_end, limits(local_retention_ms=0), NOW_MS)
    assert new_start == segments[2].base_offset
    assert leader.log.segments[0].base_offset == segments[2].base_offset


def test_nothing_local_goes_while_nothing_is_in_s3(leader: LeaderPartition) -> None:
    fill(leader.log, 40)
    assert (
        local_deletion_point(leader.log, -1, limits(local_retention_ms=0, local_retention_bytes=0), NOW_MS)
        is None
    )


def test_local_retention_bytes_keeps_the_newest_segments_within_the_limit(leader: LeaderPartition) -> None:
    fill(leader.log, 40)
    segments = leader.log.segments
    keep = segments[-2].size + segments[-1].size
    everything_remote = segments[-1].base_offset - 1
    apply_local_retention(leader.log, everything_remote, limits(local_retention_bytes=keep), NOW_MS)
    assert [s.base_offset for s in leader.log.segments] == [s.base_offset for s in segments[-2:]]


def test_local_retention_ms_spares_recent_segments(leader: LeaderPartition) -> None:
    fill(leader.log, 40)
    segments = leader.log.segments
    now = segments[1].largest_timestamp + 500
    point = local_deletion_point(leader.log, leader.log.log_end_offset, limits(local_retention_ms=500), now)
    assert point == segments[1].base_offset
    assert (
        local_deletion_point(leader.log, leader.log.log_end_offset, limits(local_retention_ms=10_000), now)
        is None
    )


def test_remote_segments_expire_oldest_first_by_time() -> None:
    remote = [remote_segment(i * 100, i * 100 + 99, 1000, BASE_TIMESTAMP_MS + i * 1000) for i in range(5)]
    condemned = remote_segments_to_delete(remote, 0, limits(retention_ms=2500), BASE_TIMESTAMP_MS + 4000)
    assert [s.base_offset for s in condemned] == [0, 100]


def test_remote_retention_bytes_counts_the_local_data_not_yet_in_s3() -> None:
    remote = [remote_segment(i * 100, i * 100 + 99, 1000, NOW_MS) for i in range(5)]
    assert remote_segments_to_delete(remote, 0, limits(retention_bytes=3000), NOW_MS) == remote[:2]
    condemned = remote_segments_to_delete(remote, 1500, limits(retention_bytes=3000), NOW_MS)
    assert [s.base_offset for s in condemned] == [0, 100, 200]


def test_remote_segments_wholly_below_the_log_start_go_whatever_the_limits() -> None:
    remote = [remote_segment(i * 100, i * 100 + 99, 1000, NOW_MS) for i in range(4)]
    # DeleteRecords to 250: [0, 99] and [100, 199] go; [200, 299] still holds 250 and stays.
    assert remote_segments_to_delete(remote, 0, limits(), NOW_MS, log_start_offset=250) == remote[:2]
    assert remote_segments_to_delete(remote, 0, limits(), NOW_MS, log_start_offset=200) == remote[:2]
    assert remote_segments_to_delete(remote, 0, limits(), NOW_MS) == []


def test_retention_bytes_counts_only_what_the_log_start_leaves() -> None:
    remote = [remote_segment(i * 100, i * 100 + 99, 1000, NOW_MS) for i in range(5)]
    # 3000 bytes remain above the log start: exactly retention.bytes, so nothing more goes.
    condemned = remote_segments_to_delete(remote, 0, limits(retention_bytes=3000), NOW_MS, log_start_offset=200)
    assert [s.base_offset for s in condemned] == [0, 100]


@pytest.mark.parametrize(
    ("topic_configs", "broker_overrides", "expected"),
    [
        ({}, {}, TieredRetention(604800000, -1, 604800000, -1)),
        ({"retention.ms": "9000", "local.retention.ms": "-2"}, {}, TieredRetention(9000, -1, 9000, -1)),
        (
            {"local.retention.bytes": "100"},
            {"log.local.retention.ms": "5"},
            TieredRetention(604800000, -1, 5, 100),
        ),
    ],
)
def test_limits_resolve_like_kafka(
    topic_configs: dict[str, str], broker_overrides: dict[str, str], expected: TieredRetention, tmp_path: Path
) -> None:
    broker = BrokerConfig(
        broker_id=1,
        host="127.0.0.1",
        port=0,
        data_dir=tmp_path,
        aws=AwsSettings(None, "us-east-1", "bucket", "prefix-"),
        overrides=broker_overrides,
    )
    assert TieredRetention.resolve(topic_configs, broker) == expected
