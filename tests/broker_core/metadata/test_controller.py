import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.metadata.cluster_reads import read_cluster_items
from broker_core.metadata.controller import Controller, ControllerLease, plan_partition_change
from broker_core.metadata.state import NO_LEADER, BrokerState, PartitionState
from broker_core.metadata.store import MetadataStore

SESSION_MS = 300


@pytest.fixture
def controller(store: MetadataStore) -> Controller:
    epoch = ControllerLease(store, 10_000).try_acquire(0)
    return Controller(store, epoch, session_timeout_ms=SESSION_MS)


def stall(controller: Controller, store: MetadataStore, epochs: dict[int, int], stalled: set[int]):
    """Two controller passes a session timeout apart; every broker but ``stalled`` heartbeats between."""
    controller.run_once(now_ms=0)
    for broker_id, epoch in epochs.items():
        if broker_id not in stalled:
            store.heartbeat_broker(broker_id, epoch)
    return controller.run_once(now_ms=SESSION_MS)


def test_broker_whose_heartbeat_stalls_is_fenced_and_loses_leadership_to_an_isr_member(
    store, register_brokers, controller
):
    epochs = register_brokers([1, 2, 3])
    store.create_topic("t", 6, 3)
    before = {p.partition: p for p in store.get_partitions("t")}
    version_before = store.metadata_version()

    result = stall(controller, store, epochs, stalled={3})

    assert result.fenced_brokers == (3,)
    assert store.get_broker(3).state is BrokerState.FENCED
    assert [store.get_broker(b).state for b in (1, 2)] == [BrokerState.RUNNING] * 2
    # The fencing pass writes the elections only; leaders stop waiting for broker 3 on seeing the
    # fence, and a pass half a session after the next one takes it out of the other partitions' ISRs.
    elected = {p.partition for p in result.changed_partitions}
    assert elected == {n for n, p in before.items() if p.leader == 3}
    for p in store.get_partitions("t"):
        if p.partition not in elected:
            assert p == before[p.partition]
    controller.run_once(now_ms=SESSION_MS + 1)  # the elections are written: the wait starts
    controller.run_once(now_ms=SESSION_MS * 1.5)
    for p in store.get_partitions("t"):
        if p.partition not in elected:
            assert p == before[p.partition]
    controller.run_once(now_ms=SESSION_MS * 1.5 + 1)
    for p in store.get_partitions("t"):
        old = before[p.partition]
        assert 3 not in p.isr
        assert p.partition_epoch == old.partition_epoch + 1
        if old.leader == 3:
            assert p.leader == next(r for r in old.replicas if r != 3)
            assert p.leader_epoch == old.leader_epoch + 1
        else:
            assert (p.leader, p.leader_epoch) == (old.leader, old.leader_epoch)
    assert store.metadata_version() > version_before


def test_a_heartbeating_broker_is_never_fenced(store, register_brokers, controller):
    epochs = register_brokers([1, 2])
    for step in range(6):
        for broker_id, epoch in epochs.items():
            store.heartbeat_broker(broker_id, epoch)
        assert controller.run_once(now_ms=step * SESSION_MS).fenced_brokers == ()
    assert all(b.state is BrokerState.RUNNING for b in store.list_brokers())


def test_a_new_controller_waits_a_whole_session_before_fencing(store, register_brokers, controller):
    register_brokers([1])
    assert controller.run_once(now_ms=10_000).fenced_brokers == ()
    assert controller.run_once(now_ms=10_000 + SESSION_MS - 1).fenced_brokers == ()
    assert controller.run_once(now_ms=10_000 + SESSION_MS).fenced_brokers == (1,)


def test_a_broker_that_observed_heartbeats_before_its_term_fences_at_once_on_taking_over(
    store, register_brokers
):
    epochs = register_brokers([1, 2])
    observer = Controller(store, -1, session_timeout_ms=SESSION_MS)
    assert observer.observe(now_ms=0) == []
    store.heartbeat_broker(1, epochs[1])
    assert [b.broker_id for b in observer.observe(now_ms=SESSION_MS)] == [2]
    assert store.get_broker(2).state is BrokerState.RUNNING  # observing alone writes nothing

    observer.begin_term(ControllerLease(store, 10_000).try_acquire(1))
    store.heartbeat_broker(1, epochs[1])
    assert observer.run_once(now_ms=SESSION_MS + 1).fenced_brokers == (2,)
    assert store.get_broker(1).state is BrokerState.RUNNING


def test_stalled_broker_is_fenced_on_the_real_monotonic_clock(store, register_brokers, controller):
    epochs = register_brokers([1, 2])
    deadline = time.monotonic() + 20
    while store.get_broker(2).state is not BrokerState.FENCED and time.monotonic() < deadline:
        store.heartbeat_broker(1, epochs[1])
        controller.run_once()
        time.sleep(0.05)
    assert store.get_broker(2).state is BrokerState.FENCED
    assert store.get_broker(1).state is BrokerState.RUNNING


def test_unclean_election_is_off_by_default(store, register_brokers, controller):
    epochs = register_brokers([1, 2])
    store.create_topic("t", 1, 2)
    p = store.get_partition("t", 0)
    follower = p.replicas[1]
    store.update_partition(p.with_isr([p.leader]), 0)

    stall(controller, store, epochs, stalled={p.leader})

    after = store.get_partition("t", 0)
    assert after.leader == NO_LEADER
    assert after.isr == (p.leader,)
    assert follower not in after.isr


def test_unclean_election_when_the_topic_allows_it_elects_a_live_replica(store, register_brokers, controller):
    epochs = register_brokers([1, 2])
    store.create_topic("t", 1, 2, {"unclean.leader.election.enable": "true"})
    p = store.get_partition("t", 0)
    follower = p.replicas[1]
    store.update_partition(p.with_isr([p.leader]), 0)

    stall(controller, store, epochs, stalled={p.leader})

    after = store.get_partition("t", 0)
    assert (after.leader, after.isr, after.leader_epoch) == (follower, (follower,), p.leader_epoch + 1)


def test_last_isr_member_leads_again_when_it_registers_again(store, register_brokers, controller):
    epochs = register_brokers([1])
    store.create_topic("t", 1, 1)
    stall(controller, store, epochs, stalled={1})
    assert store.get_partition("t", 0).leader == NO_LEADER

    store.register_broker(1, "127.0.0.1", 9092)
    controller.run_once(now_ms=2 * SESSION_MS)

    after = store.get_partition("t", 0)
    assert (after.leader, after.isr, after.leader_epoch) == (1, (1,), 2)


def test_a_broker_registered_again_leaves_every_isr_with_another_running_member(store, register_brokers, controller):
    # Its ISR entries are its old incarnation's (KIP-903): a leader may have stopped counting them once
    # it was fenced, so it must neither lead nor count until a leader finds it caught up again.
    register_brokers([1, 2, 3])
    store.create_topic("t", 3, 3)
    store.create_topic("alone", 1, 1)
    controller.run_once(now_ms=0)
    before = {p.partition: p for p in store.get_partitions("t")}
    alone = store.get_partition("alone", 0)

    store.register_broker(alone.leader, "127.0.0.1", 19092 + alone.leader)  # a new incarnation, never fenced
    controller.run_once(now_ms=1)  # the elections of the partitions it led
    controller.run_once(now_ms=2)  # the elections are written: the wait starts
    controller.run_once(now_ms=2 + SESSION_MS / 2)  # the ISR-only changes, half a session later

    for p in store.get_partitions("t"):
        old = before[p.partition]
        assert alone.leader not in p.isr and p.leader != alone.leader
        assert p.leader_epoch == old.leader_epoch + (old.leader == alone.leader)
    assert store.get_partition("alone", 0) == alone  # no other member: it keeps its only replica
    version = store.metadata_version()
    controller.run_once(now_ms=3 + SESSION_MS / 2)  # counted as this incarnation from now on: nothing more to change
    assert store.metadata_version() == version


def test_a_new_controller_knows_a_broker_registered_again_since_its_predecessor_last_counted(
    store, register_brokers
):
    # The predecessor counted every broker, then lost its lease before it saw a broker register again
    # (a quick restart after a fence): the successor must not take that broker's old ISR entries as current.
    register_brokers([1, 2, 3])
    store.create_topic("t", 3, 3)
    lease = ControllerLease(store, 10_000)
    Controller(store, lease.try_acquire(0), session_timeout_ms=SESSION_MS).run_once(now_ms=0)
    assert store.controller_incarnations() == {b.broker_id: b.broker_epoch for b in store.list_brokers()}
    restarted = store.get_partition("t", 0).leader
    store.register_broker(restarted, "127.0.0.1", 19092 + restarted)
    lease.release()

    successor = Controller(store, ControllerLease(store, 10_000).try_acquire(7), session_timeout_ms=SESSION_MS)
    successor.run_once(now_ms=0)  # the elections of the partitions it led
    successor.run_once(now_ms=1)  # the elections are written: the wait starts
    successor.run_once(now_ms=1 + SESSION_MS / 2)  # the ISR-only changes, half a session later

    for p in store.get_partitions("t"):
        assert restarted not in p.isr and p.leader != restarted
    assert store.controller_incarnations()[restarted] == store.get_broker(restarted).broker_epoch


def test_controlled_shutdown_moves_every_leadership_away(store, register_brokers, controller):
    epochs = register_brokers([1, 2])
    store.create_topic("t", 4, 2)
    led_before = sorted(store.partitions_led_by(1), key=lambda p: p.partition)
    assert led_before

    done = controller.controlled_shutdown(1, epochs[1])

    assert done.still_led == []
    assert store.get_broker(1).state is BrokerState.SHUTTING_DOWN
    for p in store.get_partitions("t"):
        assert (p.leader, p.isr) == (2, (2,))
    # what the election metrics count as controlled_shutdown: the partitions broker 1 led, now broker 2's
    assert sorted(p.partition for p in done.shutdown_moves) == [p.partition for p in led_before]
    assert all(p.leader == 2 for p in done.shutdown_moves)


def test_controlled_shutdown_keeps_partitions_without_another_isr_member(store, register_brokers, controller):
    epochs = register_brokers([1])
    store.create_topic("t", 2, 1)
    done = controller.controlled_shutdown(1, epochs[1])
    assert [p.partition for p in done.still_led] == [0, 1]
    assert done.shutdown_moves == ()
    assert all(p.leader == 1 for p in store.get_partitions("t"))


def test_a_broker_that_marks_itself_shutting_down_is_drained_by_the_next_controller_pass(
    store, register_brokers, controller
):
    epochs = register_brokers([1, 2])
    store.create_topic("t", 4, 2)
    controller.run_once(now_ms=0)
    led_before = {p.partition for p in store.partitions_led_by(2)}
    store.set_broker_state(2, epochs[2], BrokerState.SHUTTING_DOWN)
    result = controller.run_once(now_ms=1)
    assert store.partitions_led_by(2) == []
    # counted as controlled_shutdown elections, not broker_change: broker 2 was shutting down
    assert {p.partition for p in result.shutdown_moves} == led_before
    assert all(p.leader == 1 for p in result.shutdown_moves)


def _partition(leader: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3)) -> PartitionState:
    return PartitionState("t", "id", 0, replicas, leader, 5, 9, isr)


def test_plan_leaves_a_healthy_partition_alone():
    assert plan_partition_change(_partition(1, (1, 2, 3)), {1, 2, 3}, set()) is None


def test_plan_picks_the_first_live_isr_member_in_replica_order():
    planned = plan_partition_change(_partition(1, (3, 1, 2)), {2, 3}, set())
    assert (planned.leader, planned.isr, planned.leader_epoch) == (2, (3, 2), 6)


def test_plan_drops_a_shutting_down_follower_from_the_isr_but_keeps_the_leader():
    planned = plan_partition_change(_partition(1, (1, 2, 3)), {1, 3}, {2})
    assert (planned.leader, planned.isr, planned.leader_epoch) == (1, (1, 3), 5)


def test_plan_never_elects_a_replica_outside_the_isr_without_unclean_election():
    planned = plan_partition_change(_partition(1, (1,)), {2, 3}, set())
    assert (planned.leader, planned.isr) == (NO_LEADER, (1,))
    assert plan_partition_change(planned, {2, 3}, set()) is None


@st.composite
def partitions_and_brokers(draw: st.DrawFn) -> tuple[PartitionState, set[int], set[int], bool]:
    replicas = tuple(draw(st.permutations(range(1, draw(st.integers(1, 5)) + 1))))
    isr = tuple(draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True)))
    leader = draw(st.sampled_from((*isr, NO_LEADER)))
    states = draw(st.lists(st.sampled_from(["running", "shutting_down", "gone"]), min_size=5, max_size=5))
    running = {b for b in range(1, 6) if states[b - 1] == "running"}
    shutting_down = {b for b in range(1, 6) if states[b - 1] == "shutting_down"}
    state = PartitionState("t", "id", 0, replicas, leader, 3, 7, isr)
    return state, running, shutting_down, draw(st.booleans())


@given(partitions_and_brokers())
def test_planned_partition_states_keep_the_invariants_and_planning_again_changes_nothing(case):
    state, running, shutting_down, unclean = case
    planned = plan_partition_change(state, running, shutting_down, unclean)
    if planned is None:
        return
    assert planned.isr and set(planned.isr) <= set(planned.replicas)
    assert planned.leader == NO_LEADER or planned.leader in planned.isr
    assert planned.leader == NO_LEADER or planned.leader in running | shutting_down
    assert planned.leader_epoch == state.leader_epoch + (planned.leader != state.leader)
    if planned.leader not in state.isr and planned.leader != NO_LEADER:
        assert unclean and not running.intersection(state.isr)
    else:
        assert set(planned.isr) <= set(state.isr)
    assert plan_partition_change(planned, running, shutting_down, unclean) is None


def test_a_pass_given_the_periodic_read_fences_a_broker_whose_heartbeat_stalled_in_it(
    store, register_brokers, controller
):
    epochs = register_brokers([1, 2])

    def read(at_ms: float):
        return read_cluster_items(store.models, [1, 2], lease=False, at_ms=at_ms).brokers

    assert controller.run_once(heartbeats=read(0)).fenced_brokers == ()
    store.heartbeat_broker(1, epochs[1])
    assert controller.run_once(heartbeats=read(SESSION_MS - 1)).fenced_brokers == ()
    assert controller.run_once(heartbeats=read(SESSION_MS)).fenced_brokers == (2,)
    assert [store.get_broker(b).state for b in (1, 2)] == [BrokerState.RUNNING, BrokerState.FENCED]


def test_a_quiet_pass_is_one_at_the_planned_version_with_no_broker_stalled(store, register_brokers, controller):
    epochs = register_brokers([1, 2])
    store.create_topic("t", 2, 2)

    def read(at_ms: float):
        return read_cluster_items(store.models, [1, 2], lease=False, at_ms=at_ms)

    first = read(0)
    assert not controller.quiet_pass(first.version, first.brokers)  # nothing planned yet
    controller.run_once(heartbeats=first.brokers, version=first.version)
    store.heartbeat_broker(1, epochs[1])
    store.heartbeat_broker(2, epochs[2])
    second = read(SESSION_MS - 1)
    assert controller.quiet_pass(second.version, second.brokers)
    assert controller.unchanged_version == second.version
    store.heartbeat_broker(1, epochs[1])
    stalled = read(2 * SESSION_MS - 1)  # broker 2 silent for a whole session since its last sighting
    assert not controller.quiet_pass(stalled.version, stalled.brokers)
    assert controller.run_once(heartbeats=stalled.brokers, version=stalled.version).fenced_brokers == (2,)
    after = read(2 * SESSION_MS)
    assert not controller.quiet_pass(after.version, after.brokers)  # the fence moved the version on
