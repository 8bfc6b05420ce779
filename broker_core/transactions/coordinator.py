"""The transaction coordinator: the broker service behind transactional producers (KIP-98, KIP-890).

Ownership works as the group coordinator's (``broker_core.groups.ownership``): each transactional
id's DynamoDB item carries a lease; FindCoordinator with key type 1, on any broker, answers with the
live holder or takes a free or lapsed lease, bumping the coordinator epoch every write of that id is
conditional on. The holder heartbeats every lease third and trusts its lease only until its last
heartbeat's send time plus LEASE_TRUST of the duration; a broker that does not hold an id answers
NOT_COORDINATOR, one still loading it COORDINATOR_LOAD_IN_PROGRESS.

Requests: InitProducerId with a transactional id, AddPartitionsToTxn (v4+ batches, and the leaders'
verifyOnly checks of KIP-890), AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions. Each
computes the next `TransactionState` (``state``), writes it conditionally, and only then answers. An
EndTxn answers once Prepare* is stored; the markers are then written by a completion task
(``markers``, and the group coordinator for the transaction's offsets), after which Complete* is
stored. A broker that takes over an id left in Prepare* starts that task itself, and a periodic check
aborts (with the epoch bumped, fencing the producer) every transaction open past its timeout.

Everything runs on the broker's event loop; DynamoDB calls go to this module's own threads. One
asyncio lock per transactional id orders the state changes of that id.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from broker_core.clock import wall_clock_ms
from broker_core.groups.lease import KeyedLocks, Lease, LeaseObserver, claim_lease
from broker_core.groups.offsets import MARKER_TOPIC, marker_partition
from broker_core.metadata.errors import MetadataError
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, respond
from broker_core.security.acls import AclOperation, ResourceType
from broker_core.security.producer_ids import owns_producer_id, transactional_owner
from broker_core.server.authorization import allowed, cluster_allowed

from .errors import TransactionCoordinatorFencedError, TransactionStoreUnavailableError
from .markers import MarkersFencedError, MarkerWriter
from .state import (
    TopicPartition,
    TransactionState,
    TransactionStateError,
    TxnState,
    new_transaction,
)
from .store import NO_HOLDER, StoredTransaction, TransactionStore

if TYPE_CHECKING:
    from broker_core.server.context import BrokerContext

log = logging.getLogger(__name__)

TRANSACTION_KEY_TYPE = 1
LEASE_TRUST = 0.9
# A producer's next AddPartitionsToTxn/AddOffsetsToTxn usually arrives while the previous
# transaction's markers are still being written; rather than answer CONCURRENT_TRANSACTIONS at once
# (and have the client back off for its retry.backoff.ms), the coordinator waits this long for them.
COMPLETION_WAIT_S = 1.0
_IO_THREADS = 8

# KIP-588: from these versions on a fenced producer is told PRODUCER_FENCED; older clients only
# know INVALID_PRODUCER_EPOCH.
_PRODUCER_FENCED_SINCE = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2,
                          ApiKey.ADD_OFFSETS_TO_TXN: 2, ApiKey.END_TXN: 2, ApiKey.TXN_OFFSET_COMMIT: 3}

_R = TypeVar("_R")


class ProducerIds(Protocol):
    async def next_id(self, principal: str | None = None) -> int: ...


class GroupMarkers(Protocol):
    """The group coordinator's side of a transaction's offsets (TxnOffsetCommit)."""

    async def complete_transaction(self, group_id: str, producer_id: int, commit: bool) -> int | None:
        """Make the producer's pending offsets of ``group_id`` visible (commit) or drop them (abort):
        None once done, else the broker coordinating the group (-1: none can take it now)."""
        ...


@dataclass
class HeldTransaction:
    """A transactional id whose lease this broker holds, and its state as last written."""

    transactional_id: str
    coordinator_epoch: int
    lease_valid_until: float
    state: TransactionState | None = None
    loading: bool = True
    unloaded: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    completing: asyncio.Task | None = None


class TransactionCoordinator:
    """A BrokerService: serves the transaction APIs and runs lease heartbeats, completions and timeouts."""

    def __init__(self, context: BrokerContext, producer_ids: ProducerIds, groups: GroupMarkers | None = None) -> None:
        self.context = context
        self.config = context.config
        self.broker_id = context.config.broker_id
        self.producer_ids = producer_ids
        self.groups = groups
        self.store = TransactionStore(context.config.aws)
        self.markers = MarkerWriter(context)
        self.lease_duration_ms = context.config.get_int("broker.session.timeout.ms")
        self.max_timeout_ms = context.config.get_int("transaction.max.timeout.ms")
        self.held: dict[str, HeldTransaction] = {}
        self._observer = LeaseObserver()
        self._acquiring = KeyedLocks()
        self._executor: ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopped = False

    def api_handlers(self) -> dict[ApiKey, Callable[[Request], Awaitable[Any]]]:
        return {
            ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn, ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            ApiKey.END_TXN: self.end_txn, ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.list_transactions,
        }

    # lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=_IO_THREADS, thread_name_prefix="txn-dynamodb")
        await self.io(self.store.ensure_table)
        cleanup_s = self.config.get_int("transaction.abort.timed.out.transaction.cleanup.interval.ms") / 1000
        self._tasks = [
            asyncio.create_task(self._every(self.lease_duration_ms / 3000, self._heartbeat_leases),
                                name="txn-lease-heartbeat"),
            asyncio.create_task(self._every(cleanup_s, self._abort_timed_out), name="txn-timeouts"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        held = list(self.held.values())
        for entry in held:
            self._unload(entry)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._executor is not None:
            await asyncio.gather(*(self.io(self.store.release_lease, e.transactional_id, self.broker_id,
                                           e.coordinator_epoch) for e in held), return_exceptions=True)
            self._stopped = True
            self._executor.shutdown(wait=False)
        await self.markers.close()

    async def io(self, fn: Callable[..., _R], *args: Any) -> _R:
        if self._executor is None or self._stopped:
            raise TransactionStoreUnavailableError("the transaction coordinator is not running")
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args))

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def _every(self, interval_s: float, duty: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await duty()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed", duty.__name__)
            await asyncio.sleep(interval_s)

    # ownership ----------------------------------------------------------------------------------

    def owned(self, transactional_id: str | None) -> tuple[HeldTransaction | None, ErrorCode]:
        if not transactional_id:
            return None, ErrorCode.invalid_request
        entry = self.held.get(transactional_id)
        if entry is None:
            return None, ErrorCode.not_coordinator
        if entry.loading:
            return None, ErrorCode.coordinator_load_in_progress
        if self.now() > entry.lease_valid_until:
            log.warning("transactional id %s: lease epoch %d not renewed in time; giving it up",
                        transactional_id, entry.coordinator_epoch)
            self._unload(entry)
            return None, ErrorCode.not_coordinator
        return entry, ErrorCode.none

    def _unload(self, entry: HeldTransaction) -> None:
        if self.held.get(entry.transactional_id) is entry:
            del self.held[entry.transactional_id]
        entry.unloaded = True
        if entry.completing is not None:
            entry.completing.cancel()

    async def coordinator_of(self, transactional_id: str) -> int | None:
        """The broker coordinating ``transactional_id`` (taking it here if nobody holds it), None when
        that cannot be known now (for the KIP-890 verifier, which then answers a retriable error)."""
        try:
            error, node = await self.locate(transactional_id)
        except TransactionStoreUnavailableError as exc:
            log.info("transactional id %s: coordinator unknown: %s", transactional_id, exc)
            return None
        return node if error == ErrorCode.none else None

    async def locate(self, transactional_id: str) -> tuple[ErrorCode, int]:
        """(error, coordinator broker id) for FindCoordinator, taking the lease when it is free or lapsed."""
        entry = self.held.get(transactional_id)
        if entry is not None and self.now() <= entry.lease_valid_until:
            return ErrorCode.none, self.broker_id
        async with self._acquiring.hold(transactional_id):
            return await self._locate_locked(transactional_id)

    async def _locate_locked(self, transactional_id: str) -> tuple[ErrorCode, int]:
        entry = self.held.get(transactional_id)
        if entry is not None and self.now() <= entry.lease_valid_until:
            return ErrorCode.none, self.broker_id
        if entry is not None:
            self._unload(entry)

        async def read() -> Lease | None:
            stored = await self.io(self.store.read, transactional_id)
            return stored.lease if stored is not None else None

        claim = await claim_lease(
            read=read,
            create=lambda: self.io(self.store.create_lease, transactional_id, self.broker_id, self.lease_duration_ms),
            take=lambda seen: self.io(self.store.take_lease, seen, self.broker_id, self.lease_duration_ms),
            observer=self._observer, broker_id=self.broker_id,
            live_brokers=lambda: {b.broker_id for b in self.context.image.live_brokers()}, now=self.now)
        if claim.lease is not None:
            await self._load(claim.lease, claim.acquired_at)
            return ErrorCode.none, self.broker_id
        return (ErrorCode.none, claim.holder) if claim.holder >= 0 else (ErrorCode.coordinator_not_available, -1)

    async def _load(self, lease: Lease, acquired_at: float) -> None:
        entry = HeldTransaction(lease.key, lease.coordinator_epoch,
                                acquired_at + LEASE_TRUST * self.lease_duration_ms / 1000)
        self.held[lease.key] = entry
        try:
            stored = await self.io(self.store.read, lease.key)
        except TransactionStoreUnavailableError:
            self._unload(entry)
            raise
        if stored is None or stored.lease.coordinator_epoch != lease.coordinator_epoch:
            self._unload(entry)
            return
        entry.state = stored.state
        entry.loading = False
        log.info("broker %d coordinates transactional id %s at epoch %d (%s)", self.broker_id,
                 lease.key, lease.coordinator_epoch,
                 stored.state.state.value if stored.state else "no transaction yet")
        if entry.state is not None and entry.state.state.preparing:
            # The previous coordinator stopped between Prepare* and Complete*: finish its markers.
            self._start_completion(entry)

    async def _heartbeat_leases(self) -> None:
        entries = list(self.held.values())
        if entries:
            await asyncio.gather(*(self._heartbeat_lease(e) for e in entries))

    async def _heartbeat_lease(self, entry: HeldTransaction) -> None:
        sent_at = self.now()
        try:
            await self.io(self.store.heartbeat_lease, entry.transactional_id, self.broker_id, entry.coordinator_epoch)
        except TransactionCoordinatorFencedError as exc:
            log.warning("%s", exc)
            self._unload(entry)
            return
        except TransactionStoreUnavailableError as exc:
            log.warning("transactional id %s: lease heartbeat failed: %s", entry.transactional_id, exc)
            return
        entry.lease_valid_until = max(entry.lease_valid_until, sent_at + LEASE_TRUST * self.lease_duration_ms / 1000)

    async def _write(self, entry: HeldTransaction, state: TransactionState) -> ErrorCode:
        """Store ``state`` for ``entry``; NONE once stored, else the error to answer."""
        try:
            entry.state = await self.io(self.store.write, state, self.broker_id, entry.coordinator_epoch)
        except TransactionCoordinatorFencedError as exc:
            log.warning("%s", exc)
            self._unload(entry)
            return ErrorCode.not_coordinator
        except TransactionStoreUnavailableError as exc:
            log.warning("transactional id %s: state not written: %s", entry.transactional_id, exc)
            return ErrorCode.coordinator_not_available
        return ErrorCode.none

    # completion ---------------------------------------------------------------------------------

    def _start_completion(self, entry: HeldTransaction) -> None:
        if entry.completing is None or entry.completing.done():
            entry.completing = asyncio.create_task(self._complete(entry), name=f"txn-complete-{entry.transactional_id}")

    async def _complete(self, entry: HeldTransaction) -> None:
        """Write the markers of ``entry``'s Prepare* state, then store Complete*."""
        state = entry.state
        assert state is not None and state.state.preparing
        commit = state.state is TxnState.PREPARE_COMMIT
        backoff_s = self.markers.backoff_s
        try:
            await self.markers.write(state.partitions, state.producer_id, state.producer_epoch, commit,
                                     entry.coordinator_epoch)
            for group_id in sorted(state.groups):
                await self._complete_group(group_id, state, commit, entry.coordinator_epoch)
        except MarkersFencedError as exc:
            log.warning("transactional id %s: %s", entry.transactional_id, exc)
            self._unload(entry)
            return
        while not entry.unloaded:
            async with entry.lock:
                if entry.unloaded or entry.state is not state:
                    return
                error = await self._write(entry, state.complete(wall_clock_ms()))
            if error in (ErrorCode.none, ErrorCode.not_coordinator):
                if error == ErrorCode.none:
                    log.info("transactional id %s: producer %d epoch %d %s", entry.transactional_id,
                             state.producer_id, state.producer_epoch, "committed" if commit else "aborted")
                return
            await asyncio.sleep(backoff_s)

    @staticmethod
    async def _await_completion(entry: HeldTransaction) -> None:
        """Wait (at most COMPLETION_WAIT_S) for the markers of ``entry``'s previous transaction."""
        task = entry.completing
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=COMPLETION_WAIT_S)

    async def _complete_group(self, group_id: str, state: TransactionState, commit: bool,
                              coordinator_epoch: int) -> None:
        """End the transaction in a group: here if this broker coordinates the group, else by a marker
        for the group's marker partition sent to its coordinator."""
        if self.groups is None:
            return
        marker = TopicPartition(MARKER_TOPIC, marker_partition(group_id))
        while True:
            node = await self.groups.complete_transaction(group_id, state.producer_id, commit)
            if node is None:
                return
            if node >= 0 and await self.markers.write_to(node, marker, state.producer_id, state.producer_epoch,
                                                         commit, coordinator_epoch):
                return
            await asyncio.sleep(self.markers.backoff_s)

    async def _abort_timed_out(self) -> None:
        now_ms = wall_clock_ms()
        for entry in list(self.held.values()):
            if entry.loading or entry.unloaded or entry.state is None or not entry.state.timed_out(now_ms):
                continue
            async with entry.lock:
                state = entry.state
                if entry.unloaded or state is None or not state.timed_out(now_ms):
                    continue
                log.info("transactional id %s: producer %d's transaction open past %d ms; aborting it",
                         entry.transactional_id, state.producer_id, state.timeout_ms)
                if await self._write(entry, state.abort_fencing(now_ms)) == ErrorCode.none:
                    self._start_completion(entry)

    # InitProducerId -----------------------------------------------------------------------------

    async def init_producer_id(self, request: Request) -> Any:
        body = request.body
        response = {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.none, "producer_id": -1, "producer_epoch": -1}
        timeout_ms = _millis(body.transaction_timeout)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            response["error_code"] = ErrorCode.invalid_transaction_timeout
            return respond(request, response)
        entry, error = self.owned(body.transactional_id)
        if entry is None:
            response["error_code"] = error
            return respond(request, response)
        expected = (getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1))
        async with entry.lock:
            if entry.unloaded:
                error = ErrorCode.not_coordinator
            else:
                error = await self._init_locked(entry, timeout_ms, expected)
            if error == ErrorCode.none and entry.state is not None:
                response["producer_id"], response["producer_epoch"] = entry.state.producer_id, entry.state.producer_epoch
        response["error_code"] = _for_version(request, error)
        return respond(request, response)

    async def _init_locked(self, entry: HeldTransaction, timeout_ms: int, expected: tuple[int, int]) -> ErrorCode:
        now_ms = wall_clock_ms()
        state = entry.state
        try:
            owner = transactional_owner(entry.transactional_id) if self.context.authorizer.enabled else None
            if state is None:
                producer_id = await self.producer_ids.next_id(owner)
                return await self._write(entry, new_transaction(entry.transactional_id, producer_id, timeout_ms, now_ms))
            if expected[0] >= 0 and expected != (state.producer_id, state.producer_epoch):
                # KIP-360: a producer re-initialising with its id and epoch must still be the current one.
                return ErrorCode.producer_fenced
            if state.state.preparing:
                self._start_completion(entry)
                return ErrorCode.concurrent_transactions
            if state.state is TxnState.ONGOING:
                # A new producer instance: abort what the old one left open, fencing it; the client
                # retries until the abort is complete.
                error = await self._write(entry, state.abort_fencing(now_ms))
                if error == ErrorCode.none:
                    self._start_completion(entry)
                    return ErrorCode.concurrent_transactions
                return error
            # With an authorizer the id must be the transactional id's (`broker_core.security.producer_ids`):
            # one handed out before the authorizer was on is replaced, as an exhausted epoch is.
            stale = owner is not None and not owns_producer_id(owner, state.producer_id)
            new_id = await self.producer_ids.next_id(owner) if state.needs_new_producer_id() or stale else None
            return await self._write(entry, state.fence_epoch(new_id, timeout_ms, now_ms))
        except MetadataError as exc:
            log.warning("transactional id %s: no producer id: %s", entry.transactional_id, exc)
            return ErrorCode.coordinator_not_available
        except TransactionStateError as exc:
            return exc.code

    # AddPartitionsToTxn, AddOffsetsToTxn ---------------------------------------------------------

    async def add_partitions_to_txn(self, request: Request) -> Any:
        """Authorization, as Kafka's: v0-v3 come from clients and need WRITE on the transactional id
        (else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and WRITE on each topic (else
        its partitions are TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED); v4+
        come from brokers (KIP-890 verification) and need CLUSTER_ACTION on the cluster."""
        body = request.body
        if request.api_version >= 4 and not cluster_allowed(self.context.authorizer, request,
                                                            AclOperation.CLUSTER_ACTION):
            return respond(request, {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.cluster_authorization_failed,
                                     "results_by_transaction": []})
        if request.api_version <= 3:
            topics = await self._add_one(request, body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                                         body.v3_and_below_producer_epoch, body.v3_and_below_topics, verify_only=False)
            return respond(request, {"throttle_time": NO_THROTTLE, "results_by_topic_v3_and_below": topics})
        results = []
        for txn in body.transactions:
            topics = await self._add_one(request, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                         txn.topics, verify_only=txn.verify_only)
            results.append({"transactional_id": txn.transactional_id, "topic_results": topics})
        return respond(request, {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.none,
                                 "results_by_transaction": results})

    async def _add_one(self, request: Request, transactional_id: str, producer_id: int, producer_epoch: int,
                       topics: Any, *, verify_only: bool) -> list[dict[str, Any]]:
        wanted = [TopicPartition(t.name, p) for t in topics for p in t.partitions]
        codes = {tp: ErrorCode.none for tp in wanted}
        image = self.context.image
        authorizer = self.context.authorizer
        client = request.api_version <= 3
        unknown = {tp for tp in wanted if (tp.topic, tp.partition) not in image.partitions}
        refused = {name for name in {tp.topic for tp in wanted}
                   if client and not allowed(authorizer, request, AclOperation.WRITE, ResourceType.TOPIC, name)}
        if client and not allowed(authorizer, request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                  transactional_id):
            codes = dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
        elif refused or (unknown and not verify_only):
            for tp in wanted:
                codes[tp] = (ErrorCode.topic_authorization_failed if tp.topic in refused
                             else ErrorCode.unknown_topic_or_partition if tp in unknown
                             else ErrorCode.operation_not_attempted)
        else:
            entry, error = self.owned(transactional_id)
            if entry is not None and not verify_only:
                await self._await_completion(entry)
            if entry is not None:
                async with entry.lock:
                    if entry.unloaded:
                        error = ErrorCode.not_coordinator
                    elif verify_only:
                        codes = self._verify(entry.state, producer_id, producer_epoch, wanted)
                    else:
                        error = await self._add_locked(entry, producer_id, producer_epoch, frozenset(wanted), frozenset())
            if error != ErrorCode.none:
                codes = dict.fromkeys(wanted, _for_version(request, error))
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "partition_error_code": codes[tp]})
        return [{"name": name, "results_by_partition": results} for name, results in by_topic.items()]

    @staticmethod
    def _verify(state: TransactionState | None, producer_id: int, producer_epoch: int,
                wanted: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """KIP-890: a leader asks whether a transactional write may go to these partitions."""
        if state is None:
            return dict.fromkeys(wanted, ErrorCode.invalid_producer_id_mapping)
        try:
            state.check_producer(producer_id, producer_epoch)
        except TransactionStateError as exc:
            return dict.fromkeys(wanted, exc.code)
        if state.state.preparing:
            return dict.fromkeys(wanted, ErrorCode.concurrent_transactions)
        ongoing = state.state is TxnState.ONGOING
        return {tp: ErrorCode.none if ongoing and tp in state.partitions else ErrorCode.invalid_txn_state
                for tp in wanted}

    async def _add_locked(self, entry: HeldTransaction, producer_id: int, producer_epoch: int,
                          partitions: frozenset[TopicPartition], groups: frozenset[str]) -> ErrorCode:
        state = entry.state
        if state is None:
            return ErrorCode.invalid_producer_id_mapping
        try:
            state.check_producer(producer_id, producer_epoch)
            if state.covers(partitions, groups):
                return ErrorCode.none
            return await self._write(entry, state.add(partitions, groups, wall_clock_ms()))
        except TransactionStateError as exc:
            return exc.code

    async def add_offsets_to_txn(self, request: Request) -> Any:
        """Authorization, as Kafka's: WRITE on the transactional id, then READ on the group."""
        body = request.body
        authorizer = self.context.authorizer
        if not allowed(authorizer, request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
            error = ErrorCode.transactional_id_authorization_failed
        elif not allowed(authorizer, request, AclOperation.READ, ResourceType.GROUP, body.group_id):
            error = ErrorCode.group_authorization_failed
        else:
            error = ErrorCode.invalid_group_id if not body.group_id else ErrorCode.none
        entry = None
        if error == ErrorCode.none:
            entry, error = self.owned(body.transactional_id)
        if entry is not None:
            await self._await_completion(entry)
            async with entry.lock:
                if entry.unloaded:
                    error = ErrorCode.not_coordinator
                else:
                    error = await self._add_locked(entry, body.producer_id, body.producer_epoch, frozenset(),
                                                   frozenset({body.group_id}))
        return respond(request, {"throttle_time": NO_THROTTLE, "error_code": _for_version(request, error)})

    # EndTxn -------------------------------------------------------------------------------------

    async def end_txn(self, request: Request) -> Any:
        """Authorization: WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
        body = request.body
        if not allowed(self.context.authorizer, request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                       body.transactional_id):
            return respond(request, {"throttle_time": NO_THROTTLE,
                                     "error_code": ErrorCode.transactional_id_authorization_failed})
        entry, error = self.owned(body.transactional_id)
        if entry is not None:
            async with entry.lock:
                error = ErrorCode.not_coordinator if entry.unloaded else await self._end_locked(
                    entry, body.producer_id, body.producer_epoch, body.committed)
        return respond(request, {"throttle_time": NO_THROTTLE, "error_code": _for_version(request, error)})

    async def _end_locked(self, entry: HeldTransaction, producer_id: int, producer_epoch: int,
                          commit: bool) -> ErrorCode:
        state = entry.state
        if state is None:
            return ErrorCode.invalid_producer_id_mapping
        try:
            state.check_producer(producer_id, producer_epoch)
            prepared = state.end(commit, wall_clock_ms())
        except TransactionStateError as exc:
            return exc.code
        if prepared is None:
            return ErrorCode.none  # a retry of an end already complete
        error = await self._write(entry, prepared)
        if error == ErrorCode.none:
            self._start_completion(entry)
        return error

    # DescribeTransactions, ListTransactions -----------------------------------------------------

    async def describe_transactions(self, request: Request) -> Any:
        """Served from this broker's memory for the ids it holds and from DynamoDB for the others, so
        any broker can describe any transactional id. Authorization, as Kafka's: an id the principal
        may not DESCRIBE is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and a described
        transaction shows only the topics the principal may DESCRIBE."""
        described = []
        authorizer = self.context.authorizer
        for transactional_id in request.body.transactional_ids:
            if not allowed(authorizer, request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
                described.append(_describe(transactional_id, None, ErrorCode.transactional_id_authorization_failed))
                continue
            entry = self.held.get(transactional_id)
            state: TransactionState | None = None
            error = ErrorCode.none
            if entry is not None and not entry.loading:
                state = entry.state
            else:
                try:
                    stored = await self.io(self.store.read, transactional_id)
                    state = stored.state if stored is not None else None
                except TransactionStoreUnavailableError as exc:
                    log.warning("DescribeTransactions %s: %s", transactional_id, exc)
                    error = ErrorCode.coordinator_not_available
            if state is None and error == ErrorCode.none:
                error = ErrorCode.transactional_id_not_found
            answer = _describe(transactional_id, state, error)
            answer["topics"] = [t for t in answer["topics"]
                                if allowed(authorizer, request, AclOperation.DESCRIBE, ResourceType.TOPIC, t["topic"],
                                           log_denial=False)]
            described.append(answer)
        return respond(request, {"throttle_time": NO_THROTTLE, "transaction_states": described})

    async def list_transactions(self, request: Request) -> Any:
        """The transactions this broker coordinates; the lowest-numbered live broker adds those whose
        coordinator is gone, so that an admin client's union over all brokers misses none. Only the
        ids the principal may DESCRIBE are listed (Kafka's rule; the others are left out silently)."""
        body = request.body
        known = {s.value for s in TxnState}
        state_filters = list(body.state_filters or ())
        unknown_filters = [s for s in state_filters if s not in known]
        wanted_states = {s for s in state_filters if s in known}
        wanted_ids = set(body.producer_id_filters or ())
        min_duration = getattr(body, "duration_filter", -1)
        now_ms = wall_clock_ms()
        states = {e.transactional_id: e.state for e in list(self.held.values()) if not e.loading and e.state}
        error = ErrorCode.none
        live = sorted(b.broker_id for b in self.context.image.live_brokers())
        if live and live[0] == self.broker_id:
            try:
                stored: list[StoredTransaction] = await self.io(self.store.scan)
            except TransactionStoreUnavailableError as exc:
                log.warning("ListTransactions: %s", exc)
                stored, error = [], ErrorCode.coordinator_not_available
            for s in stored:
                if (s.lease.holder == NO_HOLDER or s.lease.holder not in live) and s.state is not None:
                    states.setdefault(s.lease.key, s.state)
        listed = [
            {"transactional_id": tid, "producer_id": st.producer_id, "transaction_state": st.state.value}
            for tid, st in sorted(states.items())
            if (not wanted_states or st.state.value in wanted_states)
            and (not wanted_ids or st.producer_id in wanted_ids)
            and (min_duration < 0 or (st.state is TxnState.ONGOING and now_ms - st.start_ms >= min_duration))
            and allowed(self.context.authorizer, request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid,
                        log_denial=False)
        ]
        return respond(request, {"throttle_time": NO_THROTTLE, "error_code": error,
                                 "unknown_state_filters": unknown_filters, "transaction_states": listed})


def _describe(transactional_id: str, state: TransactionState | None, error: ErrorCode) -> dict[str, Any]:
    topics: dict[str, list[int]] = {}
    if state is not None:
        for tp in sorted(state.partitions, key=lambda tp: (tp.topic, tp.partition)):
            topics.setdefault(tp.topic, []).append(tp.partition)
    start_ms = state.start_ms if state is not None and state.start_ms >= 0 else -1
    return {
        "error_code": error, "transactional_id": transactional_id,
        "transaction_state": state.state.value if state else "",
        "transaction_timeout": datetime.timedelta(milliseconds=state.timeout_ms if state else 0),
        # Kafka sends -1 for a transaction not started; kio (Floe's own client and CLI) cannot
        # decode a negative timestamp, so Floe sends the epoch (0) instead.
        "transaction_start_time": datetime.datetime.fromtimestamp(max(start_ms, 0) / 1000, datetime.UTC),
        "producer_id": state.producer_id if state else -1,
        "producer_epoch": state.producer_epoch if state else -1,
        "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()],
    }


def _millis(value: datetime.timedelta | int) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def _for_version(request: Request, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.producer_fenced and request.api_version < _PRODUCER_FENCED_SINCE.get(request.api_key, 0):
        return ErrorCode.invalid_producer_epoch
    return error
