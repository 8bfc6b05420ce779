"""What Floe's Kafka client returns: cluster metadata and the outcome of produce and fetch requests.

Frozen dataclasses with no I/O: `BrokerInfo`, `TopicInfo` and `PartitionInfo` are the client's
metadata cache as the last Metadata response gave it; `ProduceResult` says where a batch landed;
`FetchResult` and `RawFetchResult` hold a fetch's records (decoded, or as the broker's bytes) and where
the next fetch starts. `decode_fetch` turns a partition's records bytes into a `FetchResult`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from broker_core.records import Record, iter_batches
from broker_core.records.isolation import committed_batches


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_epoch: int
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID | None
    partitions: list[PartitionInfo]

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """Where a batch landed. With acks=0 the broker says nothing, so every offset is -1 (as in Kafka's
    Java client); ``log_append_time`` is -1 unless the topic uses LogAppendTime."""

    partition: int
    base_offset: int
    last_offset: int
    log_append_time: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Records at or after the fetch offset; ``next_offset`` is where the next fetch starts (past
    every whole batch returned, control batches included)."""

    records: list[Record]
    high_watermark: int
    log_start_offset: int
    next_offset: int
    raw_bytes_len: int


@dataclass(frozen=True, slots=True)
class RawFetchResult:
    """A fetch's records bytes as the broker sent them (whole batches, maybe a cut-off last one);
    ``aborted_transactions`` (producer id, first offset) only for a read_committed fetch."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    next_offset: int
    aborted_transactions: tuple[tuple[int, int], ...] = ()


def decode_fetch(offset: int, raw: bytes, high_watermark: int, log_start: int,
                 aborted_transactions: Sequence[tuple[int, int]] = ()) -> FetchResult:
    """The records at or after ``offset`` in a partition's fetched bytes (control batches skipped, and
    the batches of the ``aborted_transactions`` a read_committed fetch names)."""
    records: list[Record] = []
    batches = list(iter_batches(raw, ignore_truncated_tail=True))
    next_offset = max([offset, *(batch.header.next_offset for batch in batches)])
    for batch in committed_batches(batches, aborted_transactions):
        # A compressed batch is sent whole, so it may start before the offset asked for.
        records.extend(r for r in batch.records if r.offset >= offset)
    return FetchResult(records, high_watermark, log_start, next_offset, len(raw))

