"""DynamoDB calls counted by table and operation, from botocore's events.

Every attempt botocore sends counts, its retries included (a throttled request that botocore retries
shows as a throttle and another request): ``floe_dynamodb_requests_total``, and of those
``floe_dynamodb_throttles_total`` (ThrottlingException, ProvisionedThroughputExceededException,
RequestLimitExceeded, or a transaction cancelled for throttling), ``floe_dynamodb_conditional_failures_total``
(ConditionalCheckFailedException, or a transaction cancelled because a condition failed: a lost race,
the fencing Floe relies on) and ``floe_dynamodb_errors_total`` (any other error). A transaction's
table label is the tables it writes, joined by ``+``.

The counters are prometheus-client's own (they take a lock) because DynamoDB is called from worker
threads; one set per process, since the botocore clients are the process's. `watch` hooks a client's
event emitter; broker_core.dynamodb_tables calls it for each client it builds.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter

_THROTTLES = frozenset({"ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded",
                        "ThrottlingError", "ProvisionedThroughputExceeded"})
_CONDITION_FAILED = frozenset({"ConditionalCheckFailedException", "ConditionalCheckFailed"})
_CONTEXT_KEY = "floe_tables"


def _tables(params: dict[str, Any]) -> str:
    if "TableName" in params:
        return str(params["TableName"])
    names: list[str] = []
    for item in params.get("TransactItems", ()):
        for operation in item.values():
            name = operation.get("TableName")
            if name and name not in names:
                names.append(name)
    names += [name for name in params.get("RequestItems", {}) if name not in names]
    return "+".join(sorted(names)) or "-"


class DynamoDBCalls:
    """The process's DynamoDB call counters and the botocore handlers that update them."""

    def __init__(self) -> None:
        labels = ("table", "operation")
        self.requests = Counter("floe_dynamodb_requests", "DynamoDB requests sent, retries included", labels,
                                registry=None)
        self.throttles = Counter("floe_dynamodb_throttles", "DynamoDB requests refused for throughput", labels,
                                 registry=None)
        self.conditional_failures = Counter(
            "floe_dynamodb_conditional_failures", "DynamoDB writes refused because their condition failed", labels,
            registry=None)
        self.errors = Counter("floe_dynamodb_errors", "DynamoDB requests failed otherwise (network, 5xx, validation)",
                              labels, registry=None)

    def collectors(self) -> list[Counter]:
        return [self.requests, self.throttles, self.conditional_failures, self.errors]

    def watch(self, events: Any) -> None:
        """Count the calls of the botocore client whose ``meta.events`` is ``events``."""
        # unique ids: hooking one client twice (two threads building it at once) still counts once
        events.register("before-parameter-build.dynamodb", self._before, unique_id="floe-dynamodb-calls-tables")
        events.register("response-received.dynamodb", self._received, unique_id="floe-dynamodb-calls-count")

    @staticmethod
    def _before(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context[_CONTEXT_KEY] = _tables(params)

    def _received(self, context: dict[str, Any], parsed_response: dict[str, Any] | None = None,
                  exception: Exception | None = None, event_name: str = "", **_: Any) -> None:
        table = context.get(_CONTEXT_KEY, "-")
        operation = event_name.rsplit(".", 1)[-1]
        self.requests.labels(table, operation).inc()
        if exception is not None:
            self.errors.labels(table, operation).inc()
            return
        error = (parsed_response or {}).get("Error") or {}
        code = str(error.get("Code", ""))
        if not code:
            return
        reasons = {str(r.get("Code", "")) for r in (parsed_response or {}).get("CancellationReasons", ()) or ()}
        if code in _THROTTLES or reasons & _THROTTLES:
            self.throttles.labels(table, operation).inc()
        elif code in _CONDITION_FAILED or reasons & _CONDITION_FAILED:
            self.conditional_failures.labels(table, operation).inc()
        else:
            self.errors.labels(table, operation).inc()


DYNAMODB_CALLS = DynamoDBCalls()
