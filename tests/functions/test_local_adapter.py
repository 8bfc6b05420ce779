"""The local HTTP adapter: API Gateway v2 events from HTTP requests, bearer-token auth, body limits."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path

import pytest

from broker_core.local_stack import LocalStack, load_stack
from functions.local_adapter import api_gateway_event
from tests.functions.conftest import HTTP_STACK_OVERRIDES
from tests.functions.http_api import HttpApi


def test_the_event_has_api_gateway_v2_shape() -> None:
    event = api_gateway_event(
        "POST", "/v1/topics/orders/records?a=1&b=2&a=3",
        [("Content-Type", "application/json"), ("X-Tag", "one"), ("x-tag", "two"), ("Cookie", "c1=v1; c2=v2")],
        b'{"value": null}', request_id="req-1", now=datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC))
    assert event["version"] == "2.0" and event["routeKey"] == "$default"
    assert event["rawPath"] == "/v1/topics/orders/records"
    assert event["rawQueryString"] == "a=1&b=2&a=3"
    assert event["queryStringParameters"] == {"a": "1,3", "b": "2"}
    assert event["headers"] == {"content-type": "application/json", "x-tag": "one,two"}
    assert event["cookies"] == ["c1=v1", "c2=v2"]
    assert event["requestContext"]["http"]["method"] == "POST"
    assert event["requestContext"]["requestId"] == "req-1"
    assert event["requestContext"]["timeEpoch"] == 1714521600000
    assert event["body"] == '{"value": null}' and event["isBase64Encoded"] is False


def test_a_body_that_is_not_utf8_travels_as_base64() -> None:
    event = api_gateway_event("POST", "/x", [], b"\xff\x00")
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == b"\xff\x00"


def test_stack_json_names_the_adapter_and_its_token(http_stack: LocalStack) -> None:
    described = load_stack(http_stack.directory)["http"]
    assert described["url"].startswith("http://127.0.0.1:")
    assert len(described["token"]) >= 24


def test_requests_without_the_right_bearer_token_get_401(api: HttpApi) -> None:
    assert api.get("/v1/topics", token="").status == 401
    wrong = api.get("/v1/topics", token="not-the-token")
    assert wrong.status == 401
    assert wrong.headers["www-authenticate"] == "Bearer"
    assert api.get("/v1/topics").status == 200


def test_a_body_over_api_gateways_limit_is_refused_before_the_handler(api: HttpApi) -> None:
    answer = api.post("/v1/topics/any/records", raw=b"x" * (10 * 1024 * 1024 + 1))
    assert answer.status == 413


def test_an_unknown_route_gets_404(api: HttpApi) -> None:
    assert api.get("/v2/nothing-here").status == 404


def test_the_openapi_document_lists_every_route(api: HttpApi) -> None:
    document = api.get("/v1/openapi.json").body
    if isinstance(document, bytes):
        document = json.loads(document)
    assert set(document["paths"]) == {
        "/v1/topics", "/v1/topics/{topic}", "/v1/topics/{topic}/records",
        "/v1/topics/{topic}/partitions/{partition}/records",
        "/v1/groups/{group_id}", "/v1/groups/{group_id}/members", "/v1/groups/{group_id}/members/{member_id}",
        "/v1/groups/{group_id}/members/{member_id}/heartbeat", "/v1/groups/{group_id}/offsets",
    }


# In `make faults`, not `make test`: a stack of its own, stopped and started again (about 25 s on CI).
@pytest.mark.faults
def test_a_restarted_stack_keeps_idempotency_records_and_group_offsets(tmp_path: Path) -> None:
    def started() -> tuple[LocalStack, HttpApi]:
        stack = LocalStack(directory=tmp_path, brokers=1, overrides=HTTP_STACK_OVERRIDES, http=True)
        stack.start()
        http = stack.describe()["http"]
        return stack, HttpApi(http["url"], http["token"])

    body = {"records": [{"value": {"type": "STRING", "data": "once"}}]}
    key = {"Idempotency-Key": "restart-1"}
    stack, api = started()
    try:
        assert api.post("/v1/topics", {"topic_name": "kept"}).status == 201
        first = api.post("/v1/topics/kept/records", body, headers=key)
        assert first.status == 200
        assert api.post("/v1/groups/g/offsets", {"offsets": [{"topic": "kept", "partition_id": 0, "offset": 1}]}).status == 200
    finally:
        stack.stop()
    stack, api = started()
    try:
        assert api.post("/v1/topics/kept/records", body, headers=key).body == first.body
        assert api.get("/v1/topics/kept/partitions/0/records?offset=0").body["next_offset"] == 1
        assert api.get("/v1/groups/g/offsets").body["offsets"] == [
            {"topic": "kept", "partition_id": 0, "offset": 1, "metadata": ""}]
    finally:
        stack.stop(save_state=False)


# In `make faults`, not `make test`: a SASL_SSL stack of its own (about 13 s on CI), as the other SASL_SSL suites.
@pytest.mark.faults
def test_the_adapter_produces_and_fetches_on_a_sasl_ssl_stack(tmp_path: Path) -> None:
    """The adapter's broker client authenticates with the stack's client_config (SASL_SSL, SCRAM): the
    brokers have no PLAINTEXT listener, so a record round trip proves it."""
    stack = LocalStack(directory=tmp_path, brokers=1, overrides=HTTP_STACK_OVERRIDES, http=True, security="sasl_ssl")
    stack.start()
    try:
        http = stack.describe()["http"]
        api = HttpApi(http["url"], http["token"])
        assert api.post("/v1/topics", {"topic_name": "secured"}).status == 201
        produced = api.post("/v1/topics/secured/records",
                            {"records": [{"value": {"type": "STRING", "data": "over SASL_SSL"}}]})
        assert produced.status == 200
        fetched = api.get("/v1/topics/secured/partitions/0/records?offset=0").body
        assert fetched["next_offset"] == 1
        assert [base64.b64decode(r["value"]["data"]) for r in fetched["records"]] == [b"over SASL_SSL"]
        assert (tmp_path / "http-client.properties").stat().st_mode & 0o077 == 0
    finally:
        stack.stop(save_state=False)
