"""The transaction, quota and ACL stores, and the HTTP front end's quota buckets, count their DynamoDB
calls like every other store.

No DynamoDB here: each store's botocore client is answered from botocore's own ``before-send`` event
(the request is built, signed and its answer parsed as usual, only the HTTP exchange is skipped), so
the counters see what they would see from DynamoDB.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from broker_core.aws import AwsSettings
from broker_core.metrics.aws_calls import DYNAMODB_CALLS
from broker_core.quotas.store import QUOTAS_TABLE, QuotaStore
from broker_core.security.acl_store import ACLS_TABLE, AclStore
from broker_core.transactions.store import TRANSACTIONS_TABLE, TransactionStore
from functions.quotas import BUCKETS_TABLE, HttpQuotas


class _Body:
    def __init__(self, content: bytes) -> None:
        self.content = content

    def stream(self, **_: Any) -> list[bytes]:
        return [self.content]


def _answer(status: int, body: dict[str, Any]) -> AWSResponse:
    return AWSResponse("http://dynamodb.test/", status, {"Content-Type": "application/x-amz-json-1.0"},
                       _Body(json.dumps(body).encode()))


CONDITION_FAILED = (400, {"__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
                          "message": "The conditional request failed"})


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch) -> AwsSettings:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return AwsSettings(endpoint_url="http://dynamodb.test", region="us-east-1", bucket="unused",
                       table_prefix=f"t{uuid.uuid4().hex[:8]}-")


def answering(model: Any, answers: dict[str, tuple[int, dict[str, Any]]]) -> None:
    """Answer the model's DynamoDB operations (by name) with (status, JSON body) instead of sending them."""
    def send(request: Any, event_name: str, **_: Any) -> AWSResponse:
        return _answer(*answers[event_name.rsplit(".", 1)[-1]])

    model._get_connection().connection.client.meta.events.register("before-send.dynamodb", send)


def counted(counter: Any, table: str, operation: str) -> float:
    return sum(s.value for m in counter.collect() for s in m.samples
               if s.name.endswith("_total") and s.labels == {"table": table, "operation": operation})


def count_change(table: str, operation: str, call: Callable[[], object]) -> tuple[float, float]:
    """(requests, conditional failures) that ``call`` added for ``table`` and ``operation``."""
    before = counted(DYNAMODB_CALLS.requests, table, operation), counted(DYNAMODB_CALLS.conditional_failures,
                                                                           table, operation)
    call()
    return (counted(DYNAMODB_CALLS.requests, table, operation) - before[0],
            counted(DYNAMODB_CALLS.conditional_failures, table, operation) - before[1])


def test_the_transaction_store_counts_its_reads_and_its_lost_conditions(settings: AwsSettings) -> None:
    store = TransactionStore(settings)
    answering(store.model, {"GetItem": (200, {}), "PutItem": CONDITION_FAILED})
    table = settings.table_prefix + TRANSACTIONS_TABLE
    assert count_change(table, "GetItem", lambda: store.read("txn-a")) == (1, 0)
    lost = []
    assert count_change(table, "PutItem", lambda: lost.append(store.create_lease("txn-a", 1, 60_000))) == (1, 1)
    assert lost == [None]  # another broker created the lease first


def test_the_quota_store_counts_its_scans(settings: AwsSettings) -> None:
    store = QuotaStore(settings)
    answering(store.model, {"Scan": (200, {"Items": [], "Count": 0, "ScannedCount": 0})})
    assert count_change(settings.table_prefix + QUOTAS_TABLE, "Scan", store.load) == (1, 0)


def test_the_acl_store_counts_its_scans(settings: AwsSettings) -> None:
    store = AclStore(settings)
    answering(store.model, {"Scan": (200, {"Items": [], "Count": 0, "ScannedCount": 0})})
    loaded = []
    assert count_change(settings.table_prefix + ACLS_TABLE, "Scan", lambda: loaded.append(store.load())) == (1, 0)
    assert loaded == [[]]


def test_the_http_quota_buckets_count_their_reads_and_writes(settings: AwsSettings) -> None:
    quotas = HttpQuotas(settings)
    bucket = {"bucket": {"S": "producer_byte_rate|u|"}, "tokens": {"N": "100"}, "updated_ms": {"N": "1"},
              "version": {"N": "4"}, "expiration": {"N": "1"}}
    answering(quotas.model, {"GetItem": (200, {"Item": bucket}), "PutItem": (200, {})})
    table = settings.table_prefix + BUCKETS_TABLE
    tokens = []
    assert count_change(table, "GetItem", lambda: tokens.append(quotas._tokens("producer_byte_rate|u|", 1000.0))) \
        == (1, 0)
    assert tokens == [1000.0]  # the bucket read back, refilled to its burst
    # a charge reads the bucket and writes it back conditional on its version
    assert count_change(table, "PutItem", lambda: quotas._take("producer_byte_rate|u|", 1000.0, 10)) == (1, 0)
