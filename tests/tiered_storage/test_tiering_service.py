"""The tiering service's rounds over a broker's replicas (a stand-in broker; S3 and DynamoDB on moto)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest

from broker_core.aws import AwsSettings
from broker_core.log.partition_log import PartitionLog
from broker_core.metrics.broker import BrokerMetrics
from broker_core.metrics.scrape import parse
from broker_core.server.config import BrokerConfig
from tests.tiered_storage.conftest import LeaderPartition, fill, small_segments_config
from tiered_storage.manifest import ManifestStore, SegmentState
from tiered_storage.service import TieringService


@dataclass
class Topic:
    topic_id: str
    configs: dict[str, str]


@dataclass
class Image:
    topics: dict[str, Topic] = field(default_factory=dict)


@dataclass
class Replicas:
    partitions: dict[tuple[str, int], Any] = field(default_factory=dict)


@dataclass
class StandInBroker:
    config: BrokerConfig
    image: Image = field(default_factory=Image)
    replicas: Replicas = field(default_factory=Replicas)
    metrics: BrokerMetrics = field(default_factory=BrokerMetrics)


def stand_in_broker(settings: AwsSettings, tmp_path: Path) -> StandInBroker:
    config = BrokerConfig(
        broker_id=1,
        host="127.0.0.1",
        port=0,
        data_dir=tmp_path,
        aws=settings,
        overrides={"remote.log.manager.task.interval.ms": "3600000"},
    )
    return StandInBroker(config)


def host(
    broker: StandInBroker, tmp_path: Path, topic: str, configs: dict[str, str], *, leader: bool
) -> LeaderPartition:
    log = PartitionLog.open(tmp_path / f"{topic}-0", small_segments_config(), topic=topic, partition=0)
    fill(log, 40)
    topic_id = str(uuid.uuid4())
    broker.image.topics[topic] = Topic(topic_id, configs)
    partition = LeaderPartition(topic, 0, topic_id, log, high_watermark=log.log_end_offset, is_leader=leader)
    broker.replicas.partitions[(topic, 0)] = partition
    return partition


def one_round(broker: StandInBroker) -> None:
    async def run() -> None:
        service = TieringService(broker)  # type: ignore[arg-type]
        await service.start()
        try:
            await service.visit_and_wait()
        finally:
            await service.stop()

    asyncio.run(run())


def test_a_round_tiers_the_leaders_segments_then_deletes_them_locally(
    aws_settings: AwsSettings, bucket: str, tmp_path: Path
) -> None:
    broker = stand_in_broker(aws_settings, tmp_path)
    tiered = host(
        broker, tmp_path, "tiered", {"remote.storage.enable": "true", "local.retention.ms": "0"}, leader=True
    )
    plain = host(broker, tmp_path, "plain", {"local.retention.ms": "0"}, leader=True)
    sealed = [(s.base_offset, s.next_offset - 1) for s in tiered.log.segments[:-1]]
    plain_segments = len(plain.log.segments)

    one_round(broker)

    manifest = ManifestStore(aws_settings)
    assert [(r.base_offset, r.end_offset) for r in manifest.list_segments(tiered.topic_id, 0)] == sealed
    assert tiered.log.log_start_offset == sealed[-1][1] + 1
    assert len(tiered.log.segments) == 1
    assert manifest.list_segments(plain.topic_id, 0, list(SegmentState)) == []
    assert len(plain.log.segments) == plain_segments


def test_remote_retention_deletes_the_oldest_remote_segments_and_their_objects(
    aws_settings: AwsSettings, bucket: str, tmp_path: Path
) -> None:
    broker = stand_in_broker(aws_settings, tmp_path)
    configs = {"remote.storage.enable": "true", "local.retention.ms": "0"}
    tiered = host(broker, tmp_path, "tiered", configs, leader=True)
    one_round(broker)
    manifest = ManifestStore(aws_settings)
    rows = manifest.list_segments(tiered.topic_id, 0)
    # Keep about the two newest remote segments plus the local active segment.
    keep = rows[-1].size_bytes + rows[-2].size_bytes + tiered.log.size_bytes
    broker.image.topics["tiered"].configs = {**configs, "retention.bytes": str(keep)}

    one_round(broker)

    left = manifest.list_segments(tiered.topic_id, 0)
    assert left == rows[-2:]
    deleted = [r for r in manifest.list_segments(tiered.topic_id, 0, list(SegmentState)) if r not in left]
    assert {r.state for r in deleted} == {SegmentState.DELETE_FINISHED}
    listing = boto3.client("s3", **aws_settings.boto3_kwargs()).list_objects_v2(Bucket=bucket)
    keys = {obj["Key"] for obj in listing.get("Contents", [])}
    assert keys == {key for r in left for key in (r.log_key, r.indexes_key)}


@pytest.mark.faults  # two tiering rounds against moto, several seconds: in `make faults`, outside CI's 20-minute budget
def test_remote_segments_wholly_below_the_delete_records_log_start_go_from_s3_and_the_manifest(
    aws_settings: AwsSettings, bucket: str, tmp_path: Path
) -> None:
    broker = stand_in_broker(aws_settings, tmp_path)
    # Unlimited retention and local retention: only the log start can condemn anything.
    configs = {"remote.storage.enable": "true", "retention.ms": "-1", "local.retention.ms": "-1"}
    tiered = host(broker, tmp_path, "tiered", configs, leader=True)
    one_round(broker)
    manifest = ManifestStore(aws_settings)
    rows = manifest.list_segments(tiered.topic_id, 0)
    assert len(rows) >= 3 and tiered.log.log_start_offset == 0
    log_start = rows[2].base_offset + 3  # inside the third segment: it stays
    manifest.advance_log_start(tiered.topic_id, 0, log_start)

    one_round(broker)

    left = manifest.list_segments(tiered.topic_id, 0)
    assert left == rows[2:]
    gone = [r for r in manifest.list_segments(tiered.topic_id, 0, list(SegmentState)) if r not in left]
    assert {r.state for r in gone} == {SegmentState.DELETE_FINISHED} and len(gone) == 2
    listing = boto3.client("s3", **aws_settings.boto3_kwargs()).list_objects_v2(Bucket=bucket)
    keys = {obj["Key"] for obj in listing.get("Contents", [])}
    assert keys == {key for r in left for key in (r.log_key, r.indexes_key)}
    # The local log follows the manifest's log start too (a replica that missed the DeleteRecords).
    assert tiered.log.log_start_offset == log_start


def test_a_follower_deletes_locally_only_what_the_leader_tiered(
    aws_settings: AwsSettings, bucket: str, tmp_path: Path
) -> None:
    broker = stand_in_broker(aws_settings, tmp_path)
    configs = {"remote.storage.enable": "true", "local.retention.ms": "0"}
    follower = host(broker, tmp_path, "tiered", configs, leader=False)
    manifest = ManifestStore(aws_settings)
    manifest.ensure_table()
    first, second = follower.log.segments[:2]
    for segment in (first, second):
        row = manifest.start_copy(
            topic="tiered",
            topic_id=follower.topic_id,
            partition=0,
            segment_id=str(uuid.uuid4()),
            base_offset=segment.base_offset,
            end_offset=segment.next_offset - 1,
            max_timestamp_ms=segment.max_timestamp,
            size_bytes=segment.size,
            leader_epoch=0,
            epoch_entries=[(0, segment.base_offset)],
        )
        manifest.finish_copy(row)

    one_round(broker)

    assert follower.log.log_start_offset == second.next_offset
    assert len(manifest.list_segments(follower.topic_id, 0, list(SegmentState))) == 2


def test_tiering_lag_falls_to_zero_once_a_round_copied_the_sealed_segments_and_s3_calls_are_timed(
    aws_settings: AwsSettings, bucket: str, tmp_path: Path
) -> None:
    broker = stand_in_broker(aws_settings, tmp_path)
    tiered = host(broker, tmp_path, "tiered", {"remote.storage.enable": "true"}, leader=True)
    sealed = tiered.log.segments[:-1]
    sealed_bytes = sum(segment.size for segment in sealed)

    async def run() -> tuple[list, list]:
        service = TieringService(broker)  # type: ignore[arg-type]
        before = service.lag_bytes()
        await service.start()
        try:
            await service.visit_and_wait()
        finally:
            await service.stop()
        return before, service.lag_bytes()

    before, after = asyncio.run(run())
    assert before == [(("tiered", 0), sealed_bytes)]
    assert after == [(("tiered", 0), 0)]
    scraped = parse("test", broker.metrics.exposition().decode())
    assert scraped.value("floe_tiering_lag_bytes", topic="tiered", partition="0") == 0
    assert scraped.total("floe_s3_request_seconds_count") >= len(sealed)  # a segment and its indexes each
    assert scraped.total("floe_s3_errors_total") == 0
