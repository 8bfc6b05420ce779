"""read_committed on the tail path: a fetch response's aborted transactions are dropped before decoding.

A fetched log is built as a leader holds it: committed and aborted transactions of two producers
interleaved with plain batches and their markers. What `committed_only` keeps decodes to exactly
the records a Kafka read_committed consumer returns.
"""

from __future__ import annotations

from broker_core.records import (
    ControlRecordType,
    SimpleRecord,
    build_batch,
    build_control_batch,
    iter_batches,
)
from emr_jobs.tail import committed_only


def transactional(producer_id: int, base_offset: int, *values: bytes) -> bytes:
    return build_batch([SimpleRecord(key=None, value=v) for v in values], base_offset=base_offset,
                       producer_id=producer_id, producer_epoch=0, base_sequence=0, is_transactional=True)


def marker(control: ControlRecordType, producer_id: int, base_offset: int) -> bytes:
    return build_control_batch(control, producer_id=producer_id, producer_epoch=0, coordinator_epoch=0,
                               base_offset=base_offset)


def values(raw: bytes) -> list[bytes]:
    return [record.value for batch in iter_batches(raw) if not batch.header.is_control for record in batch.records]


LOG = b"".join([
    transactional(1, 0, b"a1", b"a2"),                   # producer 1, aborted at offset 5
    transactional(2, 2, b"c1"),                          # producer 2, committed at offset 6
    build_batch([SimpleRecord(key=None, value=b"plain")], base_offset=3),
    transactional(1, 4, b"a3"),
    marker(ControlRecordType.ABORT, 1, 5),
    marker(ControlRecordType.COMMIT, 2, 6),
    transactional(1, 7, b"k1"),                          # producer 1 again, committed at offset 8
    marker(ControlRecordType.COMMIT, 1, 8),
])


def test_the_batches_of_an_aborted_transaction_are_dropped_and_the_rest_kept() -> None:
    assert values(committed_only(LOG, [(1, 0)])) == [b"c1", b"plain", b"k1"]


def test_a_fetch_starting_inside_an_aborted_transaction_drops_its_remaining_batches() -> None:
    # The leader names a transaction that began before the fetch offset (its first offset is 0).
    tail = LOG[len(transactional(1, 0, b"a1", b"a2")):]
    assert values(committed_only(tail, [(1, 0)])) == [b"c1", b"plain", b"k1"]


def test_without_aborted_transactions_the_fetched_bytes_are_kept_whole() -> None:
    assert committed_only(LOG, []) == LOG
    assert values(committed_only(LOG, [])) == [b"a1", b"a2", b"c1", b"plain", b"a3", b"k1"]
