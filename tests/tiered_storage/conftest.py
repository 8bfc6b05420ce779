"""Fixtures for tiered-storage tests: a bucket and manifest on the session's moto server, and a leader
partition whose log is written by Floe's own PartitionLog."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from broker_core.aws import AwsSettings
from broker_core.log.config import LogConfig
from broker_core.log.partition_log import PartitionLog
from tests.support.batches import make_batch
from tiered_storage.manifest import ManifestStore

# Recent enough that segment.ms (7 days, counted from a segment's first timestamp) never rolls a segment.
BASE_TIMESTAMP_MS = time.time_ns() // 1_000_000 - 3_600_000


@dataclass
class LeaderPartition:
    """The fields of a hosted replica the uploader and the remote reader use."""

    topic: str
    index: int
    topic_id: str
    log: PartitionLog
    leader_epoch: int = 0
    high_watermark: int = 0
    is_leader: bool = True
    # First offset of a transaction a test leaves open on the partition, None when none is.
    open_transaction_at: int | None = None

    @property
    def last_stable_offset(self) -> int:
        if self.open_transaction_at is None:
            return self.high_watermark
        return min(self.high_watermark, self.open_transaction_at)


@pytest.fixture
def bucket(aws_settings: AwsSettings) -> str:
    boto3.client("s3", **aws_settings.boto3_kwargs()).create_bucket(Bucket=aws_settings.bucket)
    return aws_settings.bucket


@pytest.fixture
def manifest(aws_settings: AwsSettings) -> ManifestStore:
    store = ManifestStore(aws_settings)
    store.ensure_table()
    return store


def small_segments_config(**changes: int) -> LogConfig:
    settings = {"segment_bytes": 16 * 1024, "index_interval_bytes": 1024, "file_delete_delay_ms": 0}
    settings.update(changes)
    return LogConfig(**settings)


def fill(
    log: PartitionLog, batches: int, *, records: int = 5, value_size: int = 300, leader_epoch: int = 0
) -> None:
    """Append ``batches`` batches; the record at offset o has timestamp BASE_TIMESTAMP_MS + 10 * o."""
    for _ in range(batches):
        timestamp = BASE_TIMESTAMP_MS + 10 * log.log_end_offset
        log.append(
            make_batch(records, value_size, timestamp, timestamp_step_ms=10, value_seed=log.log_end_offset),
            leader_epoch=leader_epoch,
        )


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[LeaderPartition]:
    log = PartitionLog.open(tmp_path / "events-0", small_segments_config(), topic="events", partition=0)
    partition = LeaderPartition("events", 0, str(uuid.uuid4()), log)
    try:
        yield partition
    finally:
        log.close()
