"""The periodic read of version, lease and heartbeats (`read_cluster_items`) and observation from it.

Unit tests: DynamoDB is a dict answering BatchGetItem as DynamoDB's API does (at most 100 keys a call,
keys it chooses to leave unprocessed), so the splitting and retrying can be seen call by call. The
same read against moto is in test_controller_lease.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from broker_core.aws import AwsSettings
from broker_core.metadata.cluster_reads import BrokerHeartbeat, BrokerHeartbeats, read_cluster_items
from broker_core.metadata.controller import Controller, ControllerLease
from broker_core.metadata.errors import MetadataUnavailableError
from broker_core.metadata.models import CONTROLLER_ITEM, METADATA_VERSION_ITEM, BoundModels, bind_models
from broker_core.metadata.state import NO_HOLDER, BrokerState, ControllerLeaseState
from broker_core.metadata.store import MetadataStore

SETTINGS = AwsSettings(endpoint_url="http://127.0.0.1:9", region="us-east-1", bucket="b", table_prefix="unit-")
CLUSTER, BROKERS = "unit-cluster", "unit-brokers"
SESSION_MS = 300
SCAN_PAGE = 4


class TableDict:
    """BatchGetItem over items held in memory; the first ``unprocessed`` keys asked are left unprocessed."""

    def __init__(self, unprocessed: int = 0) -> None:
        self.items: dict[str, dict[str, dict[str, Any]]] = {CLUSTER: {}, BROKERS: {}}
        self.unprocessed = unprocessed
        self.calls: list[dict[str, Any]] = []

    def put_broker(self, broker_id: int, epoch: int, heartbeat: int, state: BrokerState = BrokerState.RUNNING) -> None:
        self.items[BROKERS][str(broker_id)] = {
            "broker_id": {"N": str(broker_id)}, "broker_epoch": {"N": str(epoch)}, "state": {"S": state.value},
            "heartbeat": {"N": str(heartbeat)}, "host": {"S": "127.0.0.1"}, "port": {"N": "9092"}}

    def dispatch(self, operation: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(kwargs)
        if operation == "Scan":
            return self.scan(kwargs)
        assert operation == "BatchGetItem"
        request = kwargs["RequestItems"]
        assert sum(len(r["Keys"]) for r in request.values()) <= 100
        responses: dict[str, list[dict[str, Any]]] = {}
        unprocessed: dict[str, dict[str, Any]] = {}
        for table, asked in request.items():
            assert asked["ConsistentRead"] is True
            for key in asked["Keys"]:
                if self.unprocessed:
                    self.unprocessed -= 1
                    unprocessed.setdefault(table, {"Keys": []})["Keys"].append(key)
                    continue
                item = self.items[table].get(next(iter(next(iter(key.values())).values())))
                if item is not None:
                    responses.setdefault(table, []).append(_projected(item, asked))
        return {"Responses": responses, "UnprocessedKeys": unprocessed}

    def scan(self, request: dict[str, Any]) -> dict[str, Any]:
        """A consistent Scan of the brokers table, ``SCAN_PAGE`` items a page."""
        assert request["TableName"] == BROKERS and request["ConsistentRead"] is True
        keys = sorted(self.items[BROKERS], key=int)
        start = keys.index(request["ExclusiveStartKey"]["broker_id"]["N"]) + 1 if "ExclusiveStartKey" in request else 0
        page = keys[start:start + SCAN_PAGE]
        answer: dict[str, Any] = {"Items": [_projected(self.items[BROKERS][k], request) for k in page]}
        if start + SCAN_PAGE < len(keys):
            answer["LastEvaluatedKey"] = {"broker_id": {"N": page[-1]}}
        return answer


def _projected(item: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    if "ProjectionExpression" not in request:
        return item
    names = [request.get("ExpressionAttributeNames", {}).get(n.strip(), n.strip())
             for n in request["ProjectionExpression"].split(",")]
    return {n: v for n, v in item.items() if n in names}


@pytest.fixture
def dynamodb() -> TableDict:
    tables = TableDict()
    tables.items[CLUSTER][METADATA_VERSION_ITEM] = {"item": {"S": METADATA_VERSION_ITEM}, "version": {"N": "7"}}
    tables.items[CLUSTER][CONTROLLER_ITEM] = {
        "item": {"S": CONTROLLER_ITEM}, "holder": {"N": "1"}, "controller_epoch": {"N": "3"},
        "heartbeat": {"N": "12"}, "lease_duration_ms": {"N": "10000"}}
    return tables


@pytest.fixture
def models(dynamodb: TableDict) -> BoundModels:
    return dataclasses.replace(bind_models(SETTINGS), connection=dynamodb)


def test_one_call_reads_the_version_the_lease_and_each_brokers_heartbeat(dynamodb, models):
    dynamodb.put_broker(1, epoch=4, heartbeat=20)
    dynamodb.put_broker(2, epoch=5, heartbeat=30, state=BrokerState.SHUTTING_DOWN)

    read = read_cluster_items(models, [2, 1], lease=True, at_ms=123.0)

    assert len(dynamodb.calls) == 1
    assert read.version == 7 and read.at_ms == 123.0
    assert read.lease_read and read.lease == ControllerLeaseState(1, 3, 12, 10_000)
    assert read.brokers.found == (BrokerHeartbeat(1, 4, BrokerState.RUNNING, 20),
                                  BrokerHeartbeat(2, 5, BrokerState.SHUTTING_DOWN, 30))
    assert read.brokers.missing == frozenset()


def test_a_lease_holder_reads_no_lease_and_a_first_read_finds_version_zero(dynamodb, models):
    del dynamodb.items[CLUSTER][METADATA_VERSION_ITEM]
    read = read_cluster_items(models, [], lease=False, at_ms=0.0)
    assert (read.version, read.lease_read, read.lease, read.brokers.found) == (0, False, None, ())
    assert [list(call["RequestItems"]) for call in dynamodb.calls] == [[CLUSTER]]


def test_a_broker_without_a_registration_is_missing_not_found(dynamodb, models):
    dynamodb.put_broker(1, epoch=4, heartbeat=20)
    read = read_cluster_items(models, [1, 9], lease=False, at_ms=0.0)
    assert [b.broker_id for b in read.brokers.found] == [1]
    assert read.brokers.missing == {9}


def test_beyond_four_brokers_the_heartbeats_are_scanned_every_page_and_every_registration_counts(dynamodb, models):
    # Read units: by key one per broker, a Scan one per 4 KB of them all (the module doc).
    for broker_id in range(10):
        dynamodb.put_broker(broker_id, epoch=broker_id + 1, heartbeat=broker_id, state=BrokerState.RUNNING)
    read = read_cluster_items(models, [0, 1, 2, 3, 4, 42], lease=True, at_ms=5.0)
    batch, *scans = dynamodb.calls
    assert list(batch["RequestItems"]) == [CLUSTER] and len(batch["RequestItems"][CLUSTER]["Keys"]) == 2
    assert len(scans) == 3  # pages of 4, 4 and 2
    assert [b.broker_id for b in read.brokers.found] == list(range(10))
    assert read.brokers.found[9] == BrokerHeartbeat(9, 10, BrokerState.RUNNING, 9)
    assert read.brokers.missing == {42}  # asked for, not registered: forgotten, as the Scan before this read did
    assert read.version == 7 and read.lease is not None and read.at_ms == 5.0


def test_up_to_four_brokers_are_read_by_key_in_the_one_call(dynamodb, models):
    for broker_id in range(10):
        dynamodb.put_broker(broker_id, epoch=1, heartbeat=0)
    read = read_cluster_items(models, [0, 1, 2, 3], lease=False, at_ms=0.0)
    assert len(dynamodb.calls) == 1 and len(dynamodb.calls[0]["RequestItems"][BROKERS]["Keys"]) == 4
    assert [b.broker_id for b in read.brokers.found] == [0, 1, 2, 3]


def test_unprocessed_keys_are_asked_again(dynamodb, models):
    for broker_id in range(3):
        dynamodb.put_broker(broker_id, epoch=1, heartbeat=0)
    dynamodb.unprocessed = 3  # the version, the lease and broker 0
    read = read_cluster_items(models, range(3), lease=True, at_ms=0.0)
    assert [sum(len(r["Keys"]) for r in call["RequestItems"].values()) for call in dynamodb.calls] == [5, 3]
    assert read == read_cluster_items(models, range(3), lease=True, at_ms=0.0)
    assert read.version == 7 and read.lease is not None and len(read.brokers.found) == 3


def test_keys_left_unprocessed_after_the_retries_fail_the_read(dynamodb, models):
    dynamodb.unprocessed = 1_000
    with pytest.raises(MetadataUnavailableError, match="unprocessed"):
        read_cluster_items(models, [], lease=True, at_ms=0.0)
    assert len(dynamodb.calls) == 4


@pytest.fixture
def observer() -> Controller:
    return Controller(MetadataStore(SETTINGS), -1, session_timeout_ms=SESSION_MS)


def heartbeats(at_ms: float, asked: set[int], *found: BrokerHeartbeat) -> BrokerHeartbeats:
    return BrokerHeartbeats(at_ms=at_ms, asked=frozenset(asked), found=found)


def test_observation_from_reads_times_a_stalled_heartbeat_on_the_reads_clock(observer):
    one, two = BrokerHeartbeat(1, 4, BrokerState.RUNNING, 20), BrokerHeartbeat(2, 5, BrokerState.RUNNING, 30)
    assert observer.observe(heartbeats=heartbeats(1000, {1, 2}, one, two)) == []
    moved = dataclasses.replace(one, heartbeat=21)
    assert observer.observe(heartbeats=heartbeats(1000 + SESSION_MS - 1, {1, 2}, moved, two)) == []
    assert observer.observe(heartbeats=heartbeats(1000 + SESSION_MS, {1, 2}, moved, two)) == [two]
    # Broker 1's heartbeat moved at 1299: it stalls a whole session after that sighting, not before.
    assert observer.observe(heartbeats=heartbeats(1299 + SESSION_MS - 1, {1, 2}, moved, two)) == [two]
    assert observer.observe(heartbeats=heartbeats(1299 + SESSION_MS, {1, 2}, moved, two)) == [moved, two]


def test_a_new_broker_is_watched_from_the_first_read_that_asks_for_it(observer):
    one, three = BrokerHeartbeat(1, 4, BrokerState.RUNNING, 20), BrokerHeartbeat(3, 9, BrokerState.RUNNING, 0)
    observer.observe(heartbeats=heartbeats(0, {1}, one))
    # Broker 3 registered, not yet in the image: the read does not ask for it, nothing is known of it.
    assert observer.observe(heartbeats=heartbeats(SESSION_MS, {1}, one)) == [one]
    assert observer.watched_broker_ids() == {1}
    # Asked for from the next read on: its session starts at its first sighting.
    assert observer.observe(heartbeats=heartbeats(SESSION_MS + 500, {1, 3}, one, three)) == [one]
    assert observer.watched_broker_ids() == {1, 3}
    assert observer.observe(heartbeats=heartbeats(2 * SESSION_MS + 499, {1, 3}, one, three)) == [one]
    assert observer.observe(heartbeats=heartbeats(2 * SESSION_MS + 500, {1, 3}, one, three)) == [one, three]


def test_a_deleted_or_fenced_registration_is_forgotten_and_a_new_epoch_restarts_the_session(observer):
    one, two = BrokerHeartbeat(1, 4, BrokerState.RUNNING, 20), BrokerHeartbeat(2, 5, BrokerState.RUNNING, 30)
    observer.observe(heartbeats=heartbeats(0, {1, 2}, one, two))
    assert observer.observe(heartbeats=heartbeats(100, {1, 2}, one)) == []  # broker 2's registration is gone
    assert observer.watched_broker_ids() == {1}
    fenced = dataclasses.replace(one, state=BrokerState.FENCED)
    assert observer.observe(heartbeats=heartbeats(SESSION_MS, {1, 2}, fenced)) == []
    assert observer.watched_broker_ids() == set()
    again = BrokerHeartbeat(1, 6, BrokerState.RUNNING, 0)
    assert observer.observe(heartbeats=heartbeats(SESSION_MS + 1, {1}, again)) == []
    assert observer.observe(heartbeats=heartbeats(2 * SESSION_MS, {1}, again)) == []
    assert observer.observe(heartbeats=heartbeats(2 * SESSION_MS + 1, {1}, again)) == [again]


def test_brokers_a_read_did_not_ask_for_keep_their_observations(observer):
    one, two = BrokerHeartbeat(1, 4, BrokerState.RUNNING, 20), BrokerHeartbeat(2, 5, BrokerState.RUNNING, 30)
    observer.observe(heartbeats=heartbeats(0, {1, 2}, one, two))
    observer.observe(heartbeats=heartbeats(100, {1}, one))
    assert observer.watched_broker_ids() == {1, 2}
    assert observer.observe(heartbeats=heartbeats(SESSION_MS, {1, 2}, one, two)) == [one, two]


def test_a_lease_has_lapsed_once_unchanged_for_a_whole_duration_on_the_observers_clock():
    lease = ControllerLease(MetadataStore(SETTINGS), lease_duration_ms=1000)
    held = ControllerLeaseState(holder=1, controller_epoch=3, heartbeat=12, lease_duration_ms=1000)
    assert lease.lapsed(None, 0) and lease.lapsed(dataclasses.replace(held, holder=NO_HOLDER), 0)
    assert not lease.lapsed(held, 5000)  # first sighting
    assert not lease.lapsed(held, 5999)
    renewed = dataclasses.replace(held, heartbeat=13)
    assert not lease.lapsed(renewed, 6000)
    assert not lease.lapsed(renewed, 6999)
    assert lease.lapsed(renewed, 7000) and lease.lapsed(renewed, 7000)  # asking again: the same answer
