"""Idempotent-producer state of one partition: the last batches each producer id wrote.

For each producer id the partition keeps its epoch and the (first sequence, last sequence, base
offset, last offset) of its last five batches, as Kafka's ProducerStateManager does; five is the
most in-flight requests an idempotent producer may have. A batch is checked against this state
before it is appended: a retried duplicate is answered with its original offsets and not written
again, a gap in sequences is OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch is INVALID_PRODUCER_EPOCH.

File `producer-state.snapshot` in the partition directory (JSON, written temp file -> fsync ->
rename) holds the state as of an offset; on open the state is that snapshot plus every batch header
after its offset, so a crash loses nothing the log still holds. Truncation rebuilds from the log.
Thread-safety: owned by the partition's single writer, like the log itself.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.records.header import BatchHeader, iter_headers

from .checkpoint import atomic_write

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


class ProducerState:
    def __init__(self, directory: Path) -> None:
        self.path = directory / SNAPSHOT_FILE
        self.producers: dict[int, ProducerEntry] = {}

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

    def record(self, header: BatchHeader, base_offset: int | None = None) -> None:
        """Remember a batch now in the log at ``base_offset`` (default: the header's own baseOffset)."""
        if header.producer_id < 0 or header.base_sequence < 0:
            return
        base = header.base_offset if base_offset is None else base_offset
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self.producers[header.producer_id] = ProducerEntry(header.producer_epoch)
        entry.batches.append(
            BatchMetadata(header.base_sequence, header.last_sequence, base, base + header.last_offset_delta)
        )

    def record_all(self, headers: Iterable[BatchHeader]) -> None:
        for header in headers:
            self.record(header)

    # persistence --------------------------------------------------------------------------------

    def write_snapshot(self, offset: int) -> None:
        data = {
            "version": 1,
            "offset": offset,
            "producers": {
                str(pid): {
                    "epoch": e.epoch,
                    "batches": [
                        [b.first_sequence, b.last_sequence, b.base_offset, b.last_offset] for b in e.batches
                    ],
                }
                for pid, e in self.producers.items()
            },
        }
        atomic_write(self.path, json.dumps(data).encode())

    def load(self, log: object) -> None:
        """Snapshot (if usable) plus the batches after it; otherwise every batch from the log start."""
        self.producers = {}
        start = log.log_start_offset
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text())
                if start <= data["offset"] <= log.log_end_offset:
                    for pid, e in data["producers"].items():
                        entry = ProducerEntry(int(e["epoch"]))
                        for first, last, base, end in e["batches"]:
                            if end < data["offset"]:
                                entry.batches.append(BatchMetadata(first, last, base, end))
                        self.producers[int(pid)] = entry
                    start = data["offset"]
            except (ValueError, KeyError, TypeError):
                self.producers = {}
        self._scan(log, start)

    def _scan(self, log: object, offset: int) -> None:
        end = log.log_end_offset
        while offset < end:
            chunk = log.read_bytes(offset, _SCAN_CHUNK_BYTES)
            if not chunk:
                break
            next_offset = offset
            for _, header in iter_headers(chunk):
                if header.last_offset >= offset:
                    self.record(header)
                next_offset = header.next_offset
            if next_offset <= offset:
                break
            offset = next_offset
