"""The .txnindex files and the open transactions of the producer state, across restarts and truncation.

A partition directory is written the way the broker writes it (transactional batches appended as
leader, markers as control batches), then reopened; what a read_committed reader would be told (the
LSO's first unstable offset and the aborted transactions of a range) must come back the same.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker_core.log import LogConfig, PartitionLog
from broker_core.log.producer_state import SNAPSHOT_FILE, ProducerState
from broker_core.log.transaction_index import ABORTED_TXN, AbortedTxn
from broker_core.records import SimpleRecord, build_batch
from broker_core.records.control import ControlRecordType, build_control_batch
from broker_core.records.header import parse_header

CONFIG = LogConfig(segment_bytes=1024)


class Writer:
    """A leader's appends: the log and its producer state, as the broker's Partition keeps them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.log = PartitionLog.open(directory, CONFIG)
        self.producers = ProducerState(directory)
        self.producers.load(self.log)

    def data(self, producer_id: int, count: int, sequence: int, *, transactional: bool = True) -> int:
        batch = build_batch([SimpleRecord(value=b"x" * 200) for _ in range(count)], producer_id=producer_id,
                            producer_epoch=0, base_sequence=sequence, is_transactional=transactional)
        info = self.log.append(batch)
        self.producers.record(parse_header(batch), info.base_offset)
        return info.base_offset

    def marker(self, producer_id: int, commit: bool) -> int:
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        batch = build_control_batch(kind, producer_id=producer_id, producer_epoch=0, coordinator_epoch=1)
        info = self.log.append(batch)
        done = self.producers.record(parse_header(batch), info.base_offset, marker=kind, coordinator_epoch=1)
        if done.aborted:
            self.log.append_aborted_transaction(done.aborted_txn())
        return info.base_offset

    def close(self) -> None:
        self.producers.write_snapshot(self.log.log_end_offset)
        self.log.close()


def reopen(directory: Path) -> Writer:
    return Writer(directory)


def write_history(directory: Path) -> Writer:
    """Producer 7 aborts twice and producer 8 commits, over several 1 KiB segments; producer 9 stays open."""
    writer = Writer(directory)
    writer.data(7, 3, 0)          # 0-2
    writer.data(8, 2, 0)          # 3-4
    writer.marker(7, False)       # 5: abort [0, 5]
    writer.data(5, 2, 0, transactional=False)  # 6-7
    writer.marker(8, True)        # 8
    writer.data(7, 2, 3)          # 9-10
    writer.data(9, 1, 0)          # 11: never ended
    writer.marker(7, False)       # 12: abort [9, 12]
    return writer


def facts(writer: Writer) -> tuple:
    return (writer.producers.first_unstable_offset(), writer.log.aborted_transactions(0, 100),
            writer.log.aborted_transactions(4, 9))


# The first abort leaves producer 8's transaction (from offset 3) open, so the LSO then was 3.
EXPECTED = (11, [AbortedTxn(7, 0, 5, 3), AbortedTxn(7, 9, 12, 11)], [AbortedTxn(7, 0, 5, 3)])


def test_aborted_transactions_are_written_in_kafkas_34_byte_entries(tmp_path: Path) -> None:
    writer = write_history(tmp_path)
    assert facts(writer) == EXPECTED
    writer.close()
    entries = [struct.unpack(">hqqqq", path.read_bytes()[i:i + 34])
               for path in sorted(tmp_path.glob("*.txnindex")) for i in range(0, path.stat().st_size, 34)]
    assert ABORTED_TXN.size == 34
    assert entries == [(0, 7, 0, 5, 3), (0, 7, 9, 12, 11)]


def test_a_clean_restart_keeps_the_open_transaction_and_the_aborted_list(tmp_path: Path) -> None:
    write_history(tmp_path).close()
    assert facts(reopen(tmp_path)) == EXPECTED


def test_a_crash_without_snapshot_or_indexes_rebuilds_both_from_the_log(tmp_path: Path) -> None:
    writer = write_history(tmp_path)
    writer.log.flush()
    (tmp_path / SNAPSHOT_FILE).unlink(missing_ok=True)
    for path in tmp_path.glob("*.txnindex"):
        path.unlink()
    assert facts(reopen(tmp_path)) == EXPECTED


@pytest.mark.parametrize("damage", ["torn tail", "backwards"])
def test_a_corrupt_index_is_rebuilt_even_below_the_snapshot(tmp_path: Path, damage: str) -> None:
    write_history(tmp_path).close()
    [first, *_] = sorted(tmp_path.glob("*.txnindex"))
    if damage == "torn tail":
        first.write_bytes(first.read_bytes() + b"\x00" * 5)
    else:
        first.write_bytes(ABORTED_TXN.pack(0, 7, 0, 50, 51) + ABORTED_TXN.pack(0, 7, 0, 5, 3))
    assert facts(reopen(tmp_path)) == EXPECTED


def test_truncation_drops_the_aborts_above_the_cut_and_reopens_the_transaction(tmp_path: Path) -> None:
    writer = write_history(tmp_path)
    writer.log.truncate_to(12)
    writer.producers.load(writer.log)
    assert writer.log.aborted_transactions(0, 100) == [AbortedTxn(7, 0, 5, 3)]
    assert writer.producers.open_transactions() == {7: 9, 9: 11}
    assert writer.producers.first_unstable_offset() == 9


def test_a_marker_for_a_producer_without_an_open_transaction_ends_an_empty_one(tmp_path: Path) -> None:
    writer = Writer(tmp_path)
    offset = writer.marker(42, False)
    assert writer.log.aborted_transactions(0, 10) == [AbortedTxn(42, offset, offset, offset + 1)]
    assert writer.producers.first_unstable_offset() is None


def test_a_cleaning_pass_keeps_the_aborted_transactions_of_the_segments_it_merges(tmp_path: Path) -> None:
    from broker_core.log.cleaner import apply_cleaning, clean, plan_cleaning
    from broker_core.log.offset_map import OffsetMap

    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig(cleanup_policy="compact", segment_bytes=600,
                                                 index_interval_bytes=100), topic="t", partition=0)
    producers = ProducerState(directory)
    producers.load(log)

    def append(batch: bytes, marker: ControlRecordType | None = None) -> None:
        info = log.append(batch)
        done = producers.record(parse_header(batch), info.base_offset, marker=marker, coordinator_epoch=1)
        if marker is not None and done.aborted:
            log.append_aborted_transaction(done.aborted_txn())

    sequence = 0
    for round_number in range(6):
        # Producer 7's keyed transactional records, aborted; then plain updates of the same keys to compact.
        append(build_batch([SimpleRecord(key=b"k%d" % k, value=b"aborted" * 20) for k in range(2)], producer_id=7,
                           producer_epoch=0, base_sequence=sequence, is_transactional=True))
        sequence += 2
        append(build_control_batch(ControlRecordType.ABORT, producer_id=7, producer_epoch=0, coordinator_epoch=1),
               ControlRecordType.ABORT)
        append(build_batch([SimpleRecord(key=b"k%d" % k, value=b"plain-%d" % round_number) for k in range(2)]))
    log.roll()
    before = log.aborted_transactions(0, log.log_end_offset)
    assert len(before) == 6 and len(list(directory.glob("*.txnindex"))) > 1
    plan = plan_cleaning(log, high_watermark=log.log_end_offset, producer_last_offsets=frozenset(), now_ms=0,
                         force=True)
    assert plan is not None
    assert apply_cleaning(plan, clean(plan.job, OffsetMap(10_000))) > 0
    assert log.aborted_transactions(0, log.log_end_offset) == before
    producers.write_snapshot(log.log_end_offset)
    log.close()
    reopened = PartitionLog.open(directory, LogConfig(cleanup_policy="compact", segment_bytes=600), topic="t",
                                 partition=0)
    assert reopened.aborted_transactions(0, reopened.log_end_offset) == before
    reopened.close()
    # A kill after a swap but before the merge leaves an absorbed segment's index behind (here offset 1,
    # inside the first segment): the next open moves its entries to the segment now holding that offset.
    first = directory / "00000000000000000000.txnindex"
    (directory / "00000000000000000001.txnindex").write_bytes(first.read_bytes())
    first.unlink()
    adopted = PartitionLog.open(directory, LogConfig(cleanup_policy="compact", segment_bytes=600), topic="t",
                                partition=0)
    assert adopted.aborted_transactions(0, adopted.log_end_offset) == before
    assert not (directory / "00000000000000000001.txnindex").exists()
    adopted.close()
