"""HTTP errors of the front ends: one exception type, one JSON shape, and the Kafka-error-to-status table.

Every error answer has the body ``{"error_code": <HTTP status>, "message": "...", "errors": [...]}``,
the shape Confluent's REST Proxy uses (its ``error_code`` plus ``message``); ``errors`` lists field
errors (``{"field": "body.records.0.key.type", "type": ..., "message": ...}``) and is empty
otherwise. Broker errors map to statuses by what they mean for the caller: a request the broker
refused for what it asked (unknown topic, bad config, record too large) is a 4xx, a cluster that
cannot serve right now (no leader, not enough replicas, a timeout) is 503, and anything else is 502
(the broker failed, not the front end). No answer carries what only the operator should see: a
cluster-side failure is answered in the caller's terms and its cause (a boto message, a table name,
an S3 key, a broker address, a stack trace) goes to the log (`hidden`).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from kio.schema.errors import ErrorCode
from pydantic import BaseModel, Field

from broker_core.client import KafkaError
from functions.telemetry import logger


class FieldError(BaseModel):
    field: str = Field(description="where in the request: body.records.0.value.data, query.offset, ...")
    type: str = Field(description="a machine-readable kind, e.g. missing, string_type, invalid_base64")
    message: str


class ErrorBody(BaseModel):
    error_code: int = Field(description="the HTTP status again, as Confluent's REST Proxy reports it")
    message: str
    errors: list[FieldError] = Field(default_factory=list)


class ApiError(Exception):
    """An HTTP error answer: status, message, optional field errors, response headers (Retry-After)
    and extra fields for the body."""

    def __init__(self, status: int, message: str, *, errors: list[FieldError] | None = None,
                 headers: dict[str, str] | None = None, **details: Any) -> None:
        super().__init__(message)
        self.status = int(status)
        self.message = message
        self.errors = errors or []
        self.headers = headers or {}
        self.details = details

    def body(self) -> dict[str, Any]:
        body = ErrorBody(error_code=self.status, message=self.message, errors=self.errors).model_dump()
        body.update(self.details)
        return body


_NOT_FOUND = {ErrorCode.unknown_topic_or_partition}
_CONFLICT = {ErrorCode.topic_already_exists}
_TOO_LARGE = {ErrorCode.message_too_large, ErrorCode.record_list_too_large}
_BAD_REQUEST = {
    ErrorCode.invalid_topic_exception,
    ErrorCode.invalid_partitions,
    ErrorCode.invalid_replication_factor,
    ErrorCode.invalid_replica_assignment,
    ErrorCode.invalid_config,
    ErrorCode.policy_violation,
    ErrorCode.invalid_request,
    ErrorCode.invalid_record,
    ErrorCode.invalid_timestamp,
    ErrorCode.corrupt_message,
    ErrorCode.topic_deletion_disabled,
    ErrorCode.unsupported_compression_type,
}
_RANGE = {ErrorCode.offset_out_of_range}


def hidden(status: int, message: str, error: BaseException, **where: Any) -> ApiError:
    """An error answer that says what failed in the caller's terms, and logs (never answers) the
    internal cause: a boto or pynamodb message, a table name, an S3 key or a broker address is for
    the operator's log, not for the caller."""
    logger.warning(message, extra={"status": int(status), "error_type": type(error).__name__, "error": str(error),
                                   **where})
    return ApiError(status, message)


def status_for(code: ErrorCode) -> int:
    """The HTTP status a broker error code becomes."""
    if code in _NOT_FOUND:
        return HTTPStatus.NOT_FOUND
    if code in _CONFLICT:
        return HTTPStatus.CONFLICT
    if code in _TOO_LARGE:
        return HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    if code in _BAD_REQUEST:
        return HTTPStatus.BAD_REQUEST
    if code in _RANGE:
        return HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE
    if code.retriable or code in (ErrorCode.broker_not_available, ErrorCode.not_controller):
        return HTTPStatus.SERVICE_UNAVAILABLE
    return HTTPStatus.BAD_GATEWAY


def api_error_for(error: KafkaError) -> ApiError:
    """An ApiError that says what the broker answered and where (topic, partition). The broker's own
    message is passed on when the request was at fault (4xx: an invalid config, a record too large),
    and logged only when the cluster was (5xx), where it may name the broker's internals."""
    where = ""
    if error.topic:
        where = f" for topic {error.topic!r}" + (f" partition {error.partition}" if error.partition is not None else "")
    status = status_for(error.code)
    reason = f": {error.message}" if error.message and status < 500 else ""
    if error.message and status >= 500:
        logger.warning("broker error", extra={"kafka_error": error.code.name, "error": error.message})
    return ApiError(status, f"the broker answered {error.code.name}{where}{reason}", kafka_error=error.code.name)


def responses(success: type[BaseModel] | None, *errors: int, status: int = HTTPStatus.OK) -> dict[int, dict[str, Any]]:
    """OpenAPI ``responses`` of a route: its success answer (no body when ``success`` is None) and
    these error statuses, all with the ErrorBody schema."""
    entries: dict[int, dict[str, Any]] = {int(status): {"description": HTTPStatus(status).phrase}}
    if success is not None:
        entries[int(status)]["content"] = {"application/json": {"model": success}}
    for error in errors:
        entries[error] = {"description": HTTPStatus(error).phrase, "content": {"application/json": {"model": ErrorBody}}}
    return entries
