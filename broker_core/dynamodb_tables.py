"""Floe's DynamoDB tables through pynamodb: binding models to a deployment, and creating tables.

Every subsystem that owns tables (cluster metadata, consumer groups, the segment manifest, the HTTP
front ends' groups) binds its model classes to one table prefix, region and endpoint (pynamodb's
Meta is class-level, so each binding is a subclass), creates the tables at start-up when missing,
on-demand billed, and waits until they are ACTIVE. Brokers start together, so a table another
process is creating at the same moment (ResourceInUseException) is waited for rather than treated
as an error.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pynamodb.connection import Connection
from pynamodb.exceptions import TableError
from pynamodb.models import Model

from broker_core.aws import AwsSettings

TABLE_ACTIVE_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 10
MAX_RETRY_ATTEMPTS = 3


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


def share_connection(models: Iterable[type[Model]], settings: AwsSettings, *,
                     max_pool_connections: int | None = None) -> Connection:
    """Point every bound model (and so transactions on the returned Connection) at one botocore client.

    By default each model class builds its own client, and creating one costs about 0.1 s of CPU,
    which a Lambda cold start or a test run would pay once per model.
    """
    options = {"max_pool_connections": max_pool_connections} if max_pool_connections is not None else {}
    connection = Connection(region=settings.region, host=settings.endpoint_url,
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
        while model.describe_table().get("TableStatus") != "ACTIVE":
            if time.monotonic() > deadline:
                raise unavailable(f"table {model.Meta.table_name} did not become ACTIVE")
            time.sleep(0.1)
