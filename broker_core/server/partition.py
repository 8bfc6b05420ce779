"""One hosted replica of a topic partition: its log, its role, and the high watermark.

The leader tracks every follower's log-end offset (reported by follower Fetch requests); the high
watermark is the minimum log-end offset over the ISR and never moves backwards. Long-poll fetches park
on `change_future` and are woken on every append and every HW move; incremental fetch sessions that
read the replica are marked instead (`add_session`, `broker_core.server.fetch_sessions`), on the same
events and on log start moves, follower appends and truncations. Acks=all produces park on
`high_watermark_future(target)` (Kafka's produce purgatory): woken only once the HW reaches their
target, or when the partition's role, ISR or state changes and they must look again.

Thread-safety: a Partition belongs to the broker's event loop; only coroutines on that loop touch it.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
import os
import shutil
import time
from collections.abc import Callable, Hashable, Mapping, Set
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from broker_core.log.append import ValidatedBatches
from broker_core.log.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from broker_core.log.config import LogConfig
from broker_core.log.errors import CorruptCheckpointError
from broker_core.log.partition_log import AppendInfo, PartitionLog, PendingAppend
from broker_core.log.producer_state import OutOfOrderSequenceError, ProducerState
from broker_core.records.control import ControlRecordType, build_control_batch
from broker_core.records.header import parse_header

log = logging.getLogger(__name__)

# Where hosted replicas' logs flush what a segment roll sealed (`PartitionLog._flush_in_background`):
# off the event loop, whose appends would otherwise wait behind the fsyncs of every roll.
_ROLL_FLUSH_THREADS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="floe-roll-flush")


# Where a follower's large appends check their batches and write their bytes (`append_replicated`):
# off the event loop, which would otherwise wait on the CRC and the page cache for every replicated
# megabyte while producers' requests queue behind it.
_REPLICA_APPEND_THREADS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="floe-replica-append")
# Replicated appends at least this large go to those threads; smaller ones (an in-sync follower keeping
# up with producers) cost less on the loop than the two hand-overs would.
REPLICA_APPEND_OFF_LOOP_BYTES = 64 * 1024


def _flush_off_the_loop(flush: Callable[[], None]) -> None:
    _ROLL_FLUSH_THREADS.submit(flush).add_done_callback(_report_flush_failure)


def _report_flush_failure(future: Future) -> None:
    error = future.exception()
    if error is not None:
        # The recovery point stays where it was, so recovery re-validates these segments after a crash.
        log.error("a log's background file step (a roll's flush, or unlinking retired segments) failed: %r", error)

_WAITER_NUMBERS = itertools.count()
PARTITION_METADATA_FILE = "partition.metadata"
HIGH_WATERMARK_FILE = "high-watermark"


def _write_marker(path: Path, topic_id: str) -> None:
    """The replica's ``partition.metadata`` (Kafka's format), in three system calls: written for every
    replica of a topic created, on each broker, so without the layers of a text file object."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"version: 0\ntopic_id: {topic_id}\n".encode("ascii"))
    finally:
        os.close(fd)


def write_high_watermark_checkpoint(path: Path, high_watermark: int) -> None:
    """Write a replica's HW checkpoint, without fsyncs: a broker writes one per replica whose HW
    moved every checkpoint interval (1,000 replicas: 2,000 fsyncs each time, a third of a survivor's
    time in a failover profile), and losing one to a power cut costs only a lower HW at the next
    start, which the leader's HW (on a follower) or the followers' fetches (on a leader) move on;
    a process crash loses nothing, the file being replaced by a rename."""
    write_offset_checkpoint(path, high_watermark, durable=False)


class VerificationGuard:
    """One verification in progress for a producer on a partition; a marker for the producer revokes it."""

    __slots__ = ("valid",)

    def __init__(self) -> None:
        self.valid = True


class ChangeWatcher(Protocol):
    """Told (``mark``, with the key it watches the replica by) whenever the replica changes: an incremental
    fetch session reading it, or the replica fetcher following it."""

    def mark(self, key: Hashable) -> None: ...


class MarkedSession(ChangeWatcher, Protocol):
    """An incremental fetch session reading this replica (`broker_core.server.fetch_sessions.FetchSession`)."""

    last_read_ms: float


@dataclass
class ReplicaState:
    """What the leader knows of one follower. ``parked_in``: the follower's fetch session, which
    stopped reading this partition when it was caught up and quiet; until the partition changes,
    every read of that session counts as a fetch at the log end (see `Partition.park_follower`)."""

    log_end_offset: int = 0
    log_start_offset: int = -1
    last_caught_up_ms: float = 0.0
    last_fetch_ms: float = 0.0
    leader_end_at_last_fetch: int = 0
    parked_in: MarkedSession | None = None

    def caught_up_ms(self) -> float:
        """When the follower was last caught up (Kafka's lastCaughtUpTimeMs)."""
        if self.parked_in is not None:
            return max(self.last_caught_up_ms, self.parked_in.last_read_ms)
        return self.last_caught_up_ms

    def unpark(self) -> None:
        """The partition changed: what the parked session's reads counted for becomes fixed, as if the
        follower's fetch at its session's last read had been recorded (at the log end it still had)."""
        session = self.parked_in
        if session is not None:
            self.parked_in = None
            self.last_caught_up_ms = max(self.last_caught_up_ms, session.last_read_ms)
            self.last_fetch_ms = max(self.last_fetch_ms, session.last_read_ms)


@dataclass
class Partition:
    """One replica hosted here: the partition log plus the replication state Kafka's Partition keeps.

    Invariants: ``high_watermark`` never moves backwards while this replica leads and never passes
    the log end; on the leader it is the minimum log-end offset of the ISR, and it does not move
    while the ISR is smaller than ``min_insync_replicas`` (KIP-966). The producer state records
    every appended batch of an idempotent producer, so a retried batch gets its first offsets back.
    Only coroutines on the broker's event loop call it.
    """

    topic: str
    index: int
    topic_id: str
    log: PartitionLog
    broker_id: int
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    # Leader only: members of ``isr`` that the leader does not wait for, because the metadata showed
    # their broker FENCED (see `exclude_fenced`); `in_sync` is the ISR without them.
    fenced_out: frozenset[int] = frozenset()
    high_watermark: int = 0
    leader_epoch_start_offset: int = 0
    min_insync_replicas: int = 1
    applied_configs: Mapping[str, str] = field(default_factory=dict)  # the topic configs ``log`` was built from
    followers: dict[int, ReplicaState] = field(default_factory=dict)
    producers: ProducerState | None = None
    # KIP-890: producer id -> the verification under way for its first transactional write here.
    _verification_guards: dict[int, VerificationGuard] = field(default_factory=dict)
    _checkpointed_high_watermark: int = -1
    # When the ISR check (broker_core.replication.isr) must look at this replica next; 0: at its next pass.
    isr_check_due_ms: float = 0.0
    _waiters: list[asyncio.Future] = field(default_factory=list)
    # Fetch sessions reading this replica and the fetcher following it, with the key each knows it by.
    _sessions: dict[ChangeWatcher, Hashable] = field(default_factory=dict)
    # (target offset, tie-breaker, future) for acks=all produces, smallest target first.
    _replication_waiters: list[tuple[int, int, asyncio.Future]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Retention, DeleteRecords and tiering move the log start in the log itself.
        self.log.on_log_start_moved = self._changed
        self.log.run_in_background = _flush_off_the_loop

    @classmethod
    def open(cls, data_dir: Path, topic: str, index: int, topic_id: str, config: LogConfig, broker_id: int) -> Partition:
        """Open (or create) the replica's log, discarding a directory left by a deleted topic of the same name."""
        directory = data_dir / f"{topic}-{index}"
        marker = directory / PARTITION_METADATA_FILE
        try:
            directory.mkdir()
            fresh = True
        except FileExistsError:
            fresh = False  # a replica hosted here before (or a creation cut short): open and recover it
        except FileNotFoundError:
            directory.mkdir(parents=True)
            fresh = True
        if fresh:
            # A new replica (a topic or partition just created, or a reassignment to this broker): an
            # empty log, its files written once and nothing read back. A crash part way leaves a
            # directory that the branch above opens and completes (a missing segment is created, a
            # missing marker written).
            _write_marker(marker, topic_id)
            log = PartitionLog.create(directory, config, topic=topic, partition=index)
            return cls(topic=topic, index=index, topic_id=topic_id, log=log, broker_id=broker_id,
                       producers=ProducerState(directory), _checkpointed_high_watermark=0)
        if marker.exists() and _read_topic_id(marker) != topic_id:
            shutil.rmtree(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if not marker.exists():
            _write_marker(marker, topic_id)
        log = PartitionLog.open(directory, config, topic=topic, partition=index)
        partition = cls(topic=topic, index=index, topic_id=topic_id, log=log, broker_id=broker_id,
                        producers=ProducerState(directory))
        partition.producers.load(log)
        partition.high_watermark = partition._read_high_watermark_checkpoint()
        partition._checkpointed_high_watermark = partition.high_watermark
        return partition

    def _read_high_watermark_checkpoint(self) -> int:
        """The HW saved before a restart, bounded by what the log holds after recovery."""
        try:
            saved = read_offset_checkpoint(self.log.directory / HIGH_WATERMARK_FILE)
        except CorruptCheckpointError:
            saved = None
        if saved is None:
            return self.log.log_start_offset
        return max(self.log.log_start_offset, min(saved, self.log.log_end_offset))

    def checkpoint_high_watermark(self) -> None:
        """Persist the HW (as Kafka's replication-offset-checkpoint does), so that after a restart the
        records consumers could already see stay visible even before followers report in."""
        due = self.high_watermark_checkpoint_due()
        if due is not None:
            write_high_watermark_checkpoint(due[0], due[1])
            self.high_watermark_checkpointed(due[1])

    def high_watermark_checkpoint_due(self) -> tuple[Path, int] | None:
        """(file, HW) to write if the HW moved since the last checkpoint: the write itself (an fsync)
        may then run off the event loop, followed by `high_watermark_checkpointed` on it."""
        if self.high_watermark == self._checkpointed_high_watermark:
            return None
        return self.log.directory / HIGH_WATERMARK_FILE, self.high_watermark

    def high_watermark_checkpointed(self, high_watermark: int) -> None:
        self._checkpointed_high_watermark = high_watermark

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def become_leader(self, leader_epoch: int, partition_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...],
                      *, announce: bool = True) -> None:
        """Lead the partition at ``leader_epoch``. ``announce`` False: the caller logs the change itself
        (the replica manager's one line for the replicas of a topic just created)."""
        self.log.finish_append()  # a replicated append still being written counts in the log end the term starts at
        now = time.monotonic() * 1000
        new_term = leader_epoch != self.leader_epoch or not self.is_leader
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        self.isr = isr
        # A new term counts every ISR member until the replica manager names the fenced ones; in the
        # same term an exclusion lasts while the member is in the ISR (see `exclude_fenced`).
        self.fenced_out = frozenset() if new_term else self.fenced_out.intersection(isr)
        self.isr_check_due_ms = 0.0
        if new_term:
            # The epoch's checkpoint entry now, its file off the event loop (hundreds of elections at once).
            self.log.start_leader_epoch(leader_epoch)
            # A new leader knows nothing of its followers' progress until they fetch again.
            self.followers = {r: ReplicaState(last_caught_up_ms=now) for r in replicas if r != self.broker_id}
            self.leader_epoch_start_offset = self.log.log_end_offset
            log.log(logging.INFO if announce else logging.DEBUG, "%s-%d: leader at epoch %d from offset %d, ISR %s", self.topic, self.index, leader_epoch,
                     self.leader_epoch_start_offset, list(isr), extra=self._fields(
                         leader=self.broker_id, partition_epoch=partition_epoch, isr=list(isr),
                         start_offset=self.leader_epoch_start_offset))
        self._maybe_advance_high_watermark()
        self.wake(role_changed=True)

    def become_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...],
                        *, announce: bool = True) -> None:
        """Follow ``leader_id`` at ``leader_epoch``; ``announce``: see `become_leader`."""
        if (leader_id, leader_epoch) != (self.leader_id, self.leader_epoch):
            log.log(logging.INFO if announce else logging.DEBUG, "%s-%d: follower of broker %d at epoch %d", self.topic, self.index, leader_id, leader_epoch,
                     extra={"topic": self.topic, "partition": self.index, "epoch": leader_epoch, "leader": leader_id,
                            "partition_epoch": partition_epoch, "isr": list(isr)})
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        self.isr = isr
        self.fenced_out = frozenset()
        self.followers = {}
        self.wake(role_changed=True)

    def _fields(self, **more: object) -> dict[str, object]:
        """The structured fields of a log event about this partition (floe.log.format=json)."""
        return {"topic": self.topic, "partition": self.index, "epoch": self.leader_epoch, **more}

    def update_isr(self, isr: tuple[int, ...], partition_epoch: int) -> None:
        self.isr = isr
        self.fenced_out = self.fenced_out.intersection(isr)
        self.partition_epoch = partition_epoch
        self.isr_check_due_ms = 0.0
        self._maybe_advance_high_watermark()
        self.wake(role_changed=True)

    @property
    def in_sync(self) -> tuple[int, ...]:
        """The ISR this leader counts for the high watermark and ``min.insync.replicas``: ``isr``
        without the members whose broker is fenced (`exclude_fenced`)."""
        if not self.fenced_out:
            return self.isr
        return tuple(replica for replica in self.isr if replica not in self.fenced_out)

    def exclude_fenced(self, fenced: Set[int]) -> None:
        """Stop waiting for ISR members whose broker the metadata shows FENCED (leader only).

        KIP-903's rule, on what Floe's metadata holds: a member whose broker lost its registration
        is out of the ISR in effect, before the controller's write that takes it out of the stored
        ISR (at 1,000 partitions a fence is followed by transactions for every partition the broker
        followed, seconds in which acks=all writes would wait for a dead follower). Counting fewer
        members never acknowledges what the members counted do not hold, and a fenced broker cannot
        be elected. An exclusion lasts while the member is in the stored ISR, even once its broker
        registers again (a new incarnation holds no more than it fetches): the ISR check then takes
        it out of the ISR, or counts it again once it has caught up (`readmit`)."""
        if not self.is_leader:
            self.fenced_out = frozenset()
            return
        out = frozenset(replica for replica in self.isr
                        if replica != self.broker_id and (replica in fenced or replica in self.fenced_out))
        if out == self.fenced_out:
            return
        self.fenced_out = out
        self.isr_check_due_ms = 0.0
        self._maybe_advance_high_watermark()
        self.wake(role_changed=True)

    def readmit(self, replicas: Set[int]) -> None:
        """Count ``replicas`` again (excluded members that the ISR check found live and caught up)."""
        if self.fenced_out & replicas:
            self.fenced_out = self.fenced_out - replicas
            self.wake(role_changed=True)

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int = -1) -> None:
        """A follower fetching from `fetch_offset` has everything below it: its log-end offset."""
        now = time.monotonic() * 1000
        state = self.followers.setdefault(replica_id, ReplicaState())
        state.log_end_offset = fetch_offset
        state.log_start_offset = log_start_offset
        # As Kafka does: reaching the log end as it was at the previous fetch counts as caught up at
        # that time, so a follower of a partition under steady load is not declared lagging.
        state.unpark()
        if fetch_offset >= self.log_end_offset:
            state.last_caught_up_ms = now
        elif fetch_offset >= state.leader_end_at_last_fetch:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.last_fetch_ms = now
        state.leader_end_at_last_fetch = self.log_end_offset
        if self._maybe_advance_high_watermark():
            self.wake()

    def park_follower(self, replica_id: int, session: MarkedSession) -> None:
        """``replica_id``'s fetch session found this partition caught up and quiet and stops reading it
        until it changes: meanwhile each read of the session counts as a fetch at the log end, so the
        follower stays caught up for the ISR check exactly as long as it keeps fetching."""
        state = self.followers.get(replica_id)
        if state is not None and state.log_end_offset >= self.log_end_offset:
            state.parked_in = session

    def add_session(self, session: ChangeWatcher, key: Hashable) -> None:
        self._sessions[session] = key

    def remove_session(self, session: ChangeWatcher) -> None:
        """``session`` no longer reads this replica (forgotten, or the session closed): a follower parked
        in it stops counting as fetching."""
        self._sessions.pop(session, None)
        for state in self.followers.values():
            if state.parked_in is session:
                state.unpark()

    def _changed(self) -> None:
        """Anything an answer to a fetch of this replica depends on may have changed: sessions reading
        it must read it again, and parked followers count as fetched only until now."""
        for session, key in self._sessions.items():
            session.mark(key)
        for state in self.followers.values():
            if state.parked_in is not None:
                state.unpark()

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the first offset of the earliest open transaction, or the HW when that is lower."""
        first_unstable = self.producers.first_unstable_offset()
        if first_unstable is None:
            return self.high_watermark
        return max(min(first_unstable, self.high_watermark), self.log.log_start_offset)

    def start_verification(self, producer_id: int) -> VerificationGuard:
        """KIP-890: a guard for the coordinator check of ``producer_id``'s first transactional write here;
        a marker for the producer written meanwhile revokes it."""
        guard = self._verification_guards[producer_id] = VerificationGuard()
        return guard

    def append_as_leader(self, records: bytes, guard: VerificationGuard | None = None) -> AppendInfo:
        """Append a produce request's batches, answering an idempotent producer's retry with the
        offsets its batch got the first time instead of writing it again. With a verification
        ``guard`` (KIP-890), InvalidTxnStateError if a marker ended the transaction meanwhile."""
        # Validated first, as Kafka's LogValidator runs before its producer-state checks; the first
        # bad batch is the one named. The headers parsed here serve the duplicate check and the append.
        validated = self.log.validate(records)
        headers = validated.headers()
        for header in headers:
            if header.is_control:
                raise ControlBatchFromClientError(f"{self.topic}-{self.index}: clients may not write control batches")
        if guard is not None and not guard.valid:
            raise InvalidTxnStateError(f"{self.topic}-{self.index}: the transaction ended while it was verified")
        duplicate = None
        for header in headers:
            found = self.producers.find_duplicate(header)
            if found is not None:
                if len(headers) > 1:
                    raise OutOfOrderSequenceError(
                        "a request mixing a retried batch with new ones", producer_id=header.producer_id,
                        producer_epoch=header.producer_epoch, sequence=header.base_sequence)
                duplicate = found
        if duplicate is not None:
            return AppendInfo(duplicate.base_offset, duplicate.last_offset, -1, -1, -1, 0, 0)
        info = self.log.append(validated, leader_epoch=self.leader_epoch)
        base = info.base_offset
        for header in headers:
            self.producers.record(header, base)
            base += header.last_offset_delta + 1
        self.after_local_append()
        return info

    def append_marker(
        self, marker: ControlRecordType, *, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> AppendInfo:
        """WriteTxnMarkers on the leader: append the COMMIT or ABORT control batch that closes the
        producer's transaction here (an ABORT goes into the .txnindex). Raises InvalidProducerEpochError
        or TransactionCoordinatorFencedError, writing nothing, for a stale producer or coordinator."""
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        guard = self._verification_guards.pop(producer_id, None)
        if guard is not None:
            guard.valid = False
        batch = build_control_batch(
            marker, producer_id=producer_id, producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch
        )
        info = self.log.append(batch, leader_epoch=self.leader_epoch)
        completed = self.producers.record(
            parse_header(batch), info.base_offset, marker=marker, coordinator_epoch=coordinator_epoch
        )
        if completed is not None and completed.aborted:
            self.log.append_aborted_transaction(completed.aborted_txn())
        self.after_local_append()
        return info

    def append_as_follower(self, records: bytes) -> AppendInfo:
        validated = self.log.validate(records, as_leader=False)
        info = self.log.append_as_follower(validated)
        self._after_follower_append(validated)
        return info

    async def append_replicated(self, records: bytes | memoryview) -> AppendInfo | None:
        """`append_as_follower` for the replica fetcher: an append of REPLICA_APPEND_OFF_LOOP_BYTES or
        more has its batches checked (CRC-32C) and its bytes written on a worker thread, while the
        event loop serves other requests; the checks that read the log's state, a roll and the new
        leader epochs stay on the loop, and so does taking the append in (`PartitionLog.finish_append`,
        which any other change to the log does first). None, with nothing appended, if the replica
        became leader or followed a new leader epoch while its batches were checked. ``records`` must
        stay unchanged until it returns."""
        if len(records) < REPLICA_APPEND_OFF_LOOP_BYTES:
            return self.append_as_follower(records)
        loop = asyncio.get_running_loop()
        epoch = self.leader_epoch
        validated = await loop.run_in_executor(
            _REPLICA_APPEND_THREADS, functools.partial(self.log.validate, records, as_leader=False))
        if self.is_leader or self.leader_epoch != epoch:
            return None
        pending = self.log.begin_append_as_follower(
            validated, on_taken_in=lambda _: self._after_follower_append(validated))
        if not isinstance(pending, PendingAppend):
            return pending
        try:
            await loop.run_in_executor(_REPLICA_APPEND_THREADS, pending.finish)
        finally:
            # Taken in now unless another change to the log already did (it then raised any failure).
            if self.log.pending_append is pending:
                self.log.finish_append()
        return pending.info

    def _after_follower_append(self, validated: ValidatedBatches) -> None:
        for completed in self.producers.record_all(validated.view, validated.batches):
            if completed.aborted:
                self.log.append_aborted_transaction(completed.aborted_txn())
        self._changed()  # a marker may move the LSO of a consumer reading from this follower (KIP-392)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, offset)
        self.producers.load(self.log)
        # Replace a snapshot taken above the cut: it holds batches the log no longer has and lacks
        # the ones fetched in their place, which a later reload would otherwise trust.
        self.producers.write_snapshot(self.log.log_end_offset)
        self._changed()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.high_watermark = max(self.high_watermark, offset)
        self.producers.path.unlink(missing_ok=True)  # it describes a log that is gone
        self.producers.load(self.log)
        self._changed()

    def after_local_append(self) -> None:
        self._maybe_advance_high_watermark()
        self.wake()

    def _maybe_advance_high_watermark(self) -> bool:
        if not self.is_leader:
            return False
        # KIP-966: with fewer in-sync replicas than min.insync.replicas the HW stays put, so records
        # that no acks=all producer could have been told are safe never become visible as committed.
        in_sync = self.in_sync
        if len(in_sync) < self.min_insync_replicas:
            return False
        new_hw = self.log_end_offset
        followers = self.followers
        for replica in in_sync:
            if replica != self.broker_id:
                follower = followers.get(replica)
                # A member not heard from yet (no state) is at offset 0, as a fresh ReplicaState says.
                new_hw = min(new_hw, follower.log_end_offset if follower is not None else 0)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    def _complete_replication_waiters(self, everyone: bool = False) -> None:
        """Wake the acks=all waiters whose target the HW has reached (all of them with ``everyone``)."""
        waiters = self._replication_waiters
        while waiters and (everyone or waiters[0][0] <= self.high_watermark):
            future = heapq.heappop(waiters)[2]
            if not future.done():
                future.set_result(None)

    def high_watermark_future(self, target: int) -> asyncio.Future:
        """A future done once the HW reaches ``target``, or sooner when the partition's role, ISR or
        state changes (the waiter must check again: it may have to give up)."""
        future = asyncio.get_running_loop().create_future()
        if self.high_watermark >= target:
            future.set_result(None)
            return future
        waiters = self._replication_waiters
        while waiters and waiters[0][2].done():  # timed-out waiters left behind
            heapq.heappop(waiters)
        heapq.heappush(waiters, (target, next(_WAITER_NUMBERS), future))
        return future

    def set_high_watermark_from_leader(self, leader_hw: int) -> None:
        """Followers adopt the leader's HW, bounded by their own log end."""
        new_hw = min(leader_hw, self.log_end_offset)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self.wake()

    def wake(self, *, role_changed: bool = False) -> None:
        """Wake the long-poll fetches; with ``role_changed`` (leadership, ISR or state) also every
        acks=all waiter, and in any case those whose target the HW has reached."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._changed()
        self._complete_replication_waiters(everyone=role_changed)

    def change_future(self) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        return future

    def close(self) -> None:
        self.wake(role_changed=True)
        self.checkpoint_high_watermark()
        self.producers.write_snapshot(self.log.log_end_offset)
        self.log.close()


class ControlBatchFromClientError(Exception):
    """A produce request carries a control batch: only the broker writes those (Kafka's INVALID_RECORD)."""


class InvalidTxnStateError(Exception):
    """A transactional write the coordinator did not (or no longer) vouch for (Kafka's INVALID_TXN_STATE)."""


def _read_topic_id(path: Path) -> str | None:
    for line in path.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            return value.strip()
    return None
