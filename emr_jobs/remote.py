"""S3 and DynamoDB access of the Spark reader: manifest rows, indexes objects and ranged reads of segments.

Nothing here lists S3. The segments of a partition come from the manifest (COPY_FINISHED rows, in
base-offset order, never overlapping); an object key is only ever taken from a manifest row, and a
segment's bytes are read with one ranged GET per input partition, streamed in chunks with the next
chunk already being fetched while the current one is decoded. The S3 client is made once per Python
process and shared (boto3 clients are thread-safe), since Spark reuses its Python workers across tasks.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from broker_core.aws import AwsSettings
from broker_core.metadata.store import MetadataStore
from broker_core.records.batch import decode_batch
from broker_core.records.errors import RecordsError, TruncatedBatchError
from broker_core.records.header import parse_header, verify_crc
from emr_jobs.errors import CorruptIndexesError, CorruptSegmentError, SegmentGoneError
from emr_jobs.options import LOCAL_STACK_CREDENTIALS, ReadOptions
from tiered_storage.indexes import CorruptIndexesObjectError, SegmentIndexes, decode_indexes
from tiered_storage.manifest import ManifestStore, RemoteLog, RemoteSegment

READ_CHUNK_BYTES = 8 * 1024 * 1024
TIMESTAMP_SCAN_CHUNK_BYTES = 256 * 1024
# Every batch and every indexes object read is checked against its own CRC-32C, so botocore's CRC
# of the response stream (on by default since botocore 1.36) would only check the same bytes twice.
_S3_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 8},
    max_pool_connections=16,
    response_checksum_validation="when_required",
)


def use_local_stack_credentials(options: ReadOptions) -> None:
    """A local stack's moto accepts any credentials; give botocore some when the environment has none.

    Only for the ``stack`` option: on EMR, credentials come from the job's execution role.
    """
    if options.local_stack and boto3.Session().get_credentials() is None:
        for name, value in LOCAL_STACK_CREDENTIALS.items():
            os.environ.setdefault(name, value)


@functools.lru_cache(maxsize=8)
def s3_client(settings: AwsSettings) -> Any:
    """The process's S3 client for ``settings``."""
    return boto3.session.Session().client("s3", config=_S3_CONFIG, **settings.boto3_kwargs())


@functools.lru_cache(maxsize=8)
def metadata_store(settings: AwsSettings) -> MetadataStore:
    """The process's MetadataStore for ``settings``: Spark reuses the planner's Python worker from scan
    to scan, and making the store's DynamoDB client costs about 70 ms of CPU."""
    return MetadataStore(settings)


@functools.lru_cache(maxsize=8)
def manifest_store(settings: AwsSettings) -> ManifestStore:
    """The process's ManifestStore for ``settings`` (see metadata_store)."""
    return ManifestStore(settings)


def topic_partitions(settings: AwsSettings, topic: str) -> tuple[str, int]:
    """(topic id, partition count) of ``topic``; raises broker_core's UnknownTopicError if it does not exist."""
    description = metadata_store(settings).get_topic(topic)
    return description.topic_id, description.num_partitions


def committed_segments(settings: AwsSettings, topic_id: str, partitions: Sequence[int]) -> dict[int, RemoteLog]:
    """Each partition's remote log: its COPY_FINISHED segments by increasing base offset and the log
    start DeleteRecords set (readers use `RemoteLog.readable` and start no earlier than it)."""
    manifest = manifest_store(settings)
    return {partition: manifest.remote_log(topic_id, partition) for partition in partitions}


def read_indexes(settings: AwsSettings, segment: RemoteSegment) -> SegmentIndexes:
    """The decoded indexes object of ``segment``, checked against its manifest row."""
    response = _get_object(settings, segment.indexes_key)
    try:
        indexes = decode_indexes(response["Body"].read())
    except CorruptIndexesObjectError as error:
        raise CorruptIndexesError(object_key=segment.indexes_key, reason=str(error)) from error
    if indexes.base_offset != segment.base_offset:
        raise CorruptIndexesError(
            object_key=segment.indexes_key,
            reason=f"base offset {indexes.base_offset} but the manifest says {segment.base_offset}",
        )
    if indexes.positions and indexes.positions[-1] >= segment.size_bytes:
        raise CorruptIndexesError(
            object_key=segment.indexes_key,
            reason=f"position {indexes.positions[-1]} is past the {segment.size_bytes}-byte segment",
        )
    return indexes


def _get_object(settings: AwsSettings, key: str, **kwargs: str) -> Any:
    try:
        return s3_client(settings).get_object(Bucket=settings.bucket, Key=key, **kwargs)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "NoSuchKey":
            raise SegmentGoneError(key) from error
        raise


def read_range(settings: AwsSettings, key: str, start: int, end: int, chunk_bytes: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
    """Bytes ``[start, end)`` of an object, from one ranged GET, in chunks of up to ``chunk_bytes``.

    The next chunk is read on a helper thread while the caller works on the current one (the socket
    read releases the GIL). Closing the iterator early closes the connection.
    """
    if end <= start:
        return
    response = _get_object(settings, key, Range=f"bytes={start}-{end - 1}")
    body = response["Body"]
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="floe-s3-read") as pool:
            pending = pool.submit(body.read, chunk_bytes)
            while True:
                chunk = pending.result()
                if not chunk:
                    return
                pending = pool.submit(body.read, chunk_bytes)
                yield chunk
    finally:
        body.close()


def find_offset_for_timestamp(
    settings: AwsSettings,
    segments: Sequence[RemoteSegment],
    timestamp_ms: int,
    *,
    load_indexes: Callable[[RemoteSegment], SegmentIndexes] | None = None,
    min_offset: int = 0,
) -> int | None:
    """The first offset at or above ``min_offset`` (the log start) whose record timestamp is >=
    ``timestamp_ms`` (Kafka's ListOffsets by time), or None.

    The first segment whose largest timestamp reaches ``timestamp_ms`` holds the answer (every record
    before it is older). Its time index narrows the search to the batches after the last indexed
    point still below the timestamp; those are read from there on, a chunk at a time, until a
    record reaches it. Control batches count, as in Kafka: a consumer starting at a marker's offset
    reads what follows it. ``load_indexes`` (default: read_indexes) lets a caller share fetched indexes.
    """
    for segment in segments:
        if segment.max_timestamp_ms < timestamp_ms or segment.end_offset < min_offset:
            continue
        indexes = read_indexes(settings, segment) if load_indexes is None else load_indexes(segment)
        lower_bound = max(indexes.offset_for_timestamp(timestamp_ms), min_offset)
        start = indexes.position_for_offset(lower_bound)
        found = _scan_for_timestamp(settings, segment, start, lower_bound, timestamp_ms)
        if found is not None:
            return found
    return None


def _scan_for_timestamp(
    settings: AwsSettings, segment: RemoteSegment, start: int, lower_bound: int, timestamp_ms: int
) -> int | None:
    pending = b""
    pending_position = start
    chunks = read_range(settings, segment.log_key, start, segment.size_bytes, TIMESTAMP_SCAN_CHUNK_BYTES)
    try:
        for chunk in chunks:
            buffer = pending + chunk
            cursor = 0
            while True:
                try:
                    header = parse_header(buffer, cursor)
                    if header.last_offset >= lower_bound and header.max_timestamp >= timestamp_ms:
                        verify_crc(buffer, header, cursor)
                        for record in decode_batch(buffer, cursor, verify_crc=False).records:
                            if record.offset >= lower_bound and record.timestamp >= timestamp_ms:
                                return record.offset
                except TruncatedBatchError:
                    break
                except RecordsError as error:
                    reason = str(error).removesuffix(f" (at byte {error.position})")
                    raise CorruptSegmentError(
                        object_key=segment.log_key, position=pending_position + error.position, reason=reason
                    ) from error
                cursor += header.size
            pending = buffer[cursor:]
            pending_position += cursor
    finally:
        chunks.close()
    return None
