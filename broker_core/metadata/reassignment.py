"""Partition reassignment (KIP-455): moving a partition's replicas to other brokers while it serves.

An operator (AlterPartitionReassignments, `floe reassign --execute`) names a partition's target
replicas. The controller writes, in one conditional partition update, ``replicas`` = target
followed by the current replicas that are not in it, ``adding_replicas`` = target minus current and
``removing_replicas`` = current minus target. Brokers named in ``adding_replicas`` open the replica
and fetch from the leader like any follower; the leader adds each to the ISR once it has caught up
(`broker_core.replication.isr`). When every target replica is in the ISR the controller completes
the move, again in one conditional update: ``replicas`` = target, the removed replicas leave the
ISR, and if the leader was one of them the first target replica that is in the ISR and running
leads (leader epoch bumped). Brokers that lost their replica stop fetching and delete its local log.
So a partition never has fewer in-sync replicas than before the move, and no record the ISR held
is lost: the new replicas held everything below the high watermark before the old ones left.

A new target for a partition already moving starts from the replicas it had before that move (the
move is reverted and planned again, as Kafka's controller does); null cancels the move: the
original replicas come back, the added ones leave the ISR (NO_REASSIGNMENT_IN_PROGRESS if none was
in progress). A target equal to the current replicas in another order changes only the order (the
preferred leader); a target that only drops replicas completes at once when the rest are in the
ISR.

Every write is `MetadataStore.update_partition`, conditional on the partition epoch and on the
controller epoch, so a controller that lost its lease changes nothing, and an ISR change racing a
plan makes the plan start again from a fresh read (once). Thread-safety: driven by one thread at a
time (the controller's); the store calls block.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace

from broker_core.metadata.errors import PartitionEpochConflictError, UnknownPartitionError, UnknownTopicError
from broker_core.metadata.state import NO_LEADER, BrokerState, ClusterSnapshot, PartitionState
from broker_core.metadata.store import MetadataStore


class ReassignmentRefusal(enum.Enum):
    """Why a partition's reassignment request changes nothing; names follow Kafka's error codes."""

    INVALID_REPLICA_ASSIGNMENT = "invalid_replica_assignment"
    INVALID_REPLICATION_FACTOR = "invalid_replication_factor"
    NO_REASSIGNMENT_IN_PROGRESS = "no_reassignment_in_progress"
    UNKNOWN_TOPIC_OR_PARTITION = "unknown_topic_or_partition"


@dataclass(frozen=True)
class Refused:
    """A refused request for one partition: the reason and the message for the operator."""

    reason: ReassignmentRefusal
    message: str


def _elect(state: PartitionState, replicas: tuple[int, ...], isr: tuple[int, ...], running: Set[int]) -> PartitionState:
    """``state`` with ``replicas``/``isr``, keeping its leader if it stays in the ISR, else the first
    running replica in the ISR (NO_LEADER if none runs; the controller elects once one returns)."""
    if state.leader in isr:
        return replace(state, replicas=replicas, isr=isr)
    candidates = [r for r in replicas if r in isr and r in running]
    moved = state.with_leader(candidates[0] if candidates else NO_LEADER, isr)
    return replace(moved, replicas=replicas)


def revert(state: PartitionState, running: Set[int]) -> PartitionState | Refused:
    """The partition as it was before its ongoing reassignment (Kafka's PartitionReassignmentRevert)."""
    original = state.original_replicas
    isr = tuple(r for r in state.isr if r in original)
    if not isr:
        return Refused(ReassignmentRefusal.INVALID_REPLICA_ASSIGNMENT,
                       f"reverting {state.topic}-{state.partition} to {list(original)} would leave it no in-sync "
                       "replica")
    reverted = _elect(state, original, isr, running)
    return replace(reverted, adding_replicas=(), removing_replicas=())


def plan_completion(state: PartitionState, running: Set[int]) -> PartitionState | None:
    """The partition once its reassignment completes, or None while a target replica is not in the ISR."""
    if not state.reassigning:
        return None
    target = state.target_replicas
    if not set(target) <= set(state.isr):
        return None
    isr = tuple(r for r in state.isr if r in target)
    completed = _elect(state, target, isr, running)
    return replace(completed, adding_replicas=(), removing_replicas=())


def plan_reassignment(state: PartitionState, target: Iterable[int] | None, registered: Set[int], running: Set[int],
                      *, allow_replication_factor_change: bool = True) -> PartitionState | Refused:
    """The partition state that starts (or, for ``target`` None, cancels) a reassignment; see the module doc."""
    if target is None:
        if not state.reassigning:
            return Refused(ReassignmentRefusal.NO_REASSIGNMENT_IN_PROGRESS,
                           f"no reassignment of {state.topic}-{state.partition} is in progress")
        return revert(state, running)
    wanted = tuple(int(r) for r in target)
    if not wanted:
        return Refused(ReassignmentRefusal.INVALID_REPLICA_ASSIGNMENT,
                       "the partition assignment is an empty replica list")
    if len(set(wanted)) != len(wanted):
        return Refused(ReassignmentRefusal.INVALID_REPLICA_ASSIGNMENT,
                       f"the partition assignment {list(wanted)} includes duplicate replicas")
    unknown = [r for r in wanted if r not in registered]
    if unknown:
        return Refused(ReassignmentRefusal.INVALID_REPLICA_ASSIGNMENT,
                       f"the partition assignment includes broker {unknown[0]}, but no such broker is registered")
    base = revert(state, running) if state.reassigning else state
    if isinstance(base, Refused):
        return base
    if not allow_replication_factor_change and len(wanted) != len(base.replicas):
        return Refused(ReassignmentRefusal.INVALID_REPLICATION_FACTOR,
                       f"the replication factor would change from {len(base.replicas)} to {len(wanted)}")
    current = base.replicas
    adding = tuple(r for r in wanted if r not in current)
    removing = tuple(r for r in current if r not in wanted)
    if not adding and not removing:
        return replace(base, replicas=wanted)  # a new order only: the preferred leader changes
    moving = replace(base, replicas=wanted + removing, adding_replicas=adding, removing_replicas=removing)
    return plan_completion(moving, running) or moving


class PartitionReassignments:
    """The controller's side of reassignment: start, cancel, list and complete (see the module doc)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._planned_version: int | None = None

    def alter(self, wanted: Mapping[tuple[str, int], Iterable[int] | None], controller_epoch: int, *,
              allow_replication_factor_change: bool = True) -> dict[tuple[str, int], PartitionState | Refused]:
        """Start or cancel (target None) the reassignment of each partition named; returns the new
        state or the refusal of each. Raises FencedControllerError if the lease moved on."""
        snapshot = self._store.snapshot()
        registered = {b.broker_id for b in snapshot.brokers}
        running = {b.broker_id for b in snapshot.brokers if b.state is BrokerState.RUNNING}
        states = {(name, p.partition): p for name, partitions in snapshot.partitions.items() for p in partitions}
        results: dict[tuple[str, int], PartitionState | Refused] = {}
        for key, target in wanted.items():
            state = states.get(key)
            for attempt in range(2):
                if state is None:
                    results[key] = Refused(ReassignmentRefusal.UNKNOWN_TOPIC_OR_PARTITION,
                                           f"partition {key[0]}-{key[1]} does not exist")
                    break
                plan = plan_reassignment(state, target, registered, running,
                                         allow_replication_factor_change=allow_replication_factor_change)
                if isinstance(plan, Refused) or plan == state:
                    results[key] = plan
                    break
                try:
                    results[key] = self._store.update_partition(plan, state.partition_epoch, controller_epoch)
                    break
                except UnknownPartitionError:
                    state = None
                except PartitionEpochConflictError:
                    if attempt:
                        raise
                    try:
                        state = self._store.get_partition(*key)
                    except (UnknownTopicError, UnknownPartitionError):
                        state = None
        self._planned_version = None
        return results

    def ongoing(self, wanted: Iterable[tuple[str, int]] | None = None) -> list[PartitionState]:
        """The partitions being reassigned now (of ``wanted``; None: all), by topic and partition."""
        snapshot = self._store.snapshot()
        states = [p for partitions in snapshot.partitions.values() for p in partitions if p.reassigning]
        if wanted is not None:
            keys = set(wanted)
            states = [p for p in states if (p.topic, p.partition) in keys]
        return sorted(states, key=lambda p: (p.topic, p.partition))

    def planned_at(self, version: int) -> bool:
        """Whether `complete_ready` at metadata ``version`` would read and write nothing (its last pass
        found nothing to complete at that version)."""
        return self._planned_version is not None and version == self._planned_version

    def complete_ready(self, controller_epoch: int, current: Callable[[], ClusterSnapshot] | None = None,
                       version: int | None = None) -> list[PartitionState]:
        """Complete every reassignment whose target replicas are all in the ISR; the controller calls it
        on each pass. Reads the cluster only when the metadata version moved (ISR changes bump it),
        through ``current`` when given (the controller's snapshot, brought forward by the change
        sequence: a few items rather than a Scan of every partition after each ISR change), else
        with a full snapshot. ``version``, when given, is the metadata version as read (consistently)
        earlier in the same controller pass, used instead of reading it again: a change since then is
        seen on the next pass, as one made just after this read would be."""
        if self._planned_version is not None:
            if version is None:
                version = self._store.metadata_version()
            if version == self._planned_version:
                return []
        snapshot = current() if current is not None else self._store.snapshot()
        running = {b.broker_id for b in snapshot.brokers if b.state is BrokerState.RUNNING}
        completed = []
        for partitions in snapshot.partitions.values():
            for state in partitions:
                plan = plan_completion(state, running)
                if plan is None:
                    continue
                try:
                    completed.append(self._store.update_partition(plan, state.partition_epoch, controller_epoch))
                except (PartitionEpochConflictError, UnknownPartitionError):
                    continue  # planned again from the new state on the next pass
        self._planned_version = None if completed else snapshot.version
        return completed


def balanced_plan(current: Mapping[tuple[str, int], Sequence[int]], sizes: Mapping[tuple[str, int], int],
                  brokers: Iterable[int]) -> dict[tuple[str, int], tuple[int, ...]]:
    """Replicas for each partition of ``current`` on ``brokers`` only, balanced by count and by bytes,
    moving little (what `floe reassign --generate` proposes).

    Replicas on brokers not listed are placed first, each on the listed broker with the fewest
    replicas (then bytes) that lacks the partition. Then, while two brokers' replica counts differ by
    more than one, a replica moves from the fullest to the emptiest, choosing the partition whose size
    best evens their bytes. Last, while swapping a partition of the heaviest broker (by bytes) for a
    smaller one of the lightest narrows the gap between them, the swap is made (counts do not change).
    A moved replica takes the place of the one it replaces, so the preferred leader changes only
    when the first replica moves. ``sizes`` are bytes (0 when unknown). ValueError if a partition has
    more replicas than there are brokers.
    """
    chosen = sorted(set(brokers))
    if not chosen:
        raise ValueError("no brokers to place replicas on")
    widest = max((len(r) for r in current.values()), default=0)
    if widest > len(chosen):
        raise ValueError(f"a partition has {widest} replicas but only {len(chosen)} brokers are given")
    assignment: dict[tuple[str, int], list[int | None]] = {
        key: [r if r in chosen else None for r in replicas] for key, replicas in current.items()}
    count = dict.fromkeys(chosen, 0)
    stored = dict.fromkeys(chosen, 0)

    def size(key: tuple[str, int]) -> int:
        return sizes.get(key, 0)

    def put(key: tuple[str, int], slot: int, broker: int) -> None:
        old = assignment[key][slot]
        if old is not None:
            count[old] -= 1
            stored[old] -= size(key)
        assignment[key][slot] = broker
        count[broker] += 1
        stored[broker] += size(key)

    for key, replicas in assignment.items():
        for r in replicas:
            if r is not None:
                count[r] += 1
                stored[r] += size(key)
    for key in sorted(assignment, key=lambda k: (-size(k), k)):
        for slot, r in enumerate(assignment[key]):
            if r is None:
                put(key, slot, min((b for b in chosen if b not in assignment[key]),
                                   key=lambda b: (count[b], stored[b], b)))
    while True:
        full = max(chosen, key=lambda b: (count[b], stored[b], -b))
        empty = min(chosen, key=lambda b: (count[b], stored[b], b))
        if count[full] - count[empty] <= 1:
            break
        gap = (stored[full] - stored[empty]) / 2
        movable = [k for k, r in assignment.items() if full in r and empty not in r]
        key = min(movable, key=lambda k: (abs(gap - size(k)), k))
        put(key, assignment[key].index(full), empty)
    for _ in range(len(assignment) * len(chosen)):
        heavy = max(chosen, key=lambda b: (stored[b], -b))
        light = min(chosen, key=lambda b: (stored[b], b))
        gap = stored[heavy] - stored[light]
        swaps = [(abs(gap - 2 * (size(p) - size(q))), p, q)
                 for p, rp in assignment.items() if heavy in rp and light not in rp
                 for q, rq in assignment.items() if light in rq and heavy not in rq and size(q) < size(p)]
        if not swaps:
            break
        narrowed, p, q = min(swaps)
        if narrowed >= gap:
            break
        put(p, assignment[p].index(heavy), light)
        put(q, assignment[q].index(light), heavy)
    return {key: tuple(b for b in replicas if b is not None) for key, replicas in assignment.items()}
