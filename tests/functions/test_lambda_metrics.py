"""The front ends' CloudWatch metrics: the handler, invoked as Lambda invokes it against the session's
stack, writes embedded-metric-format lines to stdout with the brokers' metric names and exact counts."""

from __future__ import annotations

import json
import queue
from collections.abc import Callable
from typing import Any

import pytest
from aws_lambda_powertools.metrics.provider import cold_start

from broker_core.local_stack import LocalStack
from functions import runtime, telemetry
from functions.local_adapter import LocalLambdaContext, api_gateway_event

CALLER = "arn:aws:iam::111122223333:user/alice"


@pytest.fixture
def invoke(http_stack: LocalStack, monkeypatch: pytest.MonkeyPatch,
           capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Invoke `functions.app.lambda_handler` in this process; (its answer, the EMF documents it printed)."""
    for name, value in {"FLOE_BOOTSTRAP_SERVERS": http_stack.bootstrap_servers,
                        "FLOE_AWS_ENDPOINT_URL": http_stack.aws.endpoint_url or "", "AWS_REGION": http_stack.region,
                        "FLOE_BUCKET": http_stack.bucket, "FLOE_TABLE_PREFIX": http_stack.table_prefix,
                        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "WARNING"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    monkeypatch.delenv("POWERTOOLS_DEV", raising=False)
    monkeypatch.delenv("FLOE_CLIENT_PROPERTIES_FILE", raising=False)
    monkeypatch.setattr(runtime, "_settings", None)  # settings of another test's environment are not ours
    monkeypatch.setattr(runtime, "_idle", queue.SimpleQueue())
    monkeypatch.setattr(cold_start, "is_cold_start", True)
    from functions.app import lambda_handler

    def call(method: str, target: str, body: Any = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        capsys.readouterr()
        raw = b"" if body is None else json.dumps(body).encode()
        event = api_gateway_event(method, target, [("content-type", "application/json")], raw, caller_arn=CALLER)
        answer = lambda_handler(event, LocalLambdaContext(aws_request_id="r-1", region=http_stack.region))
        documents = []
        for line in capsys.readouterr().out.splitlines():
            document = json.loads(line) if line.startswith("{") else None
            if isinstance(document, dict) and "_aws" in document:
                documents.append(document)
        return answer, documents

    return call


def values(documents: list[dict[str, Any]], name: str, **dimensions: str) -> list[float]:
    """Every value of metric ``name`` in documents that declare it and carry ``dimensions``."""
    found = []
    for document in documents:
        declared = {m["Name"] for d in document["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]}
        if name in declared and all(document.get(k) == v for k, v in dimensions.items()):
            value = document[name]
            found.extend(value if isinstance(value, list) else [value])
    return found


def dimension_sets(documents: list[dict[str, Any]], name: str) -> list[list[str]]:
    return [sorted(names) for document in documents for d in document["_aws"]["CloudWatchMetrics"]
            if name in {m["Name"] for m in d["Metrics"]} for names in d["Dimensions"]]


def unit_of(documents: list[dict[str, Any]], name: str) -> str:
    [unit] = {m["Unit"] for document in documents for d in document["_aws"]["CloudWatchMetrics"]
              for m in d["Metrics"] if m["Name"] == name}
    return unit


def test_a_produce_counts_messages_and_batch_bytes_in_under_the_brokers_names(invoke, make_topic) -> None:
    topic = make_topic(partitions=1)
    records = [{"value": {"type": "STRING", "data": f"record {n}"}} for n in range(3)]
    answer, documents = invoke("POST", f"/v1/topics/{topic}/records", {"records": records})
    assert answer["statusCode"] == 200, answer["body"]
    assert values(documents, telemetry.MESSAGES_IN, topic=topic) == [3.0]
    [bytes_in] = values(documents, telemetry.BYTES_IN, topic=topic)
    # One batch of three records: a 61-byte header plus each record's bytes, at least its value.
    assert 61 + sum(len(f"record {n}") for n in range(3)) < bytes_in < 200
    assert values(documents, telemetry.FAILED_PRODUCE_REQUESTS) == []
    assert dimension_sets(documents, telemetry.MESSAGES_IN) == [["service", "topic"]]
    assert unit_of(documents, telemetry.BYTES_IN) == "Bytes"
    assert values(documents, telemetry.REQUESTS, request="Produce") == [1.0]
    [elapsed] = values(documents, telemetry.REQUEST_TIME_MS, request="Produce")
    assert elapsed > 0
    assert dimension_sets(documents, telemetry.REQUESTS) == [["request", "service"]]
    assert values(documents, "ColdStart") == [1.0]  # the first invocation of a new container

    answer, documents = invoke("POST", f"/v1/topics/{topic}/records", {"records": records[:1]})
    assert answer["statusCode"] == 200
    assert values(documents, telemetry.MESSAGES_IN, topic=topic) == [1.0]
    assert values(documents, "ColdStart") == []  # a warm container


def test_a_fetch_counts_the_batch_bytes_it_read_out(invoke, make_topic) -> None:
    topic = make_topic(partitions=1)
    records = [{"value": {"type": "STRING", "data": "x" * 100}} for _ in range(2)]
    _, produced = invoke("POST", f"/v1/topics/{topic}/records", {"records": records})
    [bytes_in] = values(produced, telemetry.BYTES_IN, topic=topic)
    answer, documents = invoke("GET", f"/v1/topics/{topic}/partitions/0/records?offset=0")
    assert answer["statusCode"] == 200, answer["body"]
    assert len(json.loads(answer["body"])["records"]) == 2
    assert values(documents, telemetry.BYTES_OUT, topic=topic) == [bytes_in]  # the same batch, read back whole
    assert values(documents, telemetry.REQUESTS, request="Fetch") == [1.0]
    assert values(documents, telemetry.FAILED_FETCH_REQUESTS) == []


def test_failed_produce_and_fetch_requests_are_counted_per_topic(invoke, make_topic) -> None:
    topic = make_topic(partitions=1)
    answer, documents = invoke("POST", f"/v1/topics/{topic}/records",
                               {"partition_id": 5, "value": {"type": "STRING", "data": "v"}})
    assert answer["statusCode"] == 422
    assert values(documents, telemetry.FAILED_PRODUCE_REQUESTS, topic=topic) == [1.0]
    assert values(documents, telemetry.MESSAGES_IN) == []
    answer, documents = invoke("GET", f"/v1/topics/{topic}/partitions/3/records")
    assert answer["statusCode"] == 404
    assert values(documents, telemetry.FAILED_FETCH_REQUESTS, topic=topic) == [1.0]
    assert values(documents, telemetry.REQUESTS, request="Fetch") == [1.0]


def test_every_route_is_counted_under_the_kafka_request_it_stands_for(invoke) -> None:
    answer, documents = invoke("GET", "/v1/topics")
    assert answer["statusCode"] == 200
    assert values(documents, telemetry.REQUESTS, request="Metadata") == [1.0]
    assert telemetry.request_name("GET", "/v1/topics/t1/partitions/0/records") == "Fetch"
    assert telemetry.request_name("GET", "/v1/topics/t1") == "Metadata"
    assert telemetry.request_name("POST", "/v1/groups/g/members/m/heartbeat") == "Heartbeat"
    assert telemetry.request_name("DELETE", "/v1/groups/g/members/m") == "LeaveGroup"
    assert telemetry.request_name("GET", "/v1/groups/g/offsets") == "OffsetFetch"
    assert telemetry.request_name("PUT", "/v1/topics") == telemetry.UNKNOWN_REQUEST
