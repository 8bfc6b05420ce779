"""GroupStore against moto: lease acquisition and fencing, generation-conditional metadata, offset fencing."""

from __future__ import annotations

import pytest

from broker_core.aws import AwsSettings
from broker_core.groups.errors import CoordinatorFencedError
from broker_core.groups.store import (
    EMPTY_RECORD,
    NO_HOLDER,
    CommittedOffset,
    GroupRecord,
    GroupStore,
    StoredMember,
)

LEASE_MS = 3000


@pytest.fixture
def store(aws_settings: AwsSettings) -> GroupStore:
    created = GroupStore(aws_settings)
    created.ensure_tables()
    return created


def member(member_id: str, assignment: bytes = b"") -> StoredMember:
    return StoredMember(member_id=member_id, group_instance_id=None, client_id="c", client_host="",
                        session_timeout_ms=6000, rebalance_timeout_ms=30000,
                        protocols=(("range", b"meta"), ("roundrobin", b"")), assignment=assignment)


def record(generation: int, *members: StoredMember) -> GroupRecord:
    return GroupRecord(generation=generation, state="Stable" if members else "Empty", protocol_type="consumer",
                       protocol="range" if members else None, leader=members[0].member_id if members else None,
                       members=members, state_timestamp_ms=1234)


def test_the_first_broker_to_ask_creates_the_group_holding_its_lease(store: GroupStore) -> None:
    lease = store.create_lease("g", broker_id=1, lease_duration_ms=LEASE_MS)
    assert lease is not None
    assert (lease.holder, lease.coordinator_epoch) == (1, 1)
    assert store.create_lease("g", broker_id=2, lease_duration_ms=LEASE_MS) is None
    stored = store.read_group("g")
    assert stored.lease == lease
    assert stored.record.generation == 0
    assert stored.record.state == "Empty"


def test_taking_a_lease_bumps_the_epoch_and_fences_the_old_holder(store: GroupStore) -> None:
    first = store.create_lease("g", 1, LEASE_MS)
    seen = store.read_group("g").lease
    taken = store.take_lease(seen, broker_id=2, lease_duration_ms=LEASE_MS)
    assert taken is not None and (taken.holder, taken.coordinator_epoch) == (2, 2)
    with pytest.raises(CoordinatorFencedError):
        store.heartbeat_lease("g", 1, first.coordinator_epoch)
    with pytest.raises(CoordinatorFencedError):
        store.write_group("g", 1, first.coordinator_epoch, 0, record(1, member("m")))
    store.heartbeat_lease("g", 2, taken.coordinator_epoch)


def test_only_one_contender_takes_a_lease_it_saw_in_the_same_state(store: GroupStore) -> None:
    store.create_lease("g", 1, LEASE_MS)
    seen = store.read_group("g").lease
    assert store.take_lease(seen, 2, LEASE_MS) is not None
    assert store.take_lease(seen, 3, LEASE_MS) is None
    assert store.read_group("g").lease.holder == 2


def test_a_heartbeat_changes_what_contenders_see(store: GroupStore) -> None:
    lease = store.create_lease("g", 1, LEASE_MS)
    seen = store.read_group("g").lease
    store.heartbeat_lease("g", 1, lease.coordinator_epoch)
    assert store.read_group("g").lease.observation != seen.observation
    # A contender acting on the older sighting loses.
    assert store.take_lease(seen, 2, LEASE_MS) is None


def test_a_released_lease_shows_no_holder(store: GroupStore) -> None:
    lease = store.create_lease("g", 1, LEASE_MS)
    store.release_lease("g", 1, lease.coordinator_epoch)
    assert store.read_group("g").lease.holder == NO_HOLDER
    store.release_lease("g", 1, lease.coordinator_epoch)  # releasing twice is harmless


def test_group_metadata_round_trips_and_each_write_names_the_generation_it_replaces(store: GroupStore) -> None:
    lease = store.create_lease("g", 1, LEASE_MS)
    stable = record(1, member("a", b"\x00\x01"), member("b"))
    store.write_group("g", 1, lease.coordinator_epoch, expected_generation=0, record=stable)
    assert store.read_group("g").record == stable
    with pytest.raises(CoordinatorFencedError):
        store.write_group("g", 1, lease.coordinator_epoch, expected_generation=0, record=record(2, member("a")))
    store.write_group("g", 1, lease.coordinator_epoch, expected_generation=1, record=record(2))
    assert store.read_group("g").record == record(2)


def test_offsets_are_one_item_per_partition_with_metadata_and_commit_time(store: GroupStore) -> None:
    lease = store.create_lease("g", 1, LEASE_MS)
    first = CommittedOffset(offset=10, leader_epoch=3, metadata="hello", commit_timestamp_ms=111)
    second = CommittedOffset(offset=0, leader_epoch=-1, metadata="", commit_timestamp_ms=222, expire_timestamp_ms=999)
    store.put_offset("g", "orders", 0, first, lease.coordinator_epoch)
    store.put_offset("g", "orders", 1, second, lease.coordinator_epoch)
    store.put_offset("g", "orders.v2", 0, first, lease.coordinator_epoch)
    assert store.load_offsets("g") == {("orders", 0): first, ("orders", 1): second, ("orders.v2", 0): first}
    assert store.load_offsets("other") == {}
    store.delete_offset("g", "orders", 1, lease.coordinator_epoch)
    assert set(store.load_offsets("g")) == {("orders", 0), ("orders.v2", 0)}


def test_an_offset_written_by_a_newer_coordinator_cannot_be_overwritten_by_an_older_one(store: GroupStore) -> None:
    old = store.create_lease("g", 1, LEASE_MS)
    new = store.take_lease(store.read_group("g").lease, 2, LEASE_MS)
    store.put_offset("g", "t", 0, CommittedOffset(50, -1, "", 1), new.coordinator_epoch)
    with pytest.raises(CoordinatorFencedError):
        store.put_offset("g", "t", 0, CommittedOffset(20, -1, "", 2), old.coordinator_epoch)
    with pytest.raises(CoordinatorFencedError):
        store.delete_offset("g", "t", 0, old.coordinator_epoch)
    assert store.load_offsets("g")[("t", 0)].offset == 50


def test_deleting_a_group_needs_its_lease(store: GroupStore) -> None:
    lease = store.create_lease("g", 1, LEASE_MS)
    with pytest.raises(CoordinatorFencedError):
        store.delete_group("g", 2, lease.coordinator_epoch)
    store.delete_group("g", 1, lease.coordinator_epoch)
    assert store.read_group("g") is None
    assert [g.group_id for g in store.list_groups()] == []


def test_listing_reads_every_group(store: GroupStore) -> None:
    for name in ("a", "b", "c"):
        store.create_lease(name, 1, LEASE_MS)
    listed = store.list_groups()
    assert sorted(g.group_id for g in listed) == ["a", "b", "c"]
    assert {(g.record.generation, g.record.state, g.record.members) for g in listed} == {
        (EMPTY_RECORD.generation, EMPTY_RECORD.state, EMPTY_RECORD.members)}
