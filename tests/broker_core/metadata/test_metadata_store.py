import threading
from dataclasses import replace

import boto3
import pytest

from broker_core.metadata.controller import ControllerLease
from broker_core.metadata.errors import (
    BrokerFencedError,
    InvalidBrokerRegistrationError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidPartitionStateError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    PartitionEpochConflictError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from broker_core.metadata.image import MetadataImage
from broker_core.metadata.state import BrokerState
from broker_core.metadata.store import MetadataStore


def test_ensure_tables_creates_the_four_tables_under_the_prefix(store, aws_settings, table_prefix):
    dynamodb = boto3.client("dynamodb", **aws_settings.boto3_kwargs())
    # The session's moto server holds every test's tables, more than one ListTables page.
    pages = dynamodb.get_paginator("list_tables").paginate()
    names = [n for page in pages for n in page["TableNames"] if n.startswith(table_prefix)]
    assert sorted(names) == sorted(
        f"{table_prefix}{base}" for base in ("cluster", "brokers", "topics", "partitions")
    )
    billing = dynamodb.describe_table(TableName=f"{table_prefix}topics")["Table"]["BillingModeSummary"]
    assert billing["BillingMode"] == "PAY_PER_REQUEST"


def test_ensure_tables_is_harmless_when_the_tables_exist(store):
    store.register_broker(1, "127.0.0.1", 9092)
    MetadataStore(store.settings).ensure_tables()
    assert [b.broker_id for b in store.list_brokers()] == [1]


def test_registered_broker_is_listed_as_running_with_its_address(store):
    epoch = store.register_broker(3, "broker-3.local", 9093, rack="rack-a")
    (broker,) = store.list_brokers()
    assert (broker.broker_id, broker.broker_epoch, broker.host, broker.port, broker.rack) == (
        3,
        epoch,
        "broker-3.local",
        9093,
        "rack-a",
    )
    assert broker.state is BrokerState.RUNNING


def test_a_registration_names_the_principal_the_broker_authenticates_as(store):
    store.register_broker(1, "127.0.0.1", 9092)
    store.register_broker(2, "127.0.0.1", 9093, principal="User:CN=broker-2,O=Floe")
    assert {b.broker_id: b.principal for b in store.list_brokers()} == {1: "User:ANONYMOUS",
                                                                       2: "User:CN=broker-2,O=Floe"}


def test_re_registration_gets_a_larger_epoch_and_fences_the_old_one(store):
    first = store.register_broker(1, "127.0.0.1", 9092)
    store.register_broker(2, "127.0.0.1", 9093)
    second = store.register_broker(1, "127.0.0.1", 9092)
    assert second > first
    with pytest.raises(BrokerFencedError):
        store.heartbeat_broker(1, first)
    store.heartbeat_broker(1, second)
    assert store.get_broker(1).heartbeat == 1


def test_heartbeat_advances_the_counter(store):
    epoch = store.register_broker(1, "127.0.0.1", 9092)
    for _ in range(3):
        store.heartbeat_broker(1, epoch)
    assert store.get_broker(1).heartbeat == 3


def test_heartbeat_of_an_unregistered_broker_is_fenced(store):
    with pytest.raises(BrokerFencedError):
        store.heartbeat_broker(9, 1)


def test_a_fenced_broker_cannot_heartbeat_or_change_state_until_it_registers_again(store):
    epoch = store.register_broker(1, "127.0.0.1", 9092)
    store.set_broker_state(1, epoch, BrokerState.FENCED)
    with pytest.raises(BrokerFencedError):
        store.heartbeat_broker(1, epoch)
    with pytest.raises(BrokerFencedError):
        store.set_broker_state(1, epoch, BrokerState.RUNNING)
    new_epoch = store.register_broker(1, "127.0.0.1", 9092)
    store.heartbeat_broker(1, new_epoch)
    assert store.get_broker(1).state is BrokerState.RUNNING


def test_set_broker_state_with_a_stale_epoch_is_refused(store):
    old = store.register_broker(1, "127.0.0.1", 9092)
    store.register_broker(1, "127.0.0.1", 9092)
    with pytest.raises(BrokerFencedError):
        store.set_broker_state(1, old, BrokerState.SHUTTING_DOWN)
    assert store.get_broker(1).state is BrokerState.RUNNING


@pytest.mark.parametrize(("broker_id", "host", "port"), [(-1, "h", 9092), (1, "", 9092), (1, "h", 0)])
def test_invalid_registrations_are_refused(store, broker_id, host, port):
    with pytest.raises(InvalidBrokerRegistrationError):
        store.register_broker(broker_id, host, port)
    assert store.list_brokers() == []


def test_created_topic_is_described_listed_and_its_partitions_start_at_epoch_zero(store, register_brokers):
    register_brokers([1, 2, 3])
    created = store.create_topic("orders", 6, 2, {"retention.ms": "60000"})
    assert store.get_topic("orders") == created
    assert (created.num_partitions, created.replication_factor) == (6, 2)
    assert created.configs == {"retention.ms": "60000"}
    assert [t.name for t in store.list_topics()] == ["orders"]
    partitions = store.get_partitions("orders")
    assert [p.partition for p in partitions] == list(range(6))
    for p in partitions:
        assert len(p.replicas) == 2 and len(set(p.replicas)) == 2
        assert set(p.replicas) <= {1, 2, 3}
        assert p.leader == p.replicas[0]
        assert p.isr == p.replicas
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
        assert p.topic_id == created.topic_id
    assert store.get_partition("orders", 4) == partitions[4]


def test_topic_replicas_only_go_to_running_brokers(store, register_brokers):
    epochs = register_brokers([1, 2, 3])
    store.set_broker_state(2, epochs[2], BrokerState.SHUTTING_DOWN)
    store.create_topic("t", 8, 2)
    assert all(2 not in p.replicas for p in store.get_partitions("t"))


def test_creating_an_existing_topic_fails_and_keeps_the_first(store, register_brokers):
    register_brokers([1])
    first = store.create_topic("dup", 1, 1)
    with pytest.raises(TopicExistsError):
        store.create_topic("dup", 3, 1)
    assert store.get_topic("dup") == first
    assert len(store.get_partitions("dup")) == 1


def test_concurrent_creates_of_one_name_leave_exactly_one_topic(store, register_brokers):
    register_brokers([1, 2])
    outcomes: list[object] = []
    barrier = threading.Barrier(4)

    def create(partitions: int) -> None:
        barrier.wait()
        try:
            outcomes.append(store.create_topic("race", partitions, 1))
        except TopicExistsError as err:
            outcomes.append(err)

    threads = [threading.Thread(target=create, args=(n,)) for n in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if not isinstance(o, TopicExistsError)]
    assert len(winners) == 1 and len(outcomes) == 4
    assert store.get_topic("race") == winners[0]
    assert len(store.get_partitions("race")) == winners[0].num_partitions
    assert len(store.snapshot().partitions["race"]) == winners[0].num_partitions


def test_replication_factor_above_the_running_brokers_is_refused(store, register_brokers):
    register_brokers([1, 2])
    with pytest.raises(InvalidReplicationFactorError) as raised:
        store.create_topic("t", 1, 3)
    assert raised.value.available_brokers == 2
    assert store.list_topics() == []


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "topic/x", "ü", "x" * 250])
def test_illegal_topic_names_are_refused(store, register_brokers, name):
    register_brokers([1])
    with pytest.raises(InvalidTopicError):
        store.create_topic(name, 1, 1)
    assert store.list_topics() == []


def test_longest_legal_topic_name_is_accepted(store, register_brokers):
    register_brokers([1])
    name = "a._-Z9" + "x" * 243
    store.create_topic(name, 1, 1)
    assert store.get_topic(name).name == name


@pytest.mark.parametrize("partitions", [0, -3])
def test_fewer_than_one_partition_is_refused(store, register_brokers, partitions):
    register_brokers([1])
    with pytest.raises(InvalidPartitionsError):
        store.create_topic("t", partitions, 1)


def test_non_string_config_values_are_refused(store, register_brokers):
    register_brokers([1])
    with pytest.raises(InvalidConfigError):
        store.create_topic("t", 1, 1, {"retention.ms": 5})
    assert store.list_topics() == []


def test_deleted_topic_is_gone_with_its_partitions_and_its_name_can_be_reused(store, register_brokers):
    register_brokers([1, 2])
    old = store.create_topic("gone", 4, 2)
    store.delete_topic("gone")
    with pytest.raises(UnknownTopicError):
        store.get_topic("gone")
    with pytest.raises(UnknownTopicError):
        store.get_partitions("gone")
    assert "gone" not in store.snapshot().partitions
    new = store.create_topic("gone", 2, 1)
    assert new.topic_id != old.topic_id
    assert len(store.get_partitions("gone")) == 2


def test_deleting_an_unknown_topic_fails(store):
    with pytest.raises(UnknownTopicError):
        store.delete_topic("nope")


def test_unknown_partition_is_reported(store, register_brokers):
    register_brokers([1])
    store.create_topic("t", 2, 1)
    with pytest.raises(UnknownPartitionError):
        store.get_partition("t", 2)


def test_alter_configs_sets_and_removes_keys(store, register_brokers):
    register_brokers([1])
    store.create_topic("t", 1, 1, {"retention.ms": "1000", "cleanup.policy": "delete"})
    altered = store.alter_topic_configs("t", {"segment.bytes": "1048576"}, delete_configs=["retention.ms"])
    assert altered.configs == {"cleanup.policy": "delete", "segment.bytes": "1048576"}
    assert store.describe_topic_configs("t") == altered.configs


def test_concurrent_config_changes_are_all_kept(store, register_brokers):
    register_brokers([1])
    store.create_topic("t", 1, 1)
    threads = [
        threading.Thread(target=store.alter_topic_configs, args=("t", {f"key.{n}": str(n)})) for n in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.describe_topic_configs("t") == {f"key.{n}": str(n) for n in range(6)}


def test_alter_configs_of_an_unknown_topic_fails(store):
    with pytest.raises(UnknownTopicError):
        store.alter_topic_configs("nope", {"a": "b"})


def test_partition_update_bumps_the_partition_epoch(store, register_brokers):
    register_brokers([1, 2, 3])
    store.create_topic("t", 1, 3)
    current = store.get_partition("t", 0)
    follower = current.replicas[1]
    shrunk = store.update_partition(current.with_isr([current.leader, current.replicas[2]]), 0)
    assert shrunk.partition_epoch == 1
    assert follower not in store.get_partition("t", 0).isr
    moved = store.update_partition(shrunk.with_leader(shrunk.isr[1], shrunk.isr), 1)
    stored = store.get_partition("t", 0)
    assert stored == moved
    assert (stored.leader, stored.leader_epoch, stored.partition_epoch) == (shrunk.isr[1], 1, 2)


def test_partition_update_with_a_stale_partition_epoch_fails_and_changes_nothing(store, register_brokers):
    register_brokers([1, 2])
    store.create_topic("t", 1, 2)
    current = store.get_partition("t", 0)
    store.update_partition(current.with_isr([current.leader]), 0)
    with pytest.raises(PartitionEpochConflictError) as raised:
        store.update_partition(current.with_leader(current.replicas[1], current.replicas), 0)
    assert raised.value.expected_partition_epoch == 0
    stored = store.get_partition("t", 0)
    assert (stored.leader, stored.isr, stored.partition_epoch) == (current.leader, (current.leader,), 1)


def test_partition_update_with_a_leader_outside_the_isr_is_refused(store, register_brokers):
    register_brokers([1, 2])
    store.create_topic("t", 1, 2)
    current = store.get_partition("t", 0)
    with pytest.raises(InvalidPartitionStateError):
        store.update_partition(current.with_leader(current.replicas[1], [current.replicas[0]]), 0)
    assert store.get_partition("t", 0) == current


def test_partition_update_of_a_deleted_topic_reports_an_unknown_partition(store, register_brokers):
    register_brokers([1])
    store.create_topic("t", 1, 1)
    current = store.get_partition("t", 0)
    store.delete_topic("t")
    with pytest.raises(UnknownPartitionError):
        store.update_partition(current.with_isr(current.isr), 0)


def test_every_metadata_change_bumps_the_metadata_version(store, register_brokers):
    versions = [store.metadata_version()]

    def changed() -> bool:
        versions.append(store.metadata_version())
        return versions[-1] > versions[-2]

    epoch = store.register_broker(1, "127.0.0.1", 9092)
    assert changed()
    store.heartbeat_broker(1, epoch)
    assert not changed()
    store.create_topic("t", 1, 1)
    assert changed()
    store.alter_topic_configs("t", {"a": "b"})
    assert changed()
    p = store.get_partition("t", 0)
    store.update_partition(p.with_isr(p.isr), p.partition_epoch)
    assert changed()
    store.set_broker_state(1, epoch, BrokerState.SHUTTING_DOWN)
    assert changed()
    store.delete_topic("t")
    assert changed()
    assert store.bump_metadata_version() == versions[-1] + 1


def test_snapshot_holds_brokers_topics_and_partitions_at_the_current_version(store, register_brokers):
    register_brokers([1, 2])
    store.create_topic("a", 2, 2)
    store.create_topic("b", 1, 1)
    snapshot = store.snapshot()
    assert snapshot.version == store.metadata_version()
    assert [b.broker_id for b in snapshot.live_brokers()] == [1, 2]
    assert sorted(snapshot.topics) == ["a", "b"]
    assert snapshot.partitions["a"] == tuple(store.get_partitions("a"))
    assert snapshot.partitions["b"] == tuple(store.get_partitions("b"))


def test_producer_id_blocks_never_overlap_under_concurrent_allocation(store):
    blocks = []
    lock = threading.Lock()

    def allocate() -> None:
        for _ in range(5):
            block = store.allocate_producer_id_block(size=100)
            with lock:
                blocks.append(block)

    threads = [threading.Thread(target=allocate) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(blocks) == 30
    ordered = sorted(blocks)
    assert ordered[0].start == 0
    for block in ordered:
        assert block.end - block.start == 100
    for earlier, later in zip(ordered, ordered[1:], strict=False):
        assert earlier.end <= later.start


def test_a_batched_partition_update_writes_all_but_the_stale_ones_in_few_versions(store, register_brokers):
    register_brokers([1, 2, 3])
    store.create_topic("t", 120, 3)
    states = store.get_partitions("t")
    store.update_partition(states[7].with_isr(states[7].isr[:2]), 0)  # partition 7 moves on first
    before = store.metadata_version()
    controller_epoch = ControllerLease(store).try_acquire(1)
    result = store.update_partitions([(s.with_leader(s.replicas[1], s.isr), 0) for s in states], controller_epoch)
    assert [s.partition for s in result.conflicted] == [7]
    assert len(result.written) == 119
    # 97 partitions per transaction (with the lease check, the version and the change item, DynamoDB's
    # 100): 120 in two, each one version of the change sequence.
    assert store.metadata_version() == before + 2
    stored = {p.partition: p for p in store.get_partitions("t")}
    assert all(stored[s.partition] == s and s.leader_epoch == 1 for s in result.written)
    assert (stored[7].leader, stored[7].partition_epoch) == (states[7].leader, 1)


def test_the_change_sequence_carries_changed_partitions_and_gives_up_on_other_changes(store, register_brokers):
    epochs = register_brokers([1, 2])
    store.create_topic("t", 4, 2)
    states = store.get_partitions("t")
    start = store.metadata_version()
    store.update_partitions([(states[1].with_isr(states[1].isr[:1]), 0), (states[3].with_isr(states[3].isr[:1]), 0)])
    store.update_partition(states[2].with_isr(states[2].isr[:1]), 0)
    store.update_partition(states[1].with_isr(states[1].isr), 1)  # partition 1 again: back to the full ISR
    later = store.metadata_version()
    delta = store.metadata_delta(start, later)
    # The change items carry the states written, the latest of each partition winning.
    stored = {p.partition: p for p in store.get_partitions("t")}
    assert delta.partitions == {(states[0].topic_id, n): stored[n] for n in (1, 2, 3)}
    assert stored[1].isr == states[1].isr and stored[1].partition_epoch == 2
    assert (delta.topics, delta.deleted_topic_ids) == ({}, frozenset())
    assert store.metadata_delta(later, later).partitions == {}
    store.set_broker_state(2, epochs[2], BrokerState.SHUTTING_DOWN)
    assert store.metadata_delta(later, store.metadata_version()).broker_states == {
        2: (epochs[2], BrokerState.SHUTTING_DOWN)}
    store.bump_metadata_version()
    # A version with no change item (a cluster-wide change such as quotas or ACLs): read everything.
    assert store.metadata_delta(start, store.metadata_version()) is None


def test_registrations_fences_and_a_new_controller_are_carried_by_the_change_sequence(store):
    lease = ControllerLease(store, 10_000)
    start = store.metadata_version()
    epochs = {b: store.register_broker(b, "127.0.0.1", 19092 + b, endpoints={"PLAINTEXT": ("127.0.0.1", 19092 + b)})
              for b in (1, 2)}
    before = store.snapshot()
    controller_epoch = lease.try_acquire(1)
    store.announce_controller(1, controller_epoch)
    observed = store.get_broker(2)
    assert store.fence_broker(2, epochs[2], observed.heartbeat, controller_epoch)
    epochs[2] = store.register_broker(2, "127.0.0.1", 29092, endpoints={"PLAINTEXT": ("127.0.0.1", 29092)})
    store.fence_broker(1, epochs[1], store.get_broker(1).heartbeat, controller_epoch)
    now = store.metadata_version()
    delta = store.metadata_delta(start, now)
    assert delta.controller_id == 1
    # Applied to an image that knew none of it, or to the snapshot taken after the registrations, the
    # change items give the brokers a full read gives (heartbeat counters aside: they are not versioned).
    unversioned = {"heartbeat": 0}
    expected = [replace(b, **unversioned) for b in store.snapshot().brokers]
    assert [b.state for b in expected] == [BrokerState.FENCED, BrokerState.RUNNING]
    assert expected[1].port == 29092 and expected[1].broker_epoch == epochs[2]
    image = MetadataImage(version=start).with_delta(now, delta)
    assert [replace(b, **unversioned) for b in image.brokers.values()] == expected
    assert image.controller_id == 1
    later = before.with_delta(now, store.metadata_delta(before.version, now))
    assert [replace(b, **unversioned) for b in later.brokers] == expected
    # A state change of a registration the reader does not hold at that epoch: read everything.
    assert MetadataImage(version=start).with_delta(now, store.metadata_delta(now - 1, now)) is None


def test_topic_creation_growth_config_change_and_deletion_are_carried_by_the_change_sequence(store, register_brokers):
    register_brokers([1, 2, 3])
    start = store.metadata_version()
    created = store.create_topic("orders", 5, 3, {"retention.ms": "1000"})
    grown = store.add_partitions("orders", 7)
    changed = store.alter_topic_configs("orders", {"cleanup.policy": "compact"})
    now = store.metadata_version()
    assert now == start + 3
    delta = store.metadata_delta(start, now)
    assert delta.topics == {"orders": store.get_topic("orders")} == {"orders": changed}
    assert (created.num_partitions, grown.num_partitions, changed.configs) == (
        5, 7, {"retention.ms": "1000", "cleanup.policy": "compact"})
    # The new partitions' states, from the assignment the change item carries, are what was written.
    stored = store.get_partitions("orders")
    assert delta.partitions == {(created.topic_id, p.partition): p for p in stored}
    assert all(p.leader == p.replicas[0] and p.isr == p.replicas and len(p.replicas) == 3 for p in stored)

    store.delete_topic("orders")
    again = store.create_topic("orders", 2, 1)
    later = store.metadata_version()
    after_delete = store.metadata_delta(now, later)
    assert after_delete.deleted_topic_ids == {created.topic_id}
    assert after_delete.topics == {"orders": again}
    assert {k[0] for k in after_delete.partitions} == {again.topic_id}
    # Read across the whole run, the deleted topic leaves nothing behind.
    whole = store.metadata_delta(start, later)
    assert whole.topics == {"orders": again} and set(whole.partitions) == {(again.topic_id, 0), (again.topic_id, 1)}
    # Applied to the snapshot taken before, the delta gives what a snapshot reads now.
    snapshot = store.snapshot()
    assert store_snapshot_at(store, start).with_delta(later, whole) == snapshot


def store_snapshot_at(store, version):
    """The snapshot as it was at ``version``: none of the test's topics existed then."""
    snapshot = store.snapshot()
    return type(snapshot)(version=version, brokers=snapshot.brokers, topics={}, partitions={},
                          broker_configs=snapshot.broker_configs)
