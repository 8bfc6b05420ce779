import threading

import pytest

from broker_core.metadata.cluster_reads import BrokerHeartbeat, read_cluster_items
from broker_core.metadata.controller import Controller, ControllerLease
from broker_core.metadata.errors import FencedControllerError
from broker_core.metadata.state import NO_HOLDER, BrokerState
from broker_core.metadata.store import MetadataStore

LEASE_MS = 1000


@pytest.fixture
def other_store(store: MetadataStore) -> MetadataStore:
    """A second client of the same tables, as another broker process would have."""
    return MetadataStore(store.settings)


def test_exactly_one_of_two_contenders_gets_a_free_lease(store, other_store):
    leases = {1: ControllerLease(store, LEASE_MS), 2: ControllerLease(other_store, LEASE_MS)}
    results: dict[int, int | None] = {}
    barrier = threading.Barrier(2)

    def contend(broker_id: int) -> None:
        barrier.wait()
        results[broker_id] = leases[broker_id].try_acquire(broker_id)

    threads = [threading.Thread(target=contend, args=(b,)) for b in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [b for b, epoch in results.items() if epoch is not None]
    assert len(winners) == 1
    assert results[winners[0]] == 1
    assert leases[winners[0]].current().holder == winners[0]


def test_a_held_lease_is_not_taken_before_it_lapses_on_the_observers_clock(store, other_store):
    holder, contender = ControllerLease(store, LEASE_MS), ControllerLease(other_store, LEASE_MS)
    assert holder.try_acquire(1) == 1
    assert contender.try_acquire(2, now_ms=0) is None
    assert contender.try_acquire(2, now_ms=LEASE_MS - 1) is None
    assert contender.current().holder == 1


def test_the_lease_is_taken_over_with_a_larger_epoch_after_it_lapses(store, other_store):
    holder, contender = ControllerLease(store, LEASE_MS), ControllerLease(other_store, LEASE_MS)
    holder.try_acquire(1)
    contender.try_acquire(2, now_ms=0)
    assert contender.try_acquire(2, now_ms=LEASE_MS) == 2
    state = contender.current()
    assert (state.holder, state.controller_epoch) == (2, 2)


def test_heartbeats_restart_the_observers_timer(store, other_store):
    holder, contender = ControllerLease(store, LEASE_MS), ControllerLease(other_store, LEASE_MS)
    holder.try_acquire(1)
    contender.try_acquire(2, now_ms=0)
    holder.heartbeat()
    assert contender.try_acquire(2, now_ms=5 * LEASE_MS) is None
    assert contender.try_acquire(2, now_ms=6 * LEASE_MS - 1) is None
    assert contender.current().holder == 1
    assert contender.try_acquire(2, now_ms=6 * LEASE_MS) == 2


def test_try_acquire_by_the_holder_renews_the_lease(store):
    lease = ControllerLease(store, LEASE_MS)
    lease.try_acquire(1)
    before = lease.current().heartbeat
    assert lease.try_acquire(1) == 1
    assert lease.current().heartbeat == before + 1


def test_the_old_holder_is_fenced_after_a_takeover(store, other_store, register_brokers):
    register_brokers([1, 2])
    store.create_topic("t", 1, 2)
    holder, contender = ControllerLease(store, LEASE_MS), ControllerLease(other_store, LEASE_MS)
    old_epoch = holder.try_acquire(1)
    contender.try_acquire(2, now_ms=0)
    contender.try_acquire(2, now_ms=LEASE_MS)

    with pytest.raises(FencedControllerError):
        holder.heartbeat()
    assert holder.controller_epoch is None
    partition = store.get_partition("t", 0)
    with pytest.raises(FencedControllerError):
        store.update_partition(partition.with_isr([partition.leader]), 0, controller_epoch=old_epoch)
    assert store.get_partition("t", 0) == partition


def test_a_fenced_controller_cannot_fence_brokers(store, other_store, register_brokers):
    epochs = register_brokers([1, 2])
    holder, contender = ControllerLease(store, LEASE_MS), ControllerLease(other_store, LEASE_MS)
    stale = Controller(store, holder.try_acquire(1), session_timeout_ms=300)
    stale.run_once(now_ms=0)
    contender.try_acquire(2, now_ms=0)
    contender.try_acquire(2, now_ms=LEASE_MS)
    store.heartbeat_broker(1, epochs[1])
    with pytest.raises(FencedControllerError):
        stale.run_once(now_ms=1000)
    assert store.get_broker(2).state is BrokerState.RUNNING


def test_a_released_lease_is_taken_at_once(store, other_store):
    holder, contender = ControllerLease(store, LEASE_MS), ControllerLease(other_store, LEASE_MS)
    holder.try_acquire(1)
    holder.release()
    assert holder.controller_epoch is None
    assert contender.current().holder == NO_HOLDER
    assert contender.try_acquire(2, now_ms=0) == 2


def test_a_restarted_holder_waits_for_its_own_old_lease_to_lapse(store, other_store):
    ControllerLease(store, LEASE_MS).try_acquire(1)
    restarted = ControllerLease(other_store, LEASE_MS)
    assert restarted.try_acquire(1, now_ms=0) is None
    assert restarted.try_acquire(1, now_ms=LEASE_MS) == 2


def test_the_periodic_read_matches_the_lease_version_and_registrations_read_on_their_own(store, other_store):
    lease = ControllerLease(other_store, LEASE_MS)
    first = read_cluster_items(other_store.models, [1], lease=True, at_ms=0)
    assert (first.lease, first.version, first.brokers.found, first.brokers.missing) == (
        None, store.metadata_version(), (), {1})
    holder = ControllerLease(store, LEASE_MS)
    assert holder.try_acquire(1) == 1
    epochs = {b: store.register_broker(b, "127.0.0.1", 19092 + b) for b in (1, 2)}
    store.heartbeat_broker(2, epochs[2])
    read = read_cluster_items(other_store.models, [1, 2, 3], lease=True, at_ms=5)
    assert read.lease == lease.current() and read.lease.holder == 1
    assert read.version == store.metadata_version() > 0
    assert read.brokers.found == tuple(BrokerHeartbeat(b.broker_id, b.broker_epoch, b.state, b.heartbeat)
                                       for b in store.list_brokers())
    assert read.brokers.missing == {3}
    assert read_cluster_items(other_store.models, [1], lease=False, at_ms=5).lease is None
    # Beyond four brokers the heartbeats come from a Scan (read units): the same registrations.
    scanned = read_cluster_items(other_store.models, [1, 2, 3, 4, 5, 6], lease=True, at_ms=5)
    assert (scanned.lease, scanned.version, scanned.brokers.found) == (read.lease, read.version, read.brokers.found)
    assert scanned.brokers.missing == {3, 4, 5, 6}

    # try_acquire with the lease as read behaves as with its own read: the lease runs out on the
    # observer's clock from its first sighting of the heartbeat, then it is taken.
    assert lease.try_acquire(2, now_ms=0, state=read.lease) is None
    assert lease.try_acquire(2, now_ms=LEASE_MS - 1, state=read.lease) is None
    assert lease.try_acquire(2, now_ms=LEASE_MS, state=read.lease) == 2
    with pytest.raises(FencedControllerError):
        holder.heartbeat()
