"""The periodic read of the cluster's liveness items: the metadata version, the controller lease and the
heartbeat of each broker named, in one consistent BatchGetItem across the cluster and brokers tables.

Every broker reads these every controller check interval (500 ms by default): the version for its
metadata poll, the lease to take it over when it lapses (unless it holds it), and the brokers'
heartbeat counters, which the controller watches to fence a broker whose counter stalls and every
other broker watches so that on taking over it can fence at once (``Controller.observe``). Before,
that was a BatchGetItem of the version and lease and a Scan of the brokers table per interval; each
DynamoDB call costs a few milliseconds of client CPU (botocore's request path), which made these
reads most of an idle broker's CPU.

A read names the brokers it asks for (those the broker's metadata image and its observations know),
where the Scan returned every registration. A broker registered since is in the metadata change
sequence, so it is asked for from the read after the poll that applies its registration; a broker
asked for that has no registration (never the case in a running cluster: registrations are
replaced, not deleted) comes back as not found, which `BrokerHeartbeats.missing` tells apart from a
key DynamoDB did not process. Only what observation needs is read (``ProjectionExpression``): id,
epoch, state and heartbeat, not the endpoints. The items are parsed from DynamoDB's wire form here,
not through pynamodb's models, which cost more CPU than the few fields are worth at this rate.

Reading by key costs DynamoDB read units per item (one per consistent read of up to 4 KB), where a
Scan costs one per 4 KB of all the items it returns together: the heartbeats of a few brokers by key
cost a few units more per read than a Scan, those of 54 brokers (the cost model's 1 GiB/s cluster) 56
units against about 5, every 500 ms on every broker. So the brokers are read by key only while there
are at most `KEYED_HEARTBEATS_MAX_BROKERS` of them; a larger cluster reads the version and lease by key
and the heartbeats by a consistent Scan with the same projection (two calls, as before this read).

The BatchGetItem names at most 2 + `KEYED_HEARTBEATS_MAX_BROKERS` keys, within its limit of 100; keys
that DynamoDB leaves unprocessed (throttling) are asked again with backoff (``broker_core.retry``), and
when some are still left the read fails with MetadataUnavailableError, as a failed Scan did: the
duties skip that pass and the next read comes one interval later.

Thread-safety: `read_cluster_items` is a synchronous DynamoDB call, run from worker threads; its
results are immutable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pynamodb.exceptions import PynamoDBException

from broker_core.metadata.errors import MetadataUnavailableError
from broker_core.metadata.models import CONTROLLER_ITEM, METADATA_VERSION_ITEM, BoundModels
from broker_core.metadata.state import BrokerState, ControllerLeaseState
from broker_core.retry import RetryPolicy

KEYED_HEARTBEATS_MAX_BROKERS = 4
"""Up to this many brokers, their heartbeats are read by key in the BatchGetItem of the cluster items;
beyond, by a Scan of the brokers table (see the module doc: read units)."""
UNPROCESSED_KEYS = RetryPolicy(attempts=4, base_s=0.02, cap_s=0.2)
"""How often keys DynamoDB left unprocessed are asked again before the read fails."""

_BROKER_FIELDS = "broker_id, broker_epoch, #state, heartbeat"  # "state" is a DynamoDB reserved word


@dataclass(frozen=True)
class BrokerHeartbeat:
    """What observing a broker's liveness needs of its registration."""

    broker_id: int
    broker_epoch: int
    state: BrokerState
    heartbeat: int


@dataclass(frozen=True)
class BrokerHeartbeats:
    """The registrations of the brokers asked for, as read at ``at_ms`` (the reader's monotonic clock,
    when the read began): the clock observation times them on."""

    at_ms: float
    asked: frozenset[int]
    found: tuple[BrokerHeartbeat, ...]  # sorted by broker id

    @property
    def missing(self) -> frozenset[int]:
        """Brokers asked for that have no registration."""
        return self.asked - {b.broker_id for b in self.found}


@dataclass(frozen=True)
class ClusterItems:
    """One periodic read (`read_cluster_items`)."""

    version: int  # the metadata version, 0 before the first change
    lease_read: bool  # whether the lease was asked for
    lease: ControllerLeaseState | None  # the lease item; None if not asked or no broker ever took it
    brokers: BrokerHeartbeats

    @property
    def at_ms(self) -> float:
        """When the read began, on the reader's monotonic clock."""
        return self.brokers.at_ms


class _KeysLeft(Exception):
    """Keys DynamoDB did not process in this attempt."""


def read_cluster_items(models: BoundModels, broker_ids: Iterable[int], *, lease: bool, at_ms: float) -> ClusterItems:
    """The metadata version, the lease (if ``lease``) and the registrations of ``broker_ids``, all
    consistent reads, in one BatchGetItem (with a Scan of the brokers table beyond
    `KEYED_HEARTBEATS_MAX_BROKERS` brokers).

    ``at_ms`` is when the caller began the read, on its monotonic clock. Raises
    MetadataUnavailableError when DynamoDB fails or leaves keys unprocessed after the retries.
    """
    cluster_table = models.controller_lease.Meta.table_name
    brokers_table = models.broker.Meta.table_name
    asked = frozenset(broker_ids)
    scan = len(asked) > KEYED_HEARTBEATS_MAX_BROKERS
    pending: list[tuple[str, dict[str, Any]]] = [(cluster_table, {"item": {"S": METADATA_VERSION_ITEM}})]
    if lease:
        pending.append((cluster_table, {"item": {"S": CONTROLLER_ITEM}}))
    if not scan:
        pending.extend((brokers_table, {"broker_id": {"N": str(b)}}) for b in sorted(asked))
    answers: dict[str, list[dict[str, Any]]] = {cluster_table: [], brokers_table: []}

    def attempt() -> None:
        nonlocal pending
        request: dict[str, dict[str, Any]] = {}
        for table, key in pending:
            request.setdefault(table, {"Keys": [], "ConsistentRead": True})["Keys"].append(key)
        if brokers_table in request:
            request[brokers_table]["ProjectionExpression"] = _BROKER_FIELDS
            request[brokers_table]["ExpressionAttributeNames"] = {"#state": "state"}
        answer = models.connection.dispatch("BatchGetItem", {"RequestItems": request})
        for table, items in answer.get("Responses", {}).items():
            answers[table].extend(items)
        pending = [(table, key) for table, unprocessed in answer.get("UnprocessedKeys", {}).items()
                   for key in unprocessed.get("Keys", ())]
        if pending:
            raise _KeysLeft(f"{len(pending)} keys unprocessed")

    try:
        UNPROCESSED_KEYS.call(attempt, lambda error: isinstance(error, _KeysLeft))
        if scan:
            answers[brokers_table] = _scan_heartbeats(models, brokers_table)
    except _KeysLeft as err:
        raise MetadataUnavailableError(f"read cluster items: {err} after {UNPROCESSED_KEYS.attempts} attempts") from err
    except (PynamoDBException, BotoCoreError, ClientError) as err:
        raise MetadataUnavailableError(f"read cluster items: {err}") from err
    version, lease_state = 0, None
    for raw in answers[cluster_table]:
        if raw["item"]["S"] == METADATA_VERSION_ITEM:
            version = int(raw.get("version", {"N": "0"})["N"])
        else:
            lease_state = ControllerLeaseState(holder=int(raw["holder"]["N"]),
                                               controller_epoch=int(raw["controller_epoch"]["N"]),
                                               heartbeat=int(raw["heartbeat"]["N"]),
                                               lease_duration_ms=int(raw["lease_duration_ms"]["N"]))
    found = sorted((BrokerHeartbeat(broker_id=int(raw["broker_id"]["N"]), broker_epoch=int(raw["broker_epoch"]["N"]),
                                    state=BrokerState(raw["state"]["S"]), heartbeat=int(raw["heartbeat"]["N"]))
                    for raw in answers[brokers_table]), key=lambda b: b.broker_id)
    if scan:  # a Scan finds every registration: each one found counts as asked for
        asked = asked | {b.broker_id for b in found}
    return ClusterItems(version=version, lease_read=lease, lease=lease_state,
                        brokers=BrokerHeartbeats(at_ms=at_ms, asked=asked, found=tuple(found)))


def _scan_heartbeats(models: BoundModels, brokers_table: str) -> list[dict[str, Any]]:
    """Every registration's heartbeat fields, by a consistent Scan of the brokers table (all its pages)."""
    request: dict[str, Any] = {"TableName": brokers_table, "ConsistentRead": True,
                               "ProjectionExpression": _BROKER_FIELDS, "ExpressionAttributeNames": {"#state": "state"}}
    items: list[dict[str, Any]] = []
    while True:
        answer = models.connection.dispatch("Scan", request)
        items.extend(answer.get("Items", ()))
        if "LastEvaluatedKey" not in answer:
            return items
        request["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

