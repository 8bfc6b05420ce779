"""A transaction's coordinator-side state and its transitions, as Kafka's TransactionMetadata has them.

Sans-I/O: `TransactionState` holds what the coordinator stores for one transactional id, and each
transition returns the next state (a new frozen value) or raises `TransactionStateError` carrying the
Kafka error code the client gets. The coordinator writes a returned state to DynamoDB before it acts
on it (answers the client, sends markers), so whatever a client saw survives the coordinator.

States and moves (Kafka's):
  Empty/CompleteCommit/CompleteAbort --AddPartitions/AddOffsets--> Ongoing
  Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
  Ongoing --EndTxn(abort), timeout, InitProducerId--> PrepareAbort --markers written--> CompleteAbort
  any settled state --InitProducerId--> Empty with the epoch bumped (the fencing of older producers)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

# An epoch is a signed 16-bit number; Kafka starts a new producer id before reaching the top.
MAX_PRODUCER_EPOCH = 32767 - 1
NO_PRODUCER_ID = -1


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def settled(self) -> bool:
        """No transaction open and no markers to write: a new one may start."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


class TransactionStateError(Exception):
    """A request the transaction's state refuses; ``code`` is what the client is answered."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def key(self) -> str:
        # Kafka topic names never hold '/', so the split is unambiguous.
        return f"{self.topic}/{self.partition}"

    @classmethod
    def parse(cls, key: str) -> TopicPartition:
        topic, _, partition = key.rpartition("/")
        return cls(topic, int(partition))


@dataclass(frozen=True, slots=True)
class TransactionState:
    """What the coordinator keeps for one transactional id (one DynamoDB item)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TxnState
    timeout_ms: int
    partitions: frozenset[TopicPartition] = frozenset()
    groups: frozenset[str] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    version: int = 0

    def check_producer(self, producer_id: int, producer_epoch: int) -> None:
        """The producer in a request is this transaction's current one (else fenced or unknown)."""
        if producer_id != self.producer_id:
            raise TransactionStateError(
                ErrorCode.invalid_producer_id_mapping,
                f"{self.transactional_id!r} has producer id {self.producer_id}, not {producer_id}")
        if producer_epoch != self.producer_epoch:
            raise TransactionStateError(
                ErrorCode.producer_fenced,
                f"{self.transactional_id!r}: epoch {producer_epoch} fenced by epoch {self.producer_epoch}")

    def add(self, partitions: frozenset[TopicPartition], groups: frozenset[str], now_ms: int) -> TransactionState:
        """AddPartitionsToTxn / AddOffsetsToTxn: the transaction is (or stays) Ongoing with these added."""
        if self.state.preparing:
            raise TransactionStateError(ErrorCode.concurrent_transactions,
                                        f"{self.transactional_id!r} is completing ({self.state.value})")
        if self.state is TxnState.DEAD:
            raise TransactionStateError(ErrorCode.invalid_txn_state, f"{self.transactional_id!r} is dead")
        start = now_ms if self.state.settled else self.start_ms
        return replace(self, state=TxnState.ONGOING, partitions=self.partitions | partitions,
                       groups=self.groups | groups, start_ms=start, last_update_ms=now_ms)

    def covers(self, partitions: frozenset[TopicPartition], groups: frozenset[str]) -> bool:
        """An Ongoing transaction already holding all of these: adding them again writes nothing."""
        return self.state is TxnState.ONGOING and partitions <= self.partitions and groups <= self.groups

    def end(self, commit: bool, now_ms: int) -> TransactionState | None:
        """EndTxn: the Prepare state to write, or None when it is a retry of an end already done."""
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if self.state is TxnState.ONGOING:
            return replace(self, state=wanted, last_update_ms=now_ms)
        if self.state is done:
            return None
        if self.state is wanted:
            raise TransactionStateError(ErrorCode.concurrent_transactions,
                                        f"{self.transactional_id!r} is already in {self.state.value}")
        raise TransactionStateError(
            ErrorCode.invalid_txn_state,
            f"{self.transactional_id!r} cannot {'commit' if commit else 'abort'} from {self.state.value}")

    def abort_fencing(self, now_ms: int) -> TransactionState:
        """Abort an Ongoing transaction on the coordinator's own account (timeout, a new producer):
        the epoch is bumped so the producer that left it open is fenced and its markers carry the new epoch."""
        return replace(self, state=TxnState.PREPARE_ABORT, producer_epoch=self.producer_epoch + 1,
                       last_update_ms=now_ms)

    def complete(self, now_ms: int) -> TransactionState:
        """Every marker is written: Prepare* becomes Complete* and the transaction's sets are cleared."""
        done = TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        return replace(self, state=done, partitions=frozenset(), groups=frozenset(), last_update_ms=now_ms)

    def fence_epoch(self, new_producer_id: int | None, timeout_ms: int, now_ms: int) -> TransactionState:
        """InitProducerId on a settled transaction: Empty, epoch bumped, or ``new_producer_id`` at epoch 0
        when given (required when the epoch is exhausted)."""
        if not self.state.settled:
            raise TransactionStateError(ErrorCode.concurrent_transactions,
                                        f"{self.transactional_id!r} is in {self.state.value}")
        if new_producer_id is not None:
            producer_id, epoch = new_producer_id, 0
        elif self.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise ValueError("a new producer id is needed once the epoch is exhausted")
        else:
            producer_id, epoch = self.producer_id, self.producer_epoch + 1
        return replace(self, producer_id=producer_id, producer_epoch=epoch, state=TxnState.EMPTY,
                       timeout_ms=timeout_ms, partitions=frozenset(), groups=frozenset(), start_ms=-1,
                       last_update_ms=now_ms)

    def timed_out(self, now_ms: int) -> bool:
        return self.state is TxnState.ONGOING and self.start_ms >= 0 and now_ms > self.start_ms + self.timeout_ms

    def needs_new_producer_id(self) -> bool:
        return self.producer_epoch >= MAX_PRODUCER_EPOCH


def new_transaction(transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int) -> TransactionState:
    return TransactionState(transactional_id, producer_id, 0, TxnState.EMPTY, timeout_ms, last_update_ms=now_ms)
