"""read_committed on the reading side: which batches of a fetched range belong to aborted transactions.

A read_committed Fetch answers up to the LSO with the aborted transactions (producer id, first
offset) that overlap the range; the reader drops their batches, as Kafka's consumer does
(CompletedFetch.nextFetchedRecord): walking batches in offset order, a producer counts as aborting
from the first offset of its aborted transaction until that transaction's ABORT marker; its
transactional batches in between are skipped. Control batches (markers) are never records. Used by
Floe's client, the HTTP fetch and the Spark reader, so every reader of a log honours isolation the
same way. Pure functions over batch headers.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from .batch import DecodedBatch
from .control import ControlRecordType, parse_control_key
from .header import BatchHeader

T = TypeVar("T")


def committed(
    items: Iterable[T],
    aborted_transactions: Iterable[tuple[int, int]],
    header_of: Callable[[T], BatchHeader],
    is_abort_marker: Callable[[T], bool],
) -> Iterator[T]:
    """The non-control items (batches, in offset order) not written by an aborted transaction.

    ``aborted_transactions`` are (producer id, first offset) pairs; ``is_abort_marker`` tells whether
    a control item is an ABORT marker (only read for control batches of an aborting producer).
    """
    pending = sorted((first, pid) for pid, first in aborted_transactions)
    heapq.heapify(pending)
    aborting: set[int] = set()
    for item in items:
        header = header_of(item)
        while pending and pending[0][0] <= header.last_offset:
            aborting.add(heapq.heappop(pending)[1])
        if header.is_control:
            if header.producer_id in aborting and is_abort_marker(item):
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        yield item


def is_abort_marker(batch: DecodedBatch) -> bool:
    """Whether a decoded control batch is an ABORT transaction marker."""
    return bool(batch.records) and parse_control_key(batch.records[0].key) is ControlRecordType.ABORT


def committed_batches(
    batches: Iterable[DecodedBatch], aborted_transactions: Iterable[tuple[int, int]]
) -> Iterator[DecodedBatch]:
    """`committed` over decoded batches."""
    return committed(batches, aborted_transactions, lambda batch: batch.header, is_abort_marker)
