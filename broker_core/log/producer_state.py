"""Producer state of one partition: the last batches each producer id wrote and its open transaction.

For each producer id the partition keeps its epoch and the (first sequence, last sequence, base
offset, last offset) of its last five batches, as Kafka's ProducerStateManager does; five is the
most in-flight requests an idempotent producer may have. A batch is checked against this state
before it is appended: a retried duplicate is answered with its original offsets and not written
again, a gap in sequences is OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch is INVALID_PRODUCER_EPOCH.

Transactions: a producer's first transactional batch opens its transaction at that batch's base
offset; the COMMIT or ABORT control batch (transaction marker) written through WriteTxnMarkers closes
it, and `record` returns the CompletedTxn with the partition's last stable offset once it is closed.
The LSO is the first offset of the earliest open transaction (`first_unstable_offset`), capped by the
high watermark by the partition. A marker for a producer with no open transaction closes an empty
transaction at the marker's own offset, as Kafka's ProducerStateManager does. A marker with an older
producer epoch is INVALID_PRODUCER_EPOCH, one with an older coordinator epoch
TransactionCoordinatorFencedError.

File `producer-state.snapshot` in the partition directory (JSON, written temp file -> fsync ->
rename) holds the state as of an offset, open transactions included; on open the state is that
snapshot plus every batch header after its offset, so a crash loses nothing the log still holds.
The scan also rewrites the log's transaction indexes (.txnindex) from its start offset on: each ABORT
it meets is appended again, so the indexes are rebuilt with the state. Truncation rebuilds from the log.
Thread-safety: owned by the partition's single writer, like the log itself.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.records.batch import decode_batch
from broker_core.records.control import ControlRecordType, parse_control_key, parse_control_value
from broker_core.records.errors import CorruptControlRecordError
from broker_core.records.header import BatchHeader, iter_headers

from .checkpoint import atomic_write
from .transaction_index import AbortedTxn

SNAPSHOT_FILE = "producer-state.snapshot"
BATCHES_PER_PRODUCER = 5
_SEQUENCE_MODULUS = 0x80000000
_SCAN_CHUNK_BYTES = 4 * 1024 * 1024


class ProducerStateError(Exception):
    """A batch's producer fields disagree with the partition's producer state."""

    def __init__(self, message: str, *, producer_id: int, producer_epoch: int, sequence: int) -> None:
        super().__init__(message)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.sequence = sequence


class OutOfOrderSequenceError(ProducerStateError):
    """The batch does not start right after the producer's last sequence (and is no duplicate)."""


class InvalidProducerEpochError(ProducerStateError):
    """The batch carries an epoch older than the producer's current one (a fenced, zombie producer)."""


class TransactionCoordinatorFencedError(ProducerStateError):
    """A transaction marker from a coordinator epoch older than the one that last wrote for the producer."""


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker just closed: offsets ``first_offset``..``last_offset`` (the marker's)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool
    last_stable_offset: int

    def aborted_txn(self) -> AbortedTxn:
        return AbortedTxn(self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_PER_PRODUCER))
    # First offset of the producer's open transaction in this partition, None when none is open.
    txn_first_offset: int | None = None
    coordinator_epoch: int = -1


class ProducerState:
    def __init__(self, directory: Path) -> None:
        self.path = directory / SNAPSHOT_FILE
        self.producers: dict[int, ProducerEntry] = {}
        # producer id -> first offset of its open transaction (the entries' txn_first_offset, indexed
        # so the LSO costs O(open transactions), not O(producers), on every fetch).
        self._open: dict[int, int] = {}

    # checks and updates -------------------------------------------------------------------------

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The earlier batch this one retries, or None; raises on a stale epoch or a sequence gap."""
        if header.producer_id < 0 or header.base_sequence < 0:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            # Unknown producer: its state may have been removed with old segments; accept it as Kafka does.
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than {entry.epoch}",
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                sequence=header.base_sequence,
            )
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id} started epoch {header.producer_epoch} at sequence "
                    f"{header.base_sequence}, not 0",
                    producer_id=header.producer_id,
                    producer_epoch=header.producer_epoch,
                    sequence=header.base_sequence,
                )
            return None
        for batch in entry.batches:
            if batch.first_sequence == header.base_sequence and batch.last_sequence == header.last_sequence:
                return batch
        if not entry.batches:
            return None
        expected = (entry.batches[-1].last_sequence + 1) % _SEQUENCE_MODULUS
        if header.base_sequence != expected:
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} sent sequence {header.base_sequence}, expected {expected}",
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                sequence=header.base_sequence,
            )
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Raise if a transaction marker for ``producer_id`` may not be written (stale producer or coordinator)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} epoch {producer_epoch} is older than {entry.epoch}",
                producer_id=producer_id, producer_epoch=producer_epoch, sequence=-1,
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}",
                producer_id=producer_id, producer_epoch=producer_epoch, sequence=-1,
            )

    def has_open_transaction(self, producer_id: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.txn_first_offset is not None

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction, None when no transaction is open."""
        return min(self._open.values()) if self._open else None

    def open_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction."""
        return dict(self._open)

    def record(
        self,
        header: BatchHeader,
        base_offset: int | None = None,
        *,
        marker: ControlRecordType | None = None,
        coordinator_epoch: int = -1,
    ) -> CompletedTxn | None:
        """Remember a batch now in the log at ``base_offset`` (default: the header's own baseOffset).

        A control batch needs its ``marker`` type (and the ``coordinator_epoch`` that wrote it); it
        closes the producer's transaction, which is returned.
        """
        if header.producer_id < 0:
            return None
        base = header.base_offset if base_offset is None else base_offset
        if header.is_control:
            if marker is None:
                raise ValueError("a control batch is recorded with its marker type")
            return self._end_transaction(header, base, marker is ControlRecordType.ABORT, coordinator_epoch)
        if header.base_sequence < 0 and not header.is_transactional:
            return None
        entry = self._entry_for(header)
        if header.base_sequence >= 0:
            entry.batches.append(
                BatchMetadata(header.base_sequence, header.last_sequence, base, base + header.last_offset_delta)
            )
        if header.is_transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = self._open[header.producer_id] = base
        return None

    def _entry_for(self, header: BatchHeader) -> ProducerEntry:
        """The producer's entry, started afresh (sequences forgotten) when the batch bumps its epoch."""
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            previous = entry
            entry = self.producers[header.producer_id] = ProducerEntry(header.producer_epoch)
            if previous is not None:
                # A bumped epoch does not end a transaction: only its marker does.
                entry.txn_first_offset = previous.txn_first_offset
                entry.coordinator_epoch = previous.coordinator_epoch
        return entry

    def _end_transaction(
        self, header: BatchHeader, offset: int, aborted: bool, coordinator_epoch: int
    ) -> CompletedTxn:
        entry = self._entry_for(header)
        first = offset if entry.txn_first_offset is None else entry.txn_first_offset
        entry.txn_first_offset = None
        self._open.pop(header.producer_id, None)
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        others = self.first_unstable_offset()
        return CompletedTxn(header.producer_id, first, offset, aborted, offset + 1 if others is None else others)

    def record_all(self, view: memoryview | bytes, batches: Iterable[tuple[int, BatchHeader]]) -> list[CompletedTxn]:
        """Record appended ``batches`` (position in ``view``, header); return the transactions they close."""
        completed = []
        for position, header in batches:
            done = self.record(header, **_marker_of(view, position, header))
            if done is not None:
                completed.append(done)
        return completed

    # persistence --------------------------------------------------------------------------------

    def write_snapshot(self, offset: int) -> None:
        data = {
            "version": 2,
            "offset": offset,
            "producers": {
                str(pid): {
                    "epoch": e.epoch,
                    "txn_first_offset": e.txn_first_offset,
                    "coordinator_epoch": e.coordinator_epoch,
                    "batches": [
                        [b.first_sequence, b.last_sequence, b.base_offset, b.last_offset] for b in e.batches
                    ],
                }
                for pid, e in self.producers.items()
            },
        }
        atomic_write(self.path, json.dumps(data).encode())

    def load(self, log: object) -> None:
        """Snapshot (if usable) plus the batches after it; otherwise every batch from the log start.

        The log's transaction indexes are rewritten from where the scan starts; if the log found one
        of them corrupt, the snapshot is not used and they are all rebuilt from the log start.
        """
        self.producers = {}
        self._open = {}
        start = log.log_start_offset
        if self.path.exists() and not log.transaction_indexes_lost:
            try:
                data = json.loads(self.path.read_text())
                if start <= data["offset"] <= log.log_end_offset:
                    for pid, e in data["producers"].items():
                        entry = ProducerEntry(int(e["epoch"]))
                        for first, last, base, end in e["batches"]:
                            if end < data["offset"]:
                                entry.batches.append(BatchMetadata(first, last, base, end))
                        txn_first_offset = e.get("txn_first_offset")
                        if txn_first_offset is not None:
                            entry.txn_first_offset = self._open[int(pid)] = int(txn_first_offset)
                        entry.coordinator_epoch = int(e.get("coordinator_epoch", -1))
                        self.producers[int(pid)] = entry
                    start = data["offset"]
            except (ValueError, KeyError, TypeError):
                self.producers = {}
                self._open = {}
                start = log.log_start_offset
        log.truncate_transaction_indexes_from(start)
        self._scan(log, start)

    def _scan(self, log: object, offset: int) -> None:
        end = log.log_end_offset
        while offset < end:
            chunk = log.read_bytes(offset, _SCAN_CHUNK_BYTES)
            if not chunk:
                break
            next_offset = offset
            for position, header in iter_headers(chunk):
                if header.last_offset >= offset:
                    done = self.record(header, **_marker_of(chunk, position, header))
                    if done is not None and done.aborted:
                        log.append_aborted_transaction(done.aborted_txn())
                next_offset = header.next_offset
            if next_offset <= offset:
                break
            offset = next_offset


def _marker_of(buf: memoryview | bytes, position: int, header: BatchHeader) -> dict[str, object]:
    """The `record` keyword arguments of the batch at ``position``: its marker type if it is a control batch."""
    if not header.is_control:
        return {}
    records = decode_batch(buf, position, verify_crc=False).records
    if not records:
        raise CorruptControlRecordError("control batch without a record", position=position)
    return {"marker": parse_control_key(records[0].key), "coordinator_epoch": parse_control_value(records[0].value)}
