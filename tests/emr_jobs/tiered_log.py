"""Test support: real partition logs written by Floe's log engine, tiered into moto by hand.

The segments are written by ``broker_core.log.PartitionLog`` (real .log/.index/.timeindex files) and
put into S3 and the manifest exactly as the tiering uploader does: a COPY_STARTED row, the .log
object and the indexes object under the row's keys, then COPY_FINISHED. This lets the reader be
tested without broker processes; ``test_spark_matches_consumer`` covers the path through a broker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import boto3

from broker_core.aws import AwsSettings
from broker_core.log.config import LogConfig
from broker_core.log.partition_log import PartitionLog
from broker_core.metadata.state import TopicDescription
from broker_core.metadata.store import MetadataStore
from broker_core.records import Compression, SimpleRecord, TimestampType, build_batch, iter_batches
from tiered_storage.indexes import encode_indexes
from tiered_storage.layout import new_segment_id
from tiered_storage.manifest import ManifestStore, RemoteSegment

CODECS = tuple(Compression)
BASE_TIMESTAMP_MS = 1_700_000_000_000


def prepare_cluster(settings: AwsSettings) -> None:
    """Tables, bucket and one registered broker, so topics can be created."""
    store = MetadataStore(settings)
    store.ensure_tables()
    ManifestStore(settings).ensure_table()
    boto3.client("s3", **settings.boto3_kwargs()).create_bucket(Bucket=settings.bucket)
    store.register_broker(1, "127.0.0.1", 9092)


def create_topic(settings: AwsSettings, topic: str, partitions: int) -> TopicDescription:
    return MetadataStore(settings).create_topic(topic, partitions, 1)


def record_batches(
    count: int,
    records_per_batch: int,
    *,
    partition: int = 0,
    with_headers: bool = True,
    timestamp_of: Callable[[int], int] = lambda index: BASE_TIMESTAMP_MS + index,
) -> list[bytes]:
    """Batches cycling through every codec; every tenth batch is LogAppendTime. Keys and values include
    nulls and empty values; headers include a null value and a non-ASCII key."""
    batches = []
    index = 0
    for number in range(count):
        records = []
        for _ in range(records_per_batch):
            key = None if index % 5 == 0 else f"key-{partition}-{index}".encode()
            value = None if index % 13 == 0 else (b"" if index % 17 == 0 else f"value-{index}-".encode() * (index % 7 + 1))
            headers = [("trace", f"t{index}".encode()), ("ключ", None)] if with_headers and index % 3 else []
            records.append(SimpleRecord(key=key, value=value, headers=headers, timestamp=timestamp_of(index)))
            index += 1
        log_append = number % 10 == 9
        batches.append(
            build_batch(
                records,
                compression=CODECS[number % len(CODECS)],
                timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
                log_append_time=BASE_TIMESTAMP_MS + 10 * index if log_append else None,
            )
        )
    return batches


def write_log(directory: Path, batches: Iterable[bytes], *, segment_bytes: int, index_interval_bytes: int = 512) -> PartitionLog:
    """A partition log holding ``batches`` (offsets assigned from 0), its last segment sealed by a roll.

    The log's clock is set just after the records' timestamps, so only size rolls segments.
    """
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
    log = PartitionLog.open(directory, config, topic="t", partition=0)
    now_ms = BASE_TIMESTAMP_MS + 3_600_000
    for batch in batches:
        log.append(batch, leader_epoch=0, now_ms=now_ms)
    log.roll(now_ms)
    return log


# The epoch a test writes its manifest rows at when a live broker leads the partition (see tier_segments).
BESIDE_THE_LEADER_EPOCH = 1000


def tier_segments(settings: AwsSettings, log: PartitionLog, topic: TopicDescription, partition: int, *,
                  leader_epoch: int = 0) -> list[RemoteSegment]:
    """Upload every sealed segment of ``log`` and commit its manifest row, as the uploader does.

    ``leader_epoch`` is the epoch the rows are written at. Where a live broker leads the partition, its
    own uploader cleans up COPY_STARTED rows of its epoch or lower when it starts (they look like a
    crashed upload's), so a test uploading beside it writes at a higher epoch, as a newer leader would."""
    s3 = boto3.client("s3", **settings.boto3_kwargs())
    manifest = ManifestStore(settings)
    committed = []
    for segment in log.segments[:-1]:
        data = segment.log_path.read_bytes()
        indexes = encode_indexes(
            segment.base_offset,
            segment.offset_index.path.read_bytes(),
            segment.time_index.path.read_bytes(),
            [(0, segment.base_offset)],
            aborted_transactions=log.aborted_transactions(segment.base_offset, segment.next_offset),
        )
        row = manifest.start_copy(
            topic=topic.name,
            topic_id=topic.topic_id,
            partition=partition,
            segment_id=new_segment_id(),
            base_offset=segment.base_offset,
            end_offset=segment.next_offset - 1,
            max_timestamp_ms=segment.max_timestamp,
            size_bytes=len(data),
            leader_epoch=leader_epoch,
            epoch_entries=[(0, segment.base_offset)],
        )
        s3.put_object(Bucket=settings.bucket, Key=row.log_key, Body=data)
        s3.put_object(Bucket=settings.bucket, Key=row.indexes_key, Body=indexes)
        committed.append(manifest.finish_copy(row))
    return committed


def expected_rows(log: PartitionLog) -> list[tuple]:
    """(offset, key, value, timestamp ms, timestamp type, headers) of every record of the log's sealed
    segments, as the reference codec decodes them (control batches skipped, as a consumer does)."""
    rows = []
    for segment in log.segments[:-1]:
        for batch in iter_batches(segment.log_path.read_bytes()):
            if batch.header.is_control:
                continue
            timestamp_type = int(batch.header.timestamp_type)
            rows += [(r.offset, r.key, r.value, r.timestamp, timestamp_type, r.headers) for r in batch.records]
    return rows
