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

BatchGetItem takes at most 100 keys a call, so more brokers are read in several calls; keys that
DynamoDB leaves unprocessed (throttling) are asked again with backoff (``broker_core.retry``), and
when some are still left the read fails with MetadataUnavailableError, as a failed Scan did: the
duties skip that pass and the next read comes one interval later.

Thread-safety: `read_cluster_items` is a synchronous DynamoDB call, run from worker threads; its
results are immutable.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pynamodb.exceptions import PynamoDBException

from broker_core.metadata.errors import MetadataUnavailableError
from broker_core.metadata.models import CONTROLLER_ITEM, METADATA_VERSION_ITEM, BoundModels
from broker_core.metadata.state import BrokerState, ControllerLeaseState
from broker_core.retry import RetryPolicy

MAX_KEYS_PER_CALL = 100  # DynamoDB's limit for one BatchGetItem
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
    consistent reads, in as few BatchGetItem calls as DynamoDB allows (one for up to 98 brokers).

    ``at_ms`` is when the caller began the read, on its monotonic clock. Raises
    MetadataUnavailableError when DynamoDB fails or leaves keys unprocessed after the retries.
    """
    cluster_table = models.controller_lease.Meta.table_name
    brokers_table = models.broker.Meta.table_name
    asked = frozenset(broker_ids)
    pending: list[tuple[str, dict[str, Any]]] = [(cluster_table, {"item": {"S": METADATA_VERSION_ITEM}})]
    if lease:
        pending.append((cluster_table, {"item": {"S": CONTROLLER_ITEM}}))
    pending.extend((brokers_table, {"broker_id": {"N": str(b)}}) for b in sorted(asked))
    answers: dict[str, list[dict[str, Any]]] = {cluster_table: [], brokers_table: []}

    def attempt() -> None:
        nonlocal pending
        left: list[tuple[str, dict[str, Any]]] = []
        for chunk in _chunks(pending, MAX_KEYS_PER_CALL):
            request: dict[str, dict[str, Any]] = {}
            for table, key in chunk:
                request.setdefault(table, {"Keys": [], "ConsistentRead": True})["Keys"].append(key)
            if brokers_table in request:
                request[brokers_table]["ProjectionExpression"] = _BROKER_FIELDS
                request[brokers_table]["ExpressionAttributeNames"] = {"#state": "state"}
            answer = models.connection.dispatch("BatchGetItem", {"RequestItems": request})
            for table, items in answer.get("Responses", {}).items():
                answers[table].extend(items)
            for table, unprocessed in answer.get("UnprocessedKeys", {}).items():
                left.extend((table, key) for key in unprocessed.get("Keys", ()))
        pending = left
        if left:
            raise _KeysLeft(f"{len(left)} keys unprocessed")

    try:
        UNPROCESSED_KEYS.call(attempt, lambda error: isinstance(error, _KeysLeft))
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
    return ClusterItems(version=version, lease_read=lease, lease=lease_state,
                        brokers=BrokerHeartbeats(at_ms=at_ms, asked=asked, found=tuple(found)))


def _chunks(keys: list[tuple[str, dict[str, Any]]], size: int) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    for start in range(0, len(keys), size):
        yield keys[start:start + size]
