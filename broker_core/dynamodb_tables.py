"""Creating Floe's DynamoDB tables from pynamodb models: idempotent, and safe from many processes.

Every subsystem that owns tables (cluster metadata, consumer groups, the segment manifest, the HTTP
front ends' groups) creates them at start-up when missing, on-demand billed, and waits until they are
ACTIVE. Brokers start together, so a table another process is creating at the same moment
(ResourceInUseException) is waited for rather than treated as an error.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pynamodb.exceptions import TableError
from pynamodb.models import Model

TABLE_ACTIVE_TIMEOUT_S = 60.0


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
