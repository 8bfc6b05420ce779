"""The front ends' Lambda entry point: one Powertools HTTP API resolver serving every route.

``lambda_handler`` is what template.yaml's functions and the local HTTP adapter invoke with an API
Gateway HTTP API (payload v2) event. It turns away bodies over Lambda's 6 MB request limit (413)
before anything parses them, and produce requests of more than ``MAX_RECORDS_PER_REQUEST`` records
(413) before any record is validated, and bodies that are not UTF-8 JSON (415, 400), borrows a warm container (`functions.runtime`), and lets the resolver
route, validate (pydantic, `enable_validation`) and answer. Errors leave as JSON in one shape
(functions.errors): field errors 422 (400 for a body that is not JSON), refusals 4xx, an
unreachable cluster 503. ``GET /v1/openapi.json`` serves the OpenAPI document generated from the
routes and models. Logger, Metrics and Tracer are Powertools'; every invocation counts one request
of its Kafka kind and its time, and the first of a container a cold start (`functions.telemetry`);
the local adapter turns metrics and tracing off through their environment switches. A produce
request whose body msgspec reads as the route would (`functions.produce.read_fast`) is served
without the resolver (`_produce_fast`): the same work, the same answer, errors through the same
exception handlers, at a fraction of the CPU (docs/performance.md, "HTTP front end: tail latency").
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import msgspec
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.shared.headers_serializer import HttpApiHeadersSerializer
from aws_lambda_powertools.utilities.typing import LambdaContext

from broker_core.client import ClientError, KafkaError
from functions import fetch, groups, produce, runtime, topics
from functions.caller import principal_of, source_ip
from functions.errors import ApiError, FieldError, api_error_for, hidden
from functions.models import TOO_MANY_RECORDS, UNION_TAGS
from functions.quotas import QuotaUnavailableError
from functions.telemetry import logger, metrics, record_request, request_name, tracer

API_TITLE = "Floe HTTP API"
API_VERSION = "1.0.0"
# Lambda takes request payloads up to 6 MB; API Gateway would pass larger ones on to a failed invoke.
MAX_REQUEST_BYTES = 6 * 1024 * 1024
_ENCODE_JSON = msgspec.json.Encoder().encode

def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None


app = APIGatewayHttpResolver(enable_validation=True, json_body_deserializer=_parse_json)
for module in (produce, fetch, topics, groups):
    app.include_router(module.router)


def _json_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body, headers=headers)


# Exception type -> its handler, as registered with the resolver; the produce fast path (`_produce_fast`)
# answers its errors with the same handlers.
_ERROR_HANDLERS: dict[type[Exception], Callable[[Any], Response]] = {}


def _handles(kind: type[Exception]) -> Callable[[Callable[[Any], Response]], Callable[[Any], Response]]:
    def register(handler: Callable[[Any], Response]) -> Callable[[Any], Response]:
        _ERROR_HANDLERS[kind] = handler
        return app.exception_handler(kind)(handler)

    return register


@_handles(ApiError)
def _api_error(error: ApiError) -> Response:
    return _json_response(error.status, error.body(), error.headers)


@_handles(QuotaUnavailableError)
def _quota_unavailable(error: QuotaUnavailableError) -> Response:
    refused = hidden(HTTPStatus.SERVICE_UNAVAILABLE, "the quota store is unavailable; retry later", error)
    return _json_response(refused.status, refused.body())


@_handles(RequestValidationError)
def _invalid_request(error: RequestValidationError) -> Response:
    problems = error.errors()
    too_many = next((problem for problem in problems if problem["type"] == TOO_MANY_RECORDS), None)
    if too_many is not None:  # a request limit, not a malformed request
        return _json_response(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, ApiError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE, str(too_many["msg"]), **too_many.get("ctx", {})).body())
    field_errors = [
        FieldError(field=".".join(str(part) for part in problem["loc"] if part not in UNION_TAGS), type=problem["type"],
                   message=str(problem.get("msg", problem["type"])))
        for problem in problems
    ]
    if any(problem["type"] == "json_invalid" for problem in problems):
        return _json_response(HTTPStatus.BAD_REQUEST, ApiError(
            HTTPStatus.BAD_REQUEST, "the body is not valid JSON", errors=field_errors).body())
    return _json_response(HTTPStatus.UNPROCESSABLE_ENTITY, ApiError(
        HTTPStatus.UNPROCESSABLE_ENTITY, "the request is invalid", errors=field_errors).body())


@_handles(KafkaError)
def _kafka_error(error: KafkaError) -> Response:
    api_error = api_error_for(error)
    return _json_response(api_error.status, api_error.body())


@_handles(ClientError)
def _cluster_unreachable(error: ClientError) -> Response:
    refused = hidden(HTTPStatus.SERVICE_UNAVAILABLE, "the brokers could not be reached; retry later", error)
    return _json_response(refused.status, refused.body())


@app.get("/v1/openapi.json", include_in_schema=False)
def openapi_document() -> Response[str]:
    return Response(status_code=HTTPStatus.OK, content_type=content_types.APPLICATION_JSON,
                    body=openapi_json())


def openapi_json() -> str:
    """The OpenAPI document of every route, generated from the resolver."""
    return app.get_openapi_json_schema(
        title=API_TITLE, version=API_VERSION,
        description="Produce, fetch, topics and consumer groups of a Floe cluster over HTTPS.",
    )


def _request_bytes(event: dict[str, Any]) -> int:
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        return len(base64.b64decode(body, validate=False))
    return len(body.encode("utf-8"))


def _refuse_body(event: dict[str, Any]) -> ApiError | None:
    """Bodies are UTF-8 JSON: anything else (a form, multipart, text, other bytes) is refused up front."""
    if not event.get("body"):
        return None
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    media_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type not in ("", "application/json") and not media_type.endswith("+json"):
        return ApiError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"send the body as application/json, not {media_type}")
    if event.get("isBase64Encoded"):
        try:
            base64.b64decode(event["body"]).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return ApiError(HTTPStatus.BAD_REQUEST, "the body is not valid JSON: it is not UTF-8")
    return None


def _answer(error: ApiError) -> dict[str, Any]:
    return {"statusCode": error.status, "headers": {"Content-Type": content_types.APPLICATION_JSON},
            "body": json.dumps(error.body()), "isBase64Encoded": False}


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        return _handle(event, context)
    finally:
        http = (event.get("requestContext") or {}).get("http") or {}
        record_request(request_name(str(http.get("method", "")), str(event.get("rawPath", ""))),
                       (time.perf_counter() - started) * 1000.0)


def _handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    size = _request_bytes(event)
    if size > MAX_REQUEST_BYTES:
        return _answer(ApiError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                f"the request body is {size} bytes; the limit is {MAX_REQUEST_BYTES} bytes"))
    refused = _refuse_body(event)
    if refused is not None:
        return _answer(refused)
    with runtime.borrowed_container(principal_of(event), source_ip(event)):
        try:
            fast = produce.read_fast(event)
            if fast is not None:
                return _produce_fast(fast)
            return app.resolve(event, context)
        except Exception as error:  # what no exception handler names: logged with its trace, answered without
            logger.exception("unhandled error", extra={"error_type": type(error).__name__})
            return _answer(ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error; the request id is in the logs"))


def _produce_fast(request: produce.FastProduce) -> dict[str, Any]:
    """A produce request whose body `functions.produce_body` read: the route's work and answer without
    the resolver's routing, validation and response serialization (the same answer, errors through
    the same handlers)."""
    try:
        answer = produce.checked_produce(request.topic, request.records, request.idempotency_key, request.raw_body)
    except Exception as error:
        handler = next((_ERROR_HANDLERS[kind] for kind in type(error).__mro__ if kind in _ERROR_HANDLERS), None)
        if handler is None:
            raise
        response = handler(error)
        return {"statusCode": response.status_code, "body": json.dumps(response.body, separators=(",", ":")),
                "isBase64Encoded": False,
                **HttpApiHeadersSerializer().serialize(headers=response.headers, cookies=response.cookies)}
    return {"statusCode": HTTPStatus.OK, "body": _ENCODE_JSON(answer).decode("utf-8"), "isBase64Encoded": False,
            "headers": {"Content-Type": content_types.APPLICATION_JSON}, "cookies": []}
