"""An exception no handler names is answered 500 with the JSON problem body and without its text or trace."""

from __future__ import annotations

import json

import pytest

from functions import runtime
from functions.local_adapter import LocalLambdaContext, api_gateway_event


def test_an_unexpected_exception_is_a_500_that_shows_nothing_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOE_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")

    def explode(self: runtime.Container, work: object) -> object:
        raise RuntimeError("Requested resource not found: Table: secret-prefix-topics not found")

    monkeypatch.setattr(runtime.Container, "call", explode)
    from functions.app import lambda_handler

    event = api_gateway_event("GET", "/v1/topics", [], b"", caller_arn="arn:aws:iam::111122223333:user/alice")
    answer = lambda_handler(event, LocalLambdaContext(aws_request_id="r-1", region="us-east-1"))
    assert answer["statusCode"] == 500
    body = json.loads(answer["body"])
    assert body == {"error_code": 500, "message": "internal error; the request id is in the logs", "errors": []}
    assert "secret-prefix" not in answer["body"] and "Traceback" not in answer["body"]
