"""Fetch over HTTP: ``GET /v1/topics/{topic}/partitions/{p}/records`` reads records from an offset.

The start is ``offset``, else the first offset at or after ``timestamp`` (ListOffsets), else the
partition's earliest offset. For a topic with ``remote.storage.enable=true`` the partition's
manifest (DynamoDB) is consulted first: an offset inside a segment already copied to S3 is read
straight from S3, the segment's indexes object giving the byte position and one ranged GET the
batches, with no broker involved (so history stays readable while brokers are down, and old reads
never compete with producers for broker disks). Any other offset is fetched from the partition's
leader. Either way the answer holds whole batches' records from the start offset on, at most about
``max_bytes`` of batches (at least one batch), cut further so the JSON stays under Lambda's 6 MB
response limit, plus ``next_offset`` for the next call.

An offset below the partition's log start is answered 416 (as the broker answers
OFFSET_OUT_OF_RANGE) even while S3 still holds it: DeleteRecords records the log start in the
manifest's head item, and an S3 read checks it afresh (one consistent GetItem) before it returns
records, so records deleted a moment ago are never served from a cached segment list.

``isolation`` is read_committed by default: the broker is asked for a read_committed Fetch (up to
the LSO, aborted transactions named and left out), and S3 reads leave out aborted transactions using
the transaction section of the segment's indexes object (every aborted transaction overlapping the
segment; only segments below the LSO are tiered, so every transaction in one has ended).
"""

from __future__ import annotations

import bisect
import json
from http import HTTPStatus
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import BotoCoreError
from botocore.exceptions import ClientError as BotoClientError

from broker_core.client import EARLIEST, LATEST, ClientError, FloeClient, KafkaError
from broker_core.metadata.errors import MetadataUnavailableError, UnknownTopicError
from broker_core.metadata.state import TopicDescription
from broker_core.records import Record, decode_batch, parse_header
from broker_core.records.batch import DecodedBatch
from broker_core.records.errors import RecordsError, TruncatedBatchError
from broker_core.records.header import HEADER_SIZE
from broker_core.records.isolation import committed_batches
from broker_core.security.acls import AclOperation, ResourceType
from functions import runtime
from functions.errors import ApiError, api_error_for, hidden, responses
from functions.models import (
    INT32_MAX,
    INT64_MAX,
    MAX_TIMESTAMP_MS,
    TOPIC_NAME_PATTERN,
    DataType,
    FetchedData,
    FetchedHeader,
    FetchedRecord,
    FetchResponse,
    encode_base64,
)
from functions.telemetry import BYTES_OUT, FAILED_FETCH_REQUESTS, count_topic, tracer
from tiered_storage.indexes import CorruptIndexesObjectError, SegmentIndexes, decode_indexes
from tiered_storage.manifest import ManifestError, RemoteLog, RemoteSegment
from tiered_storage.retention import is_tiered

router = Router()

DEFAULT_MAX_BYTES = 1024 * 1024
MAX_MAX_BYTES = 4 * 1024 * 1024
# Lambda answers at most 6 MB; what is left after the records is small (field names, next_offset).
RESPONSE_BUDGET_BYTES = 5_000_000
_SEGMENTS_TTL_S = 10.0
_INDEXES_TTL_S = 3600.0

Format = Literal["binary", "string", "json"]
Isolation = Literal["read_committed", "read_uncommitted"]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def present(data: bytes | None, wanted: Format) -> FetchedData | None:
    """Bytes as ``{"type", "data"}``: the wanted type where the bytes fit it, else BINARY."""
    if data is None:
        return None
    if wanted == "string":
        try:
            return FetchedData(type=DataType.STRING, data=data.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    elif wanted == "json":
        try:
            return FetchedData(type=DataType.JSON, data=json.loads(data, parse_constant=_reject_constant))
        except (ValueError, RecursionError):
            pass
    return FetchedData(type=DataType.BINARY, data=encode_base64(data))


def _describe(container: runtime.Container, topic: str) -> TopicDescription:
    description = container.recall(("topic", topic))
    if description is None:
        try:
            description = container.metadata.get_topic(topic)
        except UnknownTopicError as error:
            raise ApiError(HTTPStatus.NOT_FOUND, f"topic {topic!r} does not exist") from error
        except MetadataUnavailableError as error:
            raise hidden(HTTPStatus.SERVICE_UNAVAILABLE, "cluster metadata is unavailable; retry later", error) from error
        container.remember(("topic", topic), description)
    return description


def _manifest_unavailable(error: ManifestError) -> ApiError:
    return hidden(HTTPStatus.SERVICE_UNAVAILABLE, "the tiered-storage manifest is unavailable; retry later", error)


def _remote_log(container: runtime.Container, description: TopicDescription, partition: int, *,
                refresh: bool = False) -> RemoteLog:
    key = ("remote-log", description.topic_id, str(partition))
    remote = None if refresh else container.recall(key)
    if remote is None:
        try:
            remote = container.manifest.remote_log(description.topic_id, partition)
        except ManifestError as error:
            raise _manifest_unavailable(error) from error
        container.remember(key, remote, _SEGMENTS_TTL_S)
    return remote


def _log_start_now(container: runtime.Container, description: TopicDescription, partition: int) -> int:
    """The manifest's log start as it is now (DeleteRecords may have moved it since the list was cached)."""
    try:
        head = container.manifest.partition_head(description.topic_id, partition)
    except ManifestError as error:
        raise _manifest_unavailable(error) from error
    return 0 if head is None else head.log_start_offset


def _segment_holding(segments: list[RemoteSegment], offset: int) -> RemoteSegment | None:
    number = bisect.bisect_right([s.base_offset for s in segments], offset) - 1
    if number >= 0 and segments[number].contains(offset):
        return segments[number]
    return None


def _get_range(container: runtime.Container, key: str, start: int, end: int) -> bytes:
    response = container.s3.get_object(Bucket=container.settings.aws.bucket, Key=key, Range=f"bytes={start}-{end - 1}")
    return response["Body"].read()


def _indexes(container: runtime.Container, segment: RemoteSegment) -> SegmentIndexes:
    key = ("indexes", segment.segment_id)
    indexes = container.recall(key)
    if indexes is None:
        body = container.s3.get_object(Bucket=container.settings.aws.bucket, Key=segment.indexes_key)["Body"].read()
        try:
            indexes = decode_indexes(body)
        except CorruptIndexesObjectError as error:
            raise hidden(HTTPStatus.BAD_GATEWAY, "the stored indexes of this partition are corrupt", error,
                         key=segment.indexes_key) from error
        container.remember(key, indexes, _INDEXES_TTL_S)
    return indexes


@tracer.capture_method(capture_response=False)  # records and batches: too big for a trace
def read_tiered(container: runtime.Container, segment: RemoteSegment, offset: int,
                max_bytes: int, *, read_committed: bool = False) -> tuple[list[Record], int]:
    """Records from ``offset`` on out of one remote segment: (records, next offset).

    Whole batches only, up to ``max_bytes`` of them except that the first comes whole; the next
    offset is past the last batch read, or past the segment when its end was reached. With
    ``read_committed`` the records of aborted transactions are left out, known from the transaction
    section of the segment's indexes object.
    """
    indexes = _indexes(container, segment)
    start = indexes.position_for_offset(offset)
    following = bisect.bisect_right(indexes.offsets, offset)
    # The batch holding `offset` starts at or before the next index entry's position.
    must_start_by = indexes.positions[following] if following < len(indexes.positions) else segment.size_bytes
    end = min(segment.size_bytes, must_start_by + max(max_bytes, HEADER_SIZE))
    buffer = bytearray(_get_range(container, segment.log_key, start, end))
    taken: list[DecodedBatch] = []
    next_offset = offset
    position = 0
    taken_bytes = 0
    while start + position < segment.size_bytes:
        try:
            header = parse_header(buffer, position)
        except TruncatedBatchError as error:
            if taken_bytes:
                break
            wanted = max(error.needed, HEADER_SIZE)
            more = min(segment.size_bytes, start + position + wanted) - (start + len(buffer))
            if more <= 0:
                raise hidden(HTTPStatus.BAD_GATEWAY, f"the stored data of this partition ends inside a batch "
                             f"(offset {offset})", error, key=segment.log_key, byte=start + position) from error
            buffer += _get_range(container, segment.log_key, start + len(buffer), start + len(buffer) + more)
            continue
        except RecordsError as error:
            # The codec's message is about the data (a batch's offset, a limit), never about where it is kept.
            raise hidden(HTTPStatus.BAD_GATEWAY, f"the stored data of this partition cannot be read: {error}",
                         error, key=segment.log_key, byte=start + position) from error
        if header.next_offset <= offset:
            position += header.size
            continue
        if taken_bytes and taken_bytes + header.size > max_bytes:
            break
        try:
            batch = decode_batch(buffer, position)
        except RecordsError as error:
            # The codec's message is about the data (a batch's offset, a limit), never about where it is kept.
            raise hidden(HTTPStatus.BAD_GATEWAY, f"the stored data of this partition cannot be read: {error}",
                         error, key=segment.log_key, byte=start + position) from error
        taken.append(batch)
        next_offset = header.next_offset
        taken_bytes += header.size
        position += header.size
    if start + position >= segment.size_bytes:
        next_offset = max(next_offset, segment.next_offset)
    count_topic(BYTES_OUT, segment.topic, taken_bytes, MetricUnit.Bytes)
    aborted = [(e.producer_id, e.first_offset) for e in indexes.aborted_between(offset, next_offset)
               ] if read_committed else []
    records = [record for batch in committed_batches(taken, aborted) for record in batch.records
               if record.offset >= offset]
    return records, next_offset


def _out_of_range(container: runtime.Container, topic: str, partition: int, offset: int) -> ApiError:
    async def bounds(client: FloeClient) -> tuple[int, int]:
        earliest, _ = await client.list_offsets(topic, partition, EARLIEST)
        latest, _ = await client.list_offsets(topic, partition, LATEST)
        return earliest, latest

    try:
        earliest, latest = container.call(bounds)
    except ClientError:
        return ApiError(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, f"offset {offset} is out of range")
    return ApiError(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                    f"offset {offset} is out of range: partition {partition} holds offsets {earliest} to {latest - 1}",
                    log_start_offset=earliest, high_watermark=latest)


def _start_offset(container: runtime.Container, topic: str, partition: int, timestamp: int | None) -> int | None:
    """The first offset at or after ``timestamp``, or the earliest offset; None: no record that late."""

    async def look_up(client: FloeClient) -> int | None:
        if timestamp is None:
            return (await client.list_offsets(topic, partition, EARLIEST))[0]
        found, _ = await client.list_offsets(topic, partition, timestamp)
        return None if found < 0 else found

    try:
        return container.call(look_up)
    except KafkaError as error:
        raise api_error_for(error) from error


def _latest_offset(container: runtime.Container, topic: str, partition: int) -> int:
    async def look_up(client: FloeClient) -> int:
        return (await client.list_offsets(topic, partition, LATEST))[0]

    try:
        return container.call(look_up)
    except KafkaError as error:
        raise api_error_for(error) from error


def _from_s3(container: runtime.Container, description: TopicDescription, partition: int, offset: int,
             max_bytes: int, *, refresh: bool = False, read_committed: bool = False) -> tuple[list[Record], int] | None:
    """(records, next offset) when a remote segment holds ``offset``, else None (the broker has it).

    ``refresh`` reads the manifest afresh instead of trusting the cached segment list."""
    for fresh in (refresh, True):
        remote = _remote_log(container, description, partition, refresh=fresh)
        segment = _segment_holding(remote.readable, offset)
        if segment is None and offset >= remote.log_start_offset:
            return None
        if offset < max(remote.log_start_offset, _log_start_now(container, description, partition)):
            raise _out_of_range(container, description.name, partition, offset)
        if segment is None:
            return None
        try:
            return read_tiered(container, segment, offset, max_bytes, read_committed=read_committed)
        except BotoClientError as error:
            missing = error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404")
            if missing and not fresh:
                continue  # retention deleted the segment since the manifest was read: look again
            raise hidden(HTTPStatus.SERVICE_UNAVAILABLE, "tiered storage could not be read; retry later", error,
                         key=segment.log_key) from error
        except BotoCoreError as error:
            raise hidden(HTTPStatus.SERVICE_UNAVAILABLE, "tiered storage could not be read; retry later", error,
                         key=segment.log_key) from error
    return None


@tracer.capture_method(capture_response=False)  # records and batches: too big for a trace
def _from_broker(container: runtime.Container, topic: str, partition: int, offset: int, max_bytes: int,
                 max_wait_ms: int, read_committed: bool) -> tuple[list[Record], int, int]:
    async def fetch(client: FloeClient) -> Any:
        return await client.fetch(topic, partition, offset, max_bytes=max_bytes, max_wait_ms=max_wait_ms,
                                  read_committed=read_committed)

    try:
        result = container.call(fetch)
    except KafkaError as error:
        if error.code.name == "offset_out_of_range":
            raise _out_of_range(container, topic, partition, offset) from error
        raise api_error_for(error) from error
    except ClientError as error:
        raise hidden(HTTPStatus.SERVICE_UNAVAILABLE, "the brokers could not be reached; retry later", error) from error
    except RecordsError as error:
        # A batch that does not decode (a decompression bomb stops at its limit): the log is at fault.
        raise hidden(HTTPStatus.BAD_GATEWAY, f"partition {partition} of topic {topic!r} holds a batch that "
                     "cannot be read", error) from error
    count_topic(BYTES_OUT, topic, result.raw_bytes_len, MetricUnit.Bytes)
    return result.records, result.next_offset, result.high_watermark


def _as_fetched(records: list[Record], wanted: Format, next_offset: int) -> tuple[list[FetchedRecord], int]:
    """The records in the answer's shape, cut where the JSON would pass the response budget."""
    fetched: list[FetchedRecord] = []
    size = 0
    for record in records:
        item = FetchedRecord(
            offset=record.offset,
            timestamp=record.timestamp,
            key=present(record.key, wanted),
            value=present(record.value, wanted),
            headers=[FetchedHeader(name=name, value=None if value is None else encode_base64(value))
                     for name, value in record.headers],
        )
        size += len(item.model_dump_json())
        if fetched and size > RESPONSE_BUDGET_BYTES:
            return fetched, record.offset
        fetched.append(item)
    return fetched, next_offset


@router.get(
    "/v1/topics/<topic>/partitions/<partition>/records",
    summary="Read records of a partition from an offset or a timestamp",
    tags=["records"],
    responses=responses(FetchResponse, 403, 404, 416, 422, 429, 502, 503),
)
def fetch_records(
    topic: Annotated[str, Path(pattern=TOPIC_NAME_PATTERN)],
    partition: Annotated[int, Path(ge=0, le=INT32_MAX)],
    offset: Annotated[int | None, Query(ge=0, le=INT64_MAX)] = None,
    timestamp: Annotated[int | None, Query(ge=0, le=MAX_TIMESTAMP_MS, description="ms since the epoch")] = None,
    max_bytes: Annotated[int, Query(ge=1, le=MAX_MAX_BYTES)] = DEFAULT_MAX_BYTES,
    format: Annotated[Format, Query()] = "binary",
    max_wait_ms: Annotated[int, Query(ge=0, le=10_000, description="long-poll time when no record is there yet")] = 0,
    isolation: Annotated[Isolation, Query(description="read_committed: only committed transactional records, up "
                                          "to the last stable offset; read_uncommitted: everything up to the high "
                                          "watermark")] = "read_committed",
) -> FetchResponse:
    if offset is not None and timestamp is not None:
        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, "give offset or timestamp, not both")
    runtime.require(AclOperation.READ, ResourceType.TOPIC, topic)
    try:
        return _fetch(topic, partition, offset, timestamp, max_bytes, format, max_wait_ms, isolation)
    except Exception:
        count_topic(FAILED_FETCH_REQUESTS, topic, 1)
        raise


def _fetch(topic: str, partition: int, offset: int | None, timestamp: int | None, max_bytes: int, format: Format,
           max_wait_ms: int, isolation: Isolation) -> FetchResponse:
    container, principal = runtime.current(), runtime.current_principal()
    allowance = container.quotas.fetch_allowance(principal)
    if allowance.tokens is not None:  # no more than the caller's quota bucket holds (at least one batch)
        max_bytes = max(1, min(max_bytes, int(allowance.tokens)))
    answer = _read(container, topic, partition, offset, timestamp, max_bytes, format, max_wait_ms, isolation)
    if allowance.tokens is not None:
        container.quotas.fetched(principal, len(answer.model_dump_json()))
    return answer


def _read(container: runtime.Container, topic: str, partition: int, offset: int | None, timestamp: int | None,
          max_bytes: int, format: Format, max_wait_ms: int, isolation: Isolation) -> FetchResponse:
    description = _describe(container, topic)
    if partition >= description.num_partitions:
        raise ApiError(HTTPStatus.NOT_FOUND, f"topic {topic!r} has no partition {partition} "
                       f"(it has {description.num_partitions})")
    if offset is None:
        offset = _start_offset(container, topic, partition, timestamp)
        if offset is None:
            latest = _latest_offset(container, topic, partition)
            return FetchResponse(topic_name=topic, partition_id=partition, records=[], next_offset=latest,
                                 high_watermark=latest, source="broker")
    tiered = is_tiered(description.configs)
    read_committed = isolation == "read_committed"
    if tiered:
        from_s3 = _from_s3(container, description, partition, offset, max_bytes, read_committed=read_committed)
        if from_s3 is not None:
            return _s3_answer(topic, partition, from_s3, format)
    try:
        records, next_offset, high_watermark = _from_broker(container, topic, partition, offset, max_bytes,
                                                            max_wait_ms, read_committed)
    except ApiError as error:
        if not tiered or error.status < 500:
            raise
        # The brokers failed us: S3 may hold the offset by now, though the cached manifest said not.
        from_s3 = _from_s3(container, description, partition, offset, max_bytes, refresh=True,
                           read_committed=read_committed)
        if from_s3 is None:
            raise
        return _s3_answer(topic, partition, from_s3, format)
    fetched, next_offset = _as_fetched(records, format, next_offset)
    return FetchResponse(topic_name=topic, partition_id=partition, records=fetched, next_offset=next_offset,
                         high_watermark=high_watermark, source="broker")


def _s3_answer(topic: str, partition: int, found: tuple[list[Record], int], wanted: Format) -> FetchResponse:
    records, next_offset = found
    fetched, next_offset = _as_fetched(records, wanted, next_offset)
    return FetchResponse(topic_name=topic, partition_id=partition, records=fetched, next_offset=next_offset,
                         high_watermark=None, source="s3")
