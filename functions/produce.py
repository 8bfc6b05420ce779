"""Produce over HTTP: ``POST /v1/topics/{topic}/records`` appends records with acks=all.

Everything that can be wrong with a request is found before anything is sent: the body's shape
(pydantic), each record's partition against the topic's partition count, and each partition's
batch against the topic's ``max.message.bytes``. Only then are the records sent, one batch per
partition, through `FloeClient.produce_many` (one Produce request per leader, acks=all). The answer
lists, in request order, each record's partition, offset (its batch's base offset plus its place in
the batch) and timestamp.

With an ``Idempotency-Key`` header the append runs under Powertools idempotency on DynamoDB, keyed
by the caller's principal, the topic and the key (two callers using one key never see each other's
answers, nor learn that the other used it): the first request with a key stores its answer, a retry with the same key and the same body gets that
answer without appending again, the same key with a different body is refused (422), and a retry
while the first is still running gets 409. Records without a key or partition all go to one
partition picked at random per request, as Kafka's sticky partitioner does per batch. A caller over
its ``producer_byte_rate`` quota (functions.quotas) gets 429 before anything is sent.

A body of ``{"records": [...]}`` that `functions.produce_body` reads (msgspec, the same rules as the
pydantic models) skips the resolver's routing, validation and response serialization (`read_fast`,
`functions.app`); any other body (one record, an ISO-8601 timestamp, anything pydantic would coerce
or refuse) goes through the route and pydantic, so every error body is the route's. Keys are placed
by `functions.partitioning` (all keys of the request at once) and each partition's batch is written
by `functions.record_encoding`; both give what Kafka's partitioner and `build_batch` give.

Metrics (`functions.telemetry`): records and batch bytes appended count to the topic's messages-in
and bytes-in (an idempotent replay appends nothing and counts nothing); a request that passed its
ACL check and then failed counts one failed produce request.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Annotated, Any

import boto3
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
)

from broker_core.client import FloeClient, KafkaError
from broker_core.clock import wall_clock_ms
from broker_core.security.acls import AclOperation, ResourceType
from broker_core.settings import TOPIC_SETTINGS
from functions import runtime
from functions.errors import ApiError, FieldError, api_error_for, responses
from functions.models import (
    TOPIC_NAME_PATTERN,
    ProduceBody,
    ProduceRecord,
    ProduceRecords,
    ProduceResponse,
)
from functions.partitioning import partitions_for_keys
from functions.produce_body import RecordFields, decode_records
from functions.record_encoding import RecordParts, encode_batch
from functions.telemetry import BYTES_IN, FAILED_PRODUCE_REQUESTS, MESSAGES_IN, count_topic, tracer

router = Router()

IDEMPOTENCY_EXPIRY_S = 24 * 3600
_IDEMPOTENCY_KEY_PREFIX = "floe-http-produce"
_MAX_MESSAGE_BYTES = "max.message.bytes"
_DEFAULT_MAX_MESSAGE_BYTES = int(TOPIC_SETTINGS[_MAX_MESSAGE_BYTES].default)


# The route's path with a topic its Path(pattern=TOPIC_NAME_PATTERN) accepts as it is.
_FAST_PATH = re.compile(r"/v1/topics/([a-zA-Z0-9._-]{1,249})/records")


@dataclass(frozen=True)
class FastProduce:
    """A produce request read without the resolver (`read_fast`)."""

    topic: str
    records: list[RecordFields]
    idempotency_key: str | None
    raw_body: str


@dataclass(frozen=True)
class PreparedProduce:
    """A checked request: one batch per partition and, per request record, (partition, index, timestamp)."""

    topic: str
    batches: dict[int, bytes]
    placements: list[tuple[int, int, int]]


async def _partition_count(client: FloeClient, container: runtime.Container, topic: str) -> int:
    count = container.recall(("partitions", topic))
    if count is None:
        count = (await client.describe_topic(topic)).num_partitions
        container.remember(("partitions", topic), count)
    return count


async def _max_message_bytes(client: FloeClient, container: runtime.Container, topic: str) -> int:
    limit = container.recall(("max.message.bytes", topic))
    if limit is None:
        configs = await client.describe_configs(topic)
        limit = int(configs.get(_MAX_MESSAGE_BYTES) or _DEFAULT_MAX_MESSAGE_BYTES)
        container.remember(("max.message.bytes", topic), limit)
    return limit


@tracer.capture_method(capture_response=False)  # records and batches: too big for a trace
def prepare(container: runtime.Container, topic: str, records: list[RecordFields], now_ms: int) -> PreparedProduce:
    """Place and encode the records; raises ApiError (nothing sent) when any of them cannot be appended."""

    async def load(client: FloeClient) -> tuple[int, int]:
        return await _partition_count(client, container, topic), await _max_message_bytes(client, container, topic)

    try:
        num_partitions, max_message_bytes = container.call(load)
    except KafkaError as error:
        container.forget(("partitions", topic))
        raise api_error_for(error) from error
    sticky_partition = random.randrange(num_partitions)
    by_partition: dict[int, list[RecordParts]] = {}
    placements: list[tuple[int, int, int]] = []
    field_errors: list[FieldError] = []
    keyed = partitions_for_keys([key for partition, key, _, _, _ in records if partition is None and key is not None],
                                num_partitions)
    keyed_index = 0
    for number, (partition_id, key, value, timestamp, headers) in enumerate(records):
        if partition_id is not None:
            if partition_id >= num_partitions:
                field_errors.append(FieldError(
                    field=f"body.records.{number}.partition_id", type="partition_not_found",
                    message=f"topic {topic!r} has {num_partitions} partitions (0..{num_partitions - 1})"))
                continue
            partition = partition_id
        elif key is not None:
            partition = keyed[keyed_index]
            keyed_index += 1
        else:
            partition = sticky_partition
        if timestamp is None:
            timestamp = now_ms
        batch = by_partition.get(partition)
        if batch is None:
            batch = by_partition[partition] = []
        placements.append((partition, len(batch), timestamp))
        batch.append((key, value, headers, timestamp))
    if field_errors:
        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, "some records name a partition the topic does not have",
                       errors=field_errors)
    batches: dict[int, bytes] = {}
    for partition, partition_records in by_partition.items():
        try:
            batches[partition] = encode_batch(partition_records)
        except ValueError as error:
            raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, f"the records for partition {partition} cannot be "
                           f"encoded: {error}") from error
        if len(batches[partition]) > max_message_bytes:
            raise ApiError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                           f"the records for partition {partition} make a {len(batches[partition])}-byte batch; "
                           f"topic {topic!r} takes batches of at most {max_message_bytes} bytes (max.message.bytes)")
    return PreparedProduce(topic, batches, placements)


@tracer.capture_method(capture_response=False)  # records and batches: too big for a trace
def append(container: runtime.Container, prepared: PreparedProduce) -> dict[str, Any]:
    """Send the batches with acks=all and answer with each record's place, in request order."""

    async def send(client: FloeClient) -> Any:
        return await client.produce_many(prepared.topic, prepared.batches, acks=-1)

    try:
        landed = container.call(send)
    except KafkaError as error:
        container.forget(("partitions", prepared.topic))
        raise api_error_for(error) from error
    results = []
    for partition, index, timestamp in prepared.placements:
        result = landed[partition]
        appended_at = result.log_append_time if result.log_append_time >= 0 else timestamp
        results.append({"partition_id": partition, "offset": result.base_offset + index, "timestamp": appended_at})
    count_topic(MESSAGES_IN, prepared.topic, len(results))
    count_topic(BYTES_IN, prepared.topic, sum(len(batch) for batch in prepared.batches.values()), MetricUnit.Bytes)
    return {"results": results}


def _append_once(request: dict[str, Any], container: runtime.Container, prepared: PreparedProduce) -> dict[str, Any]:
    """`append` under an idempotency record keyed by ``request`` (principal, topic and key; the body hash
    is checked)."""
    return append(container, prepared)


@functools.cache
def _idempotent_append() -> Any:
    settings = runtime.settings()
    layer = DynamoDBPersistenceLayer(
        table_name=settings.table(runtime.IDEMPOTENCY_TABLE),
        boto3_client=boto3.session.Session().client("dynamodb", **settings.aws.boto3_kwargs()),
    )
    config = IdempotencyConfig(
        event_key_jmespath="[principal, topic, idempotency_key]",
        payload_validation_jmespath="body_sha256",
        expires_after_seconds=IDEMPOTENCY_EXPIRY_S,
    )
    return idempotent_function(_append_once, data_keyword_argument="request", persistence_store=layer, config=config,
                               key_prefix=_IDEMPOTENCY_KEY_PREFIX)


def _append_with_key(container: runtime.Container, prepared: PreparedProduce, idempotency_key: str,
                     raw_body: str, principal: str) -> dict[str, Any]:
    request = {
        "principal": principal,
        "topic": prepared.topic,
        "idempotency_key": idempotency_key,
        "body_sha256": hashlib.sha256(raw_body.encode("utf-8")).hexdigest(),
    }
    try:
        return _idempotent_append()(request=request, container=container, prepared=prepared)
    except IdempotencyAlreadyInProgressError as error:
        raise ApiError(HTTPStatus.CONFLICT, "a request with this Idempotency-Key is still being processed; "
                       "retry later") from error
    except IdempotencyValidationError as error:
        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, "this Idempotency-Key was used with a different body") from error
    except IdempotencyPersistenceLayerError as error:
        raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE, "the idempotency store is unavailable; retry later") from error


@router.post(
    "/v1/topics/<topic>/records",
    summary="Append records to a topic",
    description="One record, or {\"records\": [...]}, in Confluent REST v3 shape; acks=all.",
    tags=["records"],
    responses=responses(ProduceResponse, 403, 400, 404, 409, 413, 415, 422, 429, 502, 503),
)
def produce_records(
    topic: Annotated[str, Path(pattern=TOPIC_NAME_PATTERN)],
    body: Annotated[ProduceBody, Body()],
    idempotency_key: Annotated[str | None, Header(alias="idempotency-key", min_length=1, max_length=255)] = None,
) -> ProduceResponse:
    records = body.records if isinstance(body, ProduceRecords) else [body]
    answer = checked_produce(topic, [record_fields(record) for record in records], idempotency_key,
                             router.current_event.body or "")
    return ProduceResponse.model_validate(answer)


def read_fast(event: dict[str, Any]) -> FastProduce | None:
    """The produce request in ``event`` when `functions.produce_body` reads its body and its path and
    header are ones the route's validation passes as they are; None for any other request (the
    resolver then routes and validates it)."""
    match = _FAST_PATH.fullmatch(event.get("rawPath") or "")
    if match is None or event.get("isBase64Encoded") or event.get("requestContext", {}).get(
            "http", {}).get("method") != "POST":
        return None
    idempotency_key = None
    for name, value in (event.get("headers") or {}).items():
        if name.lower() == "idempotency-key":
            if not isinstance(value, str) or not 1 <= len(value) <= 255:
                return None
            idempotency_key = value
    raw_body = event.get("body")
    if not raw_body:
        return None
    records = decode_records(raw_body)
    if records is None:
        return None
    return FastProduce(match.group(1), records, idempotency_key, raw_body)


def checked_produce(topic: str, records: list[RecordFields], idempotency_key: str | None,
                    raw_body: str) -> dict[str, Any]:
    """The route's work once its input is read: the ACL check, then `produce`; a failure after the check
    counts one failed produce request."""
    runtime.require(AclOperation.WRITE, ResourceType.TOPIC, topic)
    try:
        return produce(records, topic, idempotency_key, raw_body)
    except Exception:
        count_topic(FAILED_PRODUCE_REQUESTS, topic, 1)
        raise


def record_fields(record: ProduceRecord) -> RecordFields:
    """A validated record as `prepare` takes it (what `functions.produce_body` reads from the same record)."""
    return (record.partition_id,
            record.key.to_bytes() if record.key is not None else None,
            record.value.to_bytes() if record.value is not None else None,
            record.timestamp_ms(),
            tuple((header.name, header.value_bytes()) for header in record.headers))


def produce(records: list[RecordFields], topic: str, idempotency_key: str | None, raw_body: str) -> dict[str, Any]:
    """Append ``records`` (read from ``raw_body``) to ``topic``, under ``idempotency_key`` if given; the
    answer as ProduceResponse's fields. The caller has checked the ACL."""
    container = runtime.current()
    prepared = prepare(container, topic, records, wall_clock_ms())
    principal = runtime.current_principal()
    container.quotas.produce(principal, len(raw_body.encode("utf-8")))
    if idempotency_key is None:
        return append(container, prepared)
    return _append_with_key(container, prepared, idempotency_key, raw_body, principal)
