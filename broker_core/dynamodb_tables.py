"""Floe's DynamoDB tables through pynamodb: binding models to a deployment, and creating tables.

Every subsystem that owns tables (cluster metadata, consumer groups, the segment manifest, the HTTP
front ends' groups) binds its model classes to one table prefix, region and endpoint (pynamodb's
Meta is class-level, so each binding is a subclass), creates the tables at start-up when missing,
on-demand billed, and waits until they are ACTIVE. Brokers start together, so a table another
process is creating at the same moment (ResourceInUseException) is waited for rather than treated
as an error.

Every binding gets the same botocore client settings: timeouts, and botocore's standard retry mode
(pynamodb turns ``max_retry_attempts`` into ``{"mode": "standard", "total_max_attempts": 1 +
MAX_RETRY_ATTEMPTS}``), which retries throttling and transient errors of single requests. This
module also holds what every store does with pynamodb's answers: `condition_failed` tells a lost
condition from other failures, `transact` runs a transaction and retries it while it conflicts
with others (``broker_core.retry``), and `failures_as` turns the failures no condition explains
into a store's "unavailable" error.

The shared connections count their calls by table and operation (broker_core.metrics.aws_calls):
`ObservedConnection` hooks each botocore client it builds.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, ParamSpec, TypeVar

import botocore.session
from botocore.exceptions import BotoCoreError
from pynamodb.connection import Connection
from pynamodb.exceptions import PynamoDBException, TableError, TransactWriteError
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from broker_core.aws import AwsSettings
from broker_core.metrics.aws_calls import DYNAMODB_CALLS
from broker_core.retry import LostRace, retry_lost_races

TABLE_ACTIVE_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 10
MAX_RETRY_ATTEMPTS = 3

CONDITION_FAILED = "ConditionalCheckFailed"  # cancellation reason of a transaction item whose condition failed
_CONDITION_FAILED_EXCEPTION = "ConditionalCheckFailedException"
_RETRIABLE_CANCELLATIONS = frozenset({"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"})

_P = ParamSpec("_P")
_R = TypeVar("_R")


def bind_model(base: type[Model], settings: AwsSettings, table: str, *,
               max_pool_connections: int | None = None) -> type:
    """A subclass of ``base`` whose Meta names table ``settings.table_prefix + table`` at ``settings``' endpoint."""
    meta = {
        "table_name": settings.table_prefix + table,
        "region": settings.region,
        "host": settings.endpoint_url,
        "billing_mode": "PAY_PER_REQUEST",
        "connect_timeout_seconds": CONNECT_TIMEOUT_S,
        "read_timeout_seconds": READ_TIMEOUT_S,
        "max_retry_attempts": MAX_RETRY_ATTEMPTS,
    }
    if max_pool_connections is not None:
        meta["max_pool_connections"] = max_pool_connections
    return type(base.__name__, (base,), {"Meta": type("Meta", (), meta), "__module__": base.__module__})


_SHARED_SESSION: botocore.session.Session | None = None
# botocore sessions are not thread-safe while they build clients (pynamodb keeps one per thread and
# connection for that reason); the shared one builds one client at a time.
_SESSION_LOCK = threading.RLock()


class ObservedConnection(Connection):
    """A pynamodb Connection whose botocore clients report their calls to the process's DynamoDB counters.

    Every connection of the process builds its client from one botocore session, so the DynamoDB
    service model and endpoint rules are loaded and parsed once (about 0.13 s of CPU each time; a
    broker holds seven connections, and a stack of brokers starting at once paid it in every one).
    """

    _observed: object = None

    @property
    def session(self) -> botocore.session.Session:
        global _SHARED_SESSION
        with _SESSION_LOCK:
            if _SHARED_SESSION is None:
                _SHARED_SESSION = botocore.session.get_session()
            return _SHARED_SESSION

    @property
    def client(self) -> Any:
        if self._client is None:
            with _SESSION_LOCK:
                super().client  # noqa: B018 (builds it)
        client = super().client
        if client is not self._observed:  # pynamodb rebuilds the client when credentials went missing
            DYNAMODB_CALLS.watch(client.meta.events)
            self._observed = client
        return client


def share_connection(models: Iterable[type[Model]], settings: AwsSettings, *,
                     max_pool_connections: int | None = None) -> Connection:
    """Point every bound model (and so transactions on the returned Connection) at one botocore client.

    By default each model class builds its own client, and creating one costs about 0.1 s of CPU,
    which a Lambda cold start or a test run would pay once per model.
    """
    options = {"max_pool_connections": max_pool_connections} if max_pool_connections is not None else {}
    connection = ObservedConnection(region=settings.region, host=settings.endpoint_url,
                                    connect_timeout_seconds=CONNECT_TIMEOUT_S, read_timeout_seconds=READ_TIMEOUT_S,
                                    max_retry_attempts=MAX_RETRY_ATTEMPTS, **options)
    tables_added: set[str] = set()
    for model in models:
        # pynamodb builds a model's TableConnection lazily in _get_connection (pinned pynamodb 6.x);
        # its inner Connection has not created a client yet, so swapping it costs nothing.
        table_connection = model._get_connection()
        if model.Meta.table_name not in tables_added:
            connection.add_meta_table(table_connection.get_meta_table())
            tables_added.add(model.Meta.table_name)
        table_connection.connection = connection
    return connection


def ensure_tables(models: Iterable[type[Model]], unavailable: type[Exception]) -> None:
    """Create each model's table if missing and wait until all are ACTIVE.

    Raises ``unavailable(message)`` when a table is not ACTIVE within TABLE_ACTIVE_TIMEOUT_S; pynamodb
    and botocore errors propagate for the caller to map as it maps its other DynamoDB failures.
    """
    models = list(models)
    for model in models:
        if not model.exists():
            try:
                model.create_table(wait=False, billing_mode="PAY_PER_REQUEST")
            except TableError as err:
                if err.cause_response_code != "ResourceInUseException":
                    raise
    deadline = time.monotonic() + TABLE_ACTIVE_TIMEOUT_S
    for model in models:
        wait_until_active(model.Meta.table_name, lambda model=model: model.describe_table().get("TableStatus"),
                          deadline, unavailable)


def wait_until_active(table: str, status: Callable[[], str | None], deadline: float,
                      unavailable: type[Exception]) -> None:
    """Poll ``status()`` until it says ACTIVE; ``unavailable(message)`` once ``time.monotonic()`` passes ``deadline``."""
    while status() != "ACTIVE":
        if time.monotonic() > deadline:
            raise unavailable(f"table {table} did not become ACTIVE")
        time.sleep(0.1)


def condition_failed(err: PynamoDBException) -> bool:
    """Whether DynamoDB refused a write (put, update, delete or transaction) because a condition did not hold."""
    if isinstance(err, TransactWriteError):
        return CONDITION_FAILED in cancellation_codes(err)
    return err.cause_response_code == _CONDITION_FAILED_EXCEPTION


def cancellation_codes(err: TransactWriteError) -> list[str | None]:
    """The cancellation code of each item of a cancelled transaction, in the order they were added."""
    return [reason.code if reason is not None else None for reason in err.cancellation_reasons or ()]


def transact(connection: Connection, build: Callable[[TransactWrite], None],
             exhausted: Callable[[int], Exception]) -> list[str | None] | None:
    """Run the transaction ``build`` fills on ``connection``; None when it committed.

    When a condition failed, returns the cancellation code of each item in the order ``build``
    added them (CONDITION_FAILED for the failed ones, None for the others); nothing was written.
    Conflicts with other transactions and throttling are retried (``broker_core.retry``); when
    they outlast every attempt, raises ``exhausted(attempts)``. botocore gives each
    TransactWriteItems call an idempotency token that its own network retries reuse, so a commit
    whose reply was lost is not mistaken for a failed condition on the retry.
    """

    def attempt() -> list[str | None] | None:
        try:
            with TransactWrite(connection=connection) as transaction:
                build(transaction)
            return None
        except TransactWriteError as err:
            # Not err.cause_response_code: it raises AttributeError when the cause has no response
            # (a read timeout), which must surface as the DynamoDB failure it is.
            response = getattr(err.cause, "response", None)
            code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
            if code != "TransactionCanceledException":
                raise
            codes = cancellation_codes(err)
            if CONDITION_FAILED in codes:
                return codes
            if not _RETRIABLE_CANCELLATIONS.intersection(c for c in codes if c is not None):
                raise
            raise LostRace(str(err)) from err

    return retry_lost_races(attempt, exhausted)


def failures_as(unavailable: type[Exception], passes: type[Exception]) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """A decorator: pynamodb/botocore failures become ``unavailable("<method>: <error>")``; ``passes`` errors pass."""

    def decorate(method: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(method)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return method(*args, **kwargs)
            except passes:
                raise
            except (PynamoDBException, BotoCoreError) as err:
                raise unavailable(f"{method.__name__}: {err}") from err

        return wrapper

    return decorate
