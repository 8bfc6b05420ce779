"""Error answers never show internals: a front end whose brokers cannot be reached and whose tables are
missing answers in the caller's terms, without table names, addresses, boto messages or stack traces."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import boto3
import pytest

from broker_core.local_stack import LocalStack
from tests.functions.conftest import extra_adapter
from tests.functions.http_api import HttpAnswer, HttpApi

PREFIX = "hiddenprefix-"
CALLER_TOKEN = "broken-caller-token"


@pytest.fixture(scope="module")
def broken(http_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HttpApi, int]]:
    """An adapter whose bootstrap server is a closed port and whose table prefix has no cluster tables; its
    API and that port."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]  # bound, never listening: connections are refused
    callers = json.dumps({CALLER_TOKEN: "arn:aws:iam::111122223333:user/broken"})
    try:
        with extra_adapter(http_stack, tmp_path_factory.mktemp("broken"), FLOE_BOOTSTRAP_SERVERS=f"127.0.0.1:{port}",
                           FLOE_TABLE_PREFIX=PREFIX, FLOE_HTTP_CALLERS=callers) as url:
            yield HttpApi(url, CALLER_TOKEN), port
    finally:
        closed.close()


def assert_nothing_internal(answer: HttpAnswer, *secrets: str) -> None:
    text = json.dumps(answer.body)
    for secret in (PREFIX, "Traceback", "botocore", "ResourceNotFound", "dynamodb", "127.0.0.1", *secrets):
        assert secret.lower() not in text.lower(), (secret, text)
    assert set(answer.body) >= {"error_code", "message", "errors"}


def test_unreachable_brokers_are_a_503_that_names_no_address(broken: tuple[HttpApi, int]) -> None:
    api, port = broken
    for answer in (api.post("/v1/topics/orders/records", {"value": {"type": "STRING", "data": "x"}}),
                   api.get("/v1/topics"),
                   api.post("/v1/topics", {"topic_name": "t", "partitions_count": 1, "replication_factor": 1})):
        assert answer.status == 503, answer.body
        assert answer.body["error_code"] == 503
        assert_nothing_internal(answer, str(port))


def test_missing_cluster_tables_are_a_503_that_names_no_table(broken: tuple[HttpApi, int]) -> None:
    api, _ = broken
    answer = api.get("/v1/topics/orders/partitions/0/records?offset=0")
    assert answer.status == 503, answer.body
    assert answer.body["message"] == "cluster metadata is unavailable; retry later"
    assert_nothing_internal(answer)


def test_an_unreachable_group_store_is_a_503_that_names_no_table(broken: tuple[HttpApi, int],
                                                                   http_stack: LocalStack) -> None:
    api, _ = broken
    dynamodb = boto3.session.Session().client("dynamodb", **http_stack.aws.boto3_kwargs())
    for table in ("http_groups", "http_group_offsets"):
        dynamodb.delete_table(TableName=f"{PREFIX}{table}")
    for answer in (api.get("/v1/groups/g1"), api.get("/v1/groups/g1/offsets")):
        assert answer.status == 503, answer.body
        assert answer.body["message"] == "the group store is unavailable; retry later"
        assert_nothing_internal(answer)
