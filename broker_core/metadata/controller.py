"""The controller: a lease any broker can hold, broker fencing and leader election from the ISR.

``ControllerLease`` follows dynamodb-lock-client. The lease is one item (holder, controller epoch,
heartbeat counter, lease duration). The holder bumps the heartbeat counter every
``heartbeat_interval_ms`` with a write conditional on its controller epoch. A contender never
compares clocks with the holder: it remembers the (holder, epoch, heartbeat) it last saw and when
it first saw it on its OWN monotonic clock, and only when that triple has not changed for a whole
lease duration does it take the lease, with a write conditional on the epoch and heartbeat it
observed that bumps the controller epoch. The controller epoch is the fencing token: every
controller write is a transaction that also checks the lease still carries it, so a controller
that lost the lease (paused, partitioned) can no longer change anything; its writes raise
FencedControllerError.

``Controller`` is what the lease holder runs. ``run_once`` watches every broker's heartbeat
counter the same way (own monotonic clock, ``session_timeout_ms``), fences a broker whose counter
stalls, and re-plans every partition: brokers that are fenced or shutting down leave the ISR, and a
partition whose leader is one of them gets the first live ISR member (in replica order) as
leader, with bumped leader and partition epochs. If no ISR member is live the partition is left
without a leader (-1) and keeps its last ISR, whose members all hold every acknowledged record,
so the first of them to come back is elected cleanly; only a topic with
``unclean.leader.election.enable=true`` takes any live replica instead.

A broker's loop, from a worker thread::

    epoch = lease.try_acquire(broker_id)     # takes, or renews, the lease
    if epoch is not None:
        if controller is None or controller.controller_epoch != epoch:
            controller = Controller(store, epoch, session_timeout_ms)
        controller.run_once()                # FencedControllerError: the lease moved on

Controlled shutdown: the controller calls ``Controller.controlled_shutdown`` for itself or when
asked. A broker that is not the controller calls
``MetadataStore.set_broker_state(id, epoch, BrokerState.SHUTTING_DOWN)`` with its own broker epoch;
the controller's next ``run_once`` moves its leaderships, and the broker waits until
``MetadataStore.partitions_led_by(id)`` is empty (or a deadline passes) before it exits.

Thread-safety: ControllerLease and Controller keep observations in memory and are driven by one
thread.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from pynamodb.exceptions import PynamoDBException

from broker_core.dynamodb_tables import condition_failed
from broker_core.metadata.cluster_reads import BrokerHeartbeat, BrokerHeartbeats
from broker_core.metadata.errors import (
    FencedControllerError,
    MetadataUnavailableError,
    PartitionEpochConflictError,
    UnknownPartitionError,
)
from broker_core.metadata.models import CONTROLLER_ITEM
from broker_core.metadata.state import (
    NO_HOLDER,
    NO_LEADER,
    UNCLEAN_LEADER_ELECTION_CONFIG,
    BrokerRegistration,
    BrokerState,
    ClusterSnapshot,
    ControllerLeaseState,
    PartitionState,
)
from broker_core.metadata.store import MetadataStore

log = logging.getLogger(__name__)

DEFAULT_LEASE_DURATION_MS = 10_000
DEFAULT_SESSION_TIMEOUT_MS = 9_000  # Kafka's broker.session.timeout.ms default


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class _Unread(enum.Enum):
    UNREAD = enum.auto()


_UNREAD = _Unread.UNREAD


def _lease_state(item: Any) -> ControllerLeaseState:
    return ControllerLeaseState(
        holder=int(item.holder),
        controller_epoch=int(item.controller_epoch),
        heartbeat=int(item.heartbeat),
        lease_duration_ms=int(item.lease_duration_ms),
    )


class ControllerLease:
    """One broker's view of, and claim on, the controller lease item."""

    def __init__(self, store: MetadataStore, lease_duration_ms: int = DEFAULT_LEASE_DURATION_MS) -> None:
        if lease_duration_ms <= 0:
            raise ValueError(f"lease duration must be positive, got {lease_duration_ms} ms")
        self._model = store.models.controller_lease
        self.lease_duration_ms = lease_duration_ms
        self._holder: int | None = None
        self._epoch: int | None = None
        self._observed: tuple[int, int, int] | None = None
        self._observed_since_ms = 0.0

    @property
    def controller_epoch(self) -> int | None:
        """The controller epoch this process holds, or None when it does not hold the lease."""
        return self._epoch

    @property
    def holder(self) -> int | None:
        return self._holder

    @property
    def heartbeat_interval_ms(self) -> float:
        """How often the holder should call ``heartbeat()``: a third of the lease duration."""
        return self.lease_duration_ms / 3

    def current(self) -> ControllerLeaseState | None:
        """The lease item as stored now (consistent read), or None if no broker ever took it."""
        try:
            item = self._model.get(CONTROLLER_ITEM, consistent_read=True)
        except self._model.DoesNotExist:
            return None
        except PynamoDBException as err:
            raise MetadataUnavailableError(f"read controller lease: {err}") from err
        return _lease_state(item)

    def try_acquire(self, broker_id: int, now_ms: float | None = None,
                    state: ControllerLeaseState | None | _Unread = _UNREAD) -> int | None:
        """Take the lease if it is free, released, or has not moved for a whole lease duration.

        Returns the controller epoch now held, or None while another holder's lease is still
        running (as timed on this process's monotonic clock from the first sighting of its
        current heartbeat). When this process already holds the lease, the call renews it (a
        ``heartbeat()``) and returns the epoch, or None if the lease turns out to be lost; calling
        it every ``heartbeat_interval_ms`` is therefore all a broker needs to do. ``now_ms`` is a
        reading of the same monotonic clock (for tests). ``state``, when given, is the lease item as
        just read (`broker_core.metadata.cluster_reads`), used instead of reading it again.
        """
        if self._epoch is not None and self._holder == broker_id:
            try:
                self.heartbeat()
            except FencedControllerError:
                return None
            return self._epoch
        now = monotonic_ms() if now_ms is None else now_ms
        if isinstance(state, _Unread):
            state = self.current()
        if not self.lapsed(state, now):
            return None
        model = self._model
        if state is None:
            item = model(
                CONTROLLER_ITEM,
                holder=broker_id,
                controller_epoch=1,
                heartbeat=0,
                lease_duration_ms=self.lease_duration_ms,
            )
            return self._claim(broker_id, 1, lambda: item.save(condition=model.item.does_not_exist()))
        new_epoch = state.controller_epoch + 1
        condition = (model.controller_epoch == state.controller_epoch) & (model.heartbeat == state.heartbeat)
        actions = [
            model.holder.set(broker_id),
            model.controller_epoch.set(new_epoch),
            model.heartbeat.add(1),
            model.lease_duration_ms.set(self.lease_duration_ms),
        ]
        return self._claim(broker_id, new_epoch, lambda: model(CONTROLLER_ITEM).update(actions, condition))

    def lapsed(self, state: ControllerLeaseState | None, now_ms: float) -> bool:
        """Whether the lease as read (``state``, at ``now_ms`` on this process's monotonic clock) may be
        claimed: never taken, released, or its (holder, epoch, heartbeat) unchanged for a whole lease
        duration since this process first saw it. Records the sighting; no DynamoDB call, so a broker
        waiting for the role decides on the event loop, and only a claim (`try_acquire`) writes.
        Asking again about the same read gives the same answer."""
        if state is None or state.holder == NO_HOLDER:
            return True
        observed = (state.holder, state.controller_epoch, state.heartbeat)
        if observed != self._observed:
            self._observed = observed
            self._observed_since_ms = now_ms
            return False
        return now_ms - self._observed_since_ms >= state.lease_duration_ms

    def _claim(self, broker_id: int, epoch: int, write: Callable[[], object]) -> int | None:
        try:
            write()
        except PynamoDBException as err:
            if condition_failed(err):
                self._observed = None
                return None
            raise MetadataUnavailableError(f"acquire controller lease: {err}") from err
        self._holder, self._epoch, self._observed = broker_id, epoch, None
        return epoch

    def heartbeat(self) -> None:
        """Bump the heartbeat counter; FencedControllerError (and the lease is dropped) if lost."""
        if self._epoch is None or self._holder is None:
            raise FencedControllerError(None)
        model = self._model
        condition = (model.controller_epoch == self._epoch) & (model.holder == self._holder)
        try:
            model(CONTROLLER_ITEM).update([model.heartbeat.add(1)], condition)
        except PynamoDBException as err:
            if condition_failed(err):
                epoch, self._holder, self._epoch = self._epoch, None, None
                raise FencedControllerError(epoch) from err
            raise MetadataUnavailableError(f"controller heartbeat: {err}") from err

    def release(self) -> None:
        """Give the lease up so another broker can take it at once (no-op if not held)."""
        if self._epoch is None:
            return
        model = self._model
        condition = (model.controller_epoch == self._epoch) & (model.holder == self._holder)
        epoch, self._holder, self._epoch = self._epoch, None, None
        try:
            model(CONTROLLER_ITEM).update([model.holder.set(NO_HOLDER), model.heartbeat.add(1)], condition)
        except PynamoDBException as err:
            if not condition_failed(err):
                raise MetadataUnavailableError(f"release controller lease epoch {epoch}: {err}") from err


def plan_partition_change(
    state: PartitionState,
    running: Set[int],
    shutting_down: Set[int],
    unclean_election_allowed: bool = False,
) -> PartitionState | None:
    """The leader/ISR a partition should have given which brokers run; None if it needs no change.

    Only RUNNING brokers stay in the ISR or are elected. A leader that is RUNNING keeps leading;
    otherwise the first replica (in assignment order) that is in the ISR and RUNNING leads. A
    shutting-down leader with no such successor keeps leading until it is gone. If no ISR member
    runs, the ISR is kept as it was and the leader is NO_LEADER, unless unclean election is
    allowed, in which case the first RUNNING replica leads alone.
    """
    live_isr = [b for b in state.isr if b in running]
    if state.leader in running:
        leader = state.leader
    else:
        successors = [b for b in state.replicas if b in live_isr]
        if successors:
            leader = successors[0]
        elif state.leader in shutting_down:
            leader = state.leader
        else:
            live_replicas = [b for b in state.replicas if b in running]
            if unclean_election_allowed and live_replicas:
                return state.with_leader(live_replicas[0], [live_replicas[0]])
            leader = NO_LEADER
    isr = [b for b in state.isr if b in running or b == leader] or list(state.isr)
    if leader == state.leader and tuple(isr) == state.isr:
        return None
    return state.with_leader(leader, isr)


class ElectionOutcome(enum.Enum):
    """Why an asked-for election (ElectLeaders) changes nothing; names follow Kafka's error codes."""

    ELECTION_NOT_NEEDED = "election_not_needed"
    PREFERRED_LEADER_NOT_AVAILABLE = "preferred_leader_not_available"
    ELIGIBLE_LEADERS_NOT_AVAILABLE = "eligible_leaders_not_available"


def plan_preferred_election(state: PartitionState, running: Set[int]) -> PartitionState | ElectionOutcome:
    """Kafka's preferred election: the first assigned replica leads, if it runs and is in the ISR."""
    preferred = state.replicas[0] if state.replicas else NO_LEADER
    if state.leader == preferred:
        return ElectionOutcome.ELECTION_NOT_NEEDED
    if preferred not in running or preferred not in state.isr:
        return ElectionOutcome.PREFERRED_LEADER_NOT_AVAILABLE
    return state.with_leader(preferred, state.isr)


def plan_unclean_election(state: PartitionState, running: Set[int]) -> PartitionState | ElectionOutcome:
    """Kafka's unclean election: only for a partition whose leader is gone; the first running ISR
    member leads if there is one, else the first running replica leads alone (records the ISR held
    beyond its log are lost, which is what the operator asked for)."""
    if state.leader in running:
        return ElectionOutcome.ELECTION_NOT_NEEDED
    live_isr = [b for b in state.replicas if b in state.isr and b in running]
    if live_isr:
        return state.with_leader(live_isr[0], [b for b in state.isr if b in running])
    live = [b for b in state.replicas if b in running]
    if not live:
        return ElectionOutcome.ELIGIBLE_LEADERS_NOT_AVAILABLE
    return state.with_leader(live[0], [live[0]])


def imbalanced_brokers(partitions: Iterable[PartitionState], percentage: int) -> set[int]:
    """Brokers that lead fewer than they should of the partitions they are preferred for: more than
    ``percentage`` percent of those are led by another broker (Kafka's leader imbalance ratio)."""
    preferred_of: dict[int, int] = {}
    not_led: dict[int, int] = {}
    for state in partitions:
        if not state.replicas:
            continue
        preferred = state.replicas[0]
        preferred_of[preferred] = preferred_of.get(preferred, 0) + 1
        if state.leader != preferred:
            not_led[preferred] = not_led.get(preferred, 0) + 1
    return {b for b, total in preferred_of.items() if not_led.get(b, 0) * 100 > percentage * total}


def unclean_election_enabled(configs: Mapping[str, str]) -> bool:
    """Whether the topic configs set ``unclean.leader.election.enable`` to true (default false)."""
    return configs.get(UNCLEAN_LEADER_ELECTION_CONFIG, "false").strip().lower() == "true"


@dataclass(frozen=True)
class ControllerRunResult:
    """What one controller pass changed."""

    fenced_brokers: tuple[int, ...]
    changed_partitions: tuple[PartitionState, ...]
    # Those of changed_partitions that a SHUTTING_DOWN broker led: moved by its controlled shutdown.
    shutdown_moves: tuple[PartitionState, ...] = ()


@dataclass(frozen=True)
class ControlledShutdownResult:
    """What `Controller.controlled_shutdown` did: the partitions its pass changed (new states), of those
    the ones a SHUTTING_DOWN broker led (moved off it), and those the broker still leads (no other
    live ISR member; empty: it may stop)."""

    changed_partitions: tuple[PartitionState, ...]
    shutdown_moves: tuple[PartitionState, ...]
    still_led: list[PartitionState]


@dataclass
class _HeartbeatObservation:
    broker_epoch: int
    heartbeat: int
    since_ms: float


class Controller:
    """Broker fencing and leader election for one controller epoch (one term of the lease).

    Heartbeat observations are timed on this process's monotonic clock; a broker keeps one
    Controller across terms (see `observe`, `begin_term`), so they survive a change of controller.
    """

    def __init__(
        self,
        store: MetadataStore,
        controller_epoch: int,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    ) -> None:
        if session_timeout_ms <= 0:
            raise ValueError(f"session timeout must be positive, got {session_timeout_ms} ms")
        self._store = store
        self.controller_epoch = controller_epoch
        self.session_timeout_ms = session_timeout_ms
        # The metadata version the current pass was given (`run_once`), and the one the last pass read
        # and found already planned (nothing to do), else None: the pass's other duties (reassignment
        # completion) use it rather than read it again.
        self._pass_version: int | None = None
        self.unchanged_version: int | None = None
        self._observations: dict[int, _HeartbeatObservation] = {}
        self._planned_version: int | None = None
        self._snapshot: ClusterSnapshot | None = None
        # The broker epoch of each broker as of this controller's last complete pass (see `_elect_leaders`).
        # ISR-only changes that drop fenced brokers wait until then after an election pass (monotonic ms).
        self._isr_only_not_before = 0.0
        # Set by a pass that elected leaders and left ISR-only changes, until those are written.
        self._isr_only_waiting = False
        # Each broker's epoch as of the last complete pass, this controller's or (read at the start of
        # its term) the previous controller's: a broker registered again since is a new incarnation.
        self._incarnations: dict[int, int] | None = None
        self._recorded_incarnations: dict[int, int] | None = None

    def observe(self, now_ms: float | None = None, heartbeats: BrokerHeartbeats | None = None
                ) -> list[BrokerRegistration | BrokerHeartbeat]:
        """Record each broker's heartbeat as seen now; return the brokers stalled past the session timeout.

        ``heartbeats`` is a read of the brokers' registrations already made (`read_cluster_items`), timed
        at its ``at_ms`` unless ``now_ms`` is given; without it, every registration is read (a Scan) now.
        A broker that read asked for and did not find has no registration and is forgotten, as is a
        fenced one; brokers a read did not ask for keep their observations.

        Observing needs no lease: a broker waiting for the controller role observes all along, so
        that when it takes over (as `begin_term`) it can fence a broker that died with the old
        controller without first waiting another whole session timeout.
        """
        brokers: Iterable[BrokerRegistration | BrokerHeartbeat]
        if heartbeats is None:
            now = monotonic_ms() if now_ms is None else now_ms
            brokers = self._store.list_brokers()
            gone = set(self._observations) - {b.broker_id for b in brokers}
        else:
            now = heartbeats.at_ms if now_ms is None else now_ms
            brokers = heartbeats.found
            gone = heartbeats.missing
        stalled = []
        for broker_id in gone:
            self._observations.pop(broker_id, None)
        for broker in brokers:
            if broker.state is BrokerState.FENCED:
                self._observations.pop(broker.broker_id, None)
                continue
            seen = self._observations.get(broker.broker_id)
            if seen is None or (seen.broker_epoch, seen.heartbeat) != (broker.broker_epoch, broker.heartbeat):
                self._observations[broker.broker_id] = _HeartbeatObservation(
                    broker.broker_epoch, broker.heartbeat, now
                )
                continue
            if now - seen.since_ms >= self.session_timeout_ms:
                stalled.append(broker)
        return stalled

    def watched_broker_ids(self) -> set[int]:
        """The brokers whose heartbeats this controller watches: those it observes and those of the
        cluster it last planned from (a read of heartbeats asks for these, with the broker's image's)."""
        watched = set(self._observations)
        if self._snapshot is not None:
            watched.update(b.broker_id for b in self._snapshot.brokers)
        return watched

    def quiet_pass(self, version: int, heartbeats: BrokerHeartbeats) -> bool:
        """Observe ``heartbeats`` and tell whether a `run_once` at ``version`` would read and write
        nothing: this controller's last pass planned from ``version`` (nothing changed since) and no
        broker's heartbeat stalled. Then it counts as that pass (`unchanged_version` is set) and the
        caller skips `run_once`, which idles on the event loop without a worker thread; otherwise the
        caller runs `run_once` with the same read (observing it again changes nothing)."""
        if self._planned_version is None or version != self._planned_version:
            return False
        if self.observe(None, heartbeats):
            return False
        self.unchanged_version = version
        return True

    def begin_term(self, controller_epoch: int, known: ClusterSnapshot | None = None) -> None:
        """Act for a new controller epoch, keeping the heartbeat observations made so far.

        ``known`` is the cluster as this broker already holds it (its metadata image at some
        version): the term starts from it, brought forward by the change sequence, rather than from
        a read of every partition, which on a failover would come before the first election. It is
        safe to start from any earlier version: what the change sequence cannot carry forward is
        read whole, and every write stays conditional on the epochs it planned from.
        """
        self.controller_epoch = controller_epoch
        self._planned_version = None
        self._snapshot = known

    def run_once(self, now_ms: float | None = None, version: int | None = None,
                 heartbeats: BrokerHeartbeats | None = None) -> ControllerRunResult:
        """Fence brokers whose heartbeat stalled past the session timeout, then re-plan partitions.

        ``now_ms`` is a reading of this process's monotonic clock (for tests). A controller with no
        observations yet waits a full session timeout before fencing. ``version``, when given, is the
        metadata version as read (consistently) at the start of this pass, used instead of reading it
        again to tell whether anything changed since the last plan, unless this pass fenced a broker.
        ``heartbeats``, when given, is the brokers' registrations as read at the start of this pass
        (`observe`), used instead of a Scan of them.
        Raises FencedControllerError once the lease has moved past ``controller_epoch``.
        """
        controller_epoch = self.controller_epoch
        self._pass_version = version
        fenced = []
        for broker in self.observe(now_ms, heartbeats):
            if self._store.fence_broker(
                broker.broker_id, broker.broker_epoch, broker.heartbeat, controller_epoch
            ):
                self._pass_version = None  # the fence moved the version on: read it again
                fenced.append(broker.broker_id)
            self._observations.pop(broker.broker_id, None)
        changed, shutdown_moves = self._elect_leaders(controller_epoch, monotonic_ms() if now_ms is None else now_ms)
        return ControllerRunResult(fenced_brokers=tuple(fenced), changed_partitions=tuple(changed),
                                   shutdown_moves=tuple(shutdown_moves))

    def elect(self, wanted: Iterable[tuple[str, int]] | None, *, unclean: bool
              ) -> dict[tuple[str, int], PartitionState | ElectionOutcome | None]:
        """ElectLeaders: a preferred (or unclean) election of each partition of ``wanted`` (None: all).

        Each partition maps to its new state, the reason it kept its leader, or None if the cluster
        lacks it. With ``wanted`` None, partitions that needed no election are left out, as Kafka.
        A partition whose state moved on since the snapshot is planned again from a fresh read once.
        Raises FencedControllerError if this controller lost its lease.
        """
        snapshot = self._store.snapshot()
        running = {b.broker_id for b in snapshot.brokers if b.state is BrokerState.RUNNING}
        states = {(name, p.partition): p for name, partitions in snapshot.partitions.items() for p in partitions}
        keys = sorted(states) if wanted is None else list(wanted)
        plan = plan_unclean_election if unclean else plan_preferred_election
        results: dict[tuple[str, int], PartitionState | ElectionOutcome | None] = {}
        for key in keys:
            state = states.get(key)
            for attempt in range(2):
                if state is None:
                    results[key] = None
                    break
                proposal = plan(state, running)
                if isinstance(proposal, ElectionOutcome):
                    results[key] = proposal
                    break
                try:
                    results[key] = self._store.update_partition(proposal, state.partition_epoch, self.controller_epoch)
                    break
                except UnknownPartitionError:
                    results[key] = None
                    break
                except PartitionEpochConflictError:
                    if attempt:
                        raise
                    state = self._store.get_partition(*key)
        if wanted is None:
            results = {k: r for k, r in results.items() if r is not ElectionOutcome.ELECTION_NOT_NEEDED}
        return results

    def rebalance_leaders(self, percentage: int) -> list[PartitionState]:
        """auto.leader.rebalance.enable: for each broker whose leader imbalance is above ``percentage``,
        a preferred election of every partition it is preferred for and can lead now."""
        snapshot = self._store.snapshot()
        partitions = [p for states in snapshot.partitions.values() for p in states]
        brokers = imbalanced_brokers(partitions, percentage)
        if not brokers:
            return []
        running = {b.broker_id for b in snapshot.brokers if b.state is BrokerState.RUNNING}
        changed = []
        for state in partitions:
            if not state.replicas or state.replicas[0] not in brokers:
                continue
            proposal = plan_preferred_election(state, running)
            if isinstance(proposal, ElectionOutcome):
                continue
            try:
                changed.append(self._store.update_partition(proposal, state.partition_epoch, self.controller_epoch))
            except (PartitionEpochConflictError, UnknownPartitionError):
                continue
        return changed

    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> ControlledShutdownResult:
        """Mark the broker SHUTTING_DOWN and move its leaderships to other live ISR members.

        Returns what its pass changed and the partitions the broker still leads (no other live ISR
        member); none still led means the broker may stop. Raises BrokerFencedError if ``broker_epoch`` is
        stale and FencedControllerError if this controller lost its lease.
        """
        self._store.set_broker_state(broker_id, broker_epoch, BrokerState.SHUTTING_DOWN)
        changed, moved = self._elect_leaders(self.controller_epoch, monotonic_ms())
        return ControlledShutdownResult(changed_partitions=tuple(changed), shutdown_moves=tuple(moved),
                                        still_led=self._store.partitions_led_by(broker_id))

    def current_snapshot(self) -> ClusterSnapshot:
        """The cluster as of now, read as cheaply as `_current_snapshot` can (for the controller's
        other duties of the same pass, e.g. completing reassignments)."""
        return self._current_snapshot()

    def _current_snapshot(self) -> ClusterSnapshot:
        """The cluster as of now: the last snapshot brought forward by the change sequence when only
        partitions and topics changed since (a few items read, e.g. after this controller's own
        elections or a topic creation), else a full snapshot."""
        cached = self._snapshot
        if cached is not None:
            version = self._store.metadata_version()
            delta = self._store.metadata_delta(cached.version, version)
            if delta is not None:
                updated = cached.with_delta(version, delta)
                if updated is not None:
                    self._snapshot = updated
                    return updated
        self._snapshot = self._store.snapshot()
        return self._snapshot

    def _elect_leaders(self, controller_epoch: int, now_ms: float) -> tuple[list[PartitionState], list[PartitionState]]:
        """The partitions changed (new states), and of those the ones a SHUTTING_DOWN broker led."""
        # Every broker-state and partition change bumps the metadata version, so a version this
        # controller already planned from cannot call for a change; skip the full read.
        self.unchanged_version = None
        version, self._pass_version = self._pass_version, None
        if self._planned_version is not None:
            if version is None:
                version = self._store.metadata_version()
            if version == self._planned_version:
                self.unchanged_version = version
                return [], []
        snapshot = self._current_snapshot()
        running = {b.broker_id for b in snapshot.brokers if b.state is BrokerState.RUNNING}
        shutting_down = {b.broker_id for b in snapshot.brokers if b.state is BrokerState.SHUTTING_DOWN}
        # A broker registered again since this controller's last pass is a new incarnation: its ISR
        # entries are its old one's, which leaders may have stopped counting once it was fenced
        # (Partition.exclude_fenced), so it leaves the ISRs that have another running member and
        # leads none of them, until a leader finds it caught up (KIP-903: a re-registered broker's
        # ISR memberships are stale). An ISR with no other running member keeps it: no replica
        # holds more.
        # The epochs counted last are stored (`write_controller_incarnations`), so that a new controller
        # also knows a broker registered again since the previous controller's last pass: otherwise a
        # controller killed between a fence and its ISR writes, and a quick restart of the fenced
        # broker, would leave an electable ISR member that leaders had stopped counting.
        if self._incarnations is None:
            self._incarnations = self._recorded_incarnations = self._store.controller_incarnations()
        known = self._incarnations
        reborn = {b.broker_id for b in snapshot.brokers
                  if b.broker_id in running and known.get(b.broker_id, b.broker_epoch) != b.broker_epoch}
        counted = running - reborn
        proposals = []
        previous_leaders: dict[tuple[str, int], int] = {}
        previous_isrs: dict[tuple[str, int], tuple[int, ...]] = {}
        for name, partitions in snapshot.partitions.items():
            unclean = unclean_election_enabled(snapshot.topics[name].configs)
            for partition in partitions:
                eligible = running
                if reborn and not reborn.isdisjoint(partition.isr) and not counted.isdisjoint(partition.isr):
                    eligible = counted
                proposal = plan_partition_change(partition, eligible, shutting_down, unclean)
                if proposal is not None:
                    proposals.append((proposal, partition.partition_epoch))
                    previous_leaders[(partition.topic, partition.partition)] = partition.leader
                    previous_isrs[(partition.topic, partition.partition)] = partition.isr
        # Elections first: a partition without a live leader takes no write at all until its change
        # is written, one whose leader lives only waits for its ISR to shrink (to min.insync.replicas).
        proposals.sort(key=lambda change: change[0].leader == previous_leaders[(change[0].topic, change[0].partition)])
        # A pass with elections leaves the ISR-only changes that only drop fenced (or re-registered)
        # brokers for half a session after it has written them: the wait starts at the next pass,
        # which begins once the elections are written. Leaders no longer wait for a fenced member
        # (Partition.exclude_fenced), so those writes are not on the failover's path, and written
        # behind the elections they held the store (the local stack's moto runs one transaction at
        # a time, ~1 s each for 97 partitions under load) and the controller broker's CPU while the
        # elected partitions waited for their first acknowledged write. A SHUTTING_DOWN broker
        # leaves ISRs in the same pass (leaders still count it).
        def deferrable(change: tuple[PartitionState, int]) -> bool:
            key = (change[0].topic, change[0].partition)
            return (change[0].leader == previous_leaders[key]
                    and shutting_down.isdisjoint(set(previous_isrs[key]) - set(change[0].isr)))

        now = [change for change in proposals if not deferrable(change)]
        isr_only_left = len(now) < len(proposals)
        if isr_only_left and now and not self._isr_only_waiting:
            self._isr_only_not_before = math.inf  # until the pass after these elections
            self._isr_only_waiting = True
        elif isr_only_left and self._isr_only_not_before == math.inf:
            # Half a session from the elections' start was less than the elections themselves take
            # at 1,000 partitions under load with a 3 s session: the ISR-only transactions then ran
            # right behind them, while the elected partitions took their first writes.
            self._isr_only_not_before = now_ms + self.session_timeout_ms / 2
        deferred = isr_only_left and now_ms < self._isr_only_not_before
        if not deferred:
            self._isr_only_waiting = False
        if deferred:
            proposals = now
        # One pass moves every partition a fenced broker led or followed, in a few transactions
        # (see MetadataStore.update_partitions) rather than one round trip per partition. A
        # partition whose leader changed its ISR since the snapshot, or whose topic went away,
        # comes back as conflicted: the next pass plans it from the new state.
        result = self._store.update_partitions(proposals, controller_epoch)
        for written in result.written:
            previous = previous_leaders.get((written.topic, written.partition), -1)
            log.info("%s-%d: leader %d -> %d at epoch %d, ISR %s", written.topic, written.partition,
                     previous, written.leader, written.leader_epoch, list(written.isr),
                     extra={"topic": written.topic, "partition": written.partition, "epoch": written.leader_epoch,
                            "previous_leader": previous, "leader": written.leader,
                            "partition_epoch": written.partition_epoch, "isr": list(written.isr),
                            "controller_epoch": controller_epoch})
        self._planned_version = None if result.written or result.conflicted or deferred else snapshot.version
        if not result.conflicted and not deferred:
            incarnations = {b.broker_id: b.broker_epoch for b in snapshot.brokers}
            if incarnations != self._recorded_incarnations:
                # Written before this pass counts them: a controller that dies first leaves the old
                # record, and its successor treats these brokers as registered again (removing them
                # from ISRs once more at worst, never electing a stale member).
                self._store.write_controller_incarnations(incarnations, controller_epoch)
                self._recorded_incarnations = incarnations
            self._incarnations = incarnations
        shutdown_moves = [written for written in result.written
                          if previous_leaders.get((written.topic, written.partition), -1) in shutting_down]
        return list(result.written), shutdown_moves
