"""PartitionLog: appends, reads as whole-batch file slices, rolling, timestamps, truncation, retention."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from broker_core.log import (
    LeaderEpochOutOfOrderError,
    LogConfig,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    PartitionLog,
    RecordTooLargeError,
)
from broker_core.log import segment as segment_module
from broker_core.log.segment import RESERVE_AHEAD_BYTES, Segment, reserve_blocks
from broker_core.records.errors import CorruptCrcError, TruncatedBatchError
from broker_core.records.header import iter_headers, parse_header
from tests.support.batches import leader_batches, make_batch, records_of

NOW = 1_700_000_000_000


def open_log(path: Path, **settings: object) -> PartitionLog:
    return PartitionLog.open(path / "topic-0", LogConfig(**settings), topic="topic", partition=0)


def batches_in(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each whole batch in ``data``; raises on a partial one."""
    return [(header.base_offset, header.last_offset) for _, header in iter_headers(data, check_crc=True)]


def fill(log: PartitionLog, count: int, records: int = 3, value_size: int = 100) -> list[bytes]:
    sent = []
    for number in range(count):
        batch = make_batch(records, value_size, NOW + number, value_seed=number)
        log.append(batch, now_ms=NOW + number)
        sent.append(batch)
    return sent


def test_append_assigns_contiguous_offsets_and_reports_them(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append(make_batch(3, 10, NOW), now_ms=NOW)
    second = log.append(make_batch(5, 10, NOW + 7, timestamp_step_ms=1), now_ms=NOW)
    assert (first.base_offset, first.last_offset, first.num_batches) == (0, 2, 1)
    assert (second.base_offset, second.last_offset) == (3, 7)
    assert second.max_timestamp == NOW + 11 and second.offset_of_max_timestamp == 7
    assert second.log_append_time == -1
    assert log.log_end_offset == 8 and log.log_start_offset == 0
    log.close()


def test_append_of_several_batches_at_once_assigns_offsets_to_each(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    info = log.append(make_batch(2, 10, NOW) + make_batch(4, 10, NOW) + make_batch(1, 10, NOW), now_ms=NOW)
    assert (info.base_offset, info.last_offset, info.num_batches) == (0, 6, 3)
    assert batches_in(log.read_bytes(0, 1 << 20)) == [(0, 1), (2, 5), (6, 6)]
    log.close()


def test_read_returns_the_appended_records_with_assigned_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sent = fill(log, 5)
    data = log.read_bytes(6, 1 << 20)
    records = records_of(data[: parse_header(data).size])
    assert [offset for offset, *_ in records] == [6, 7, 8]
    assert [value for *_, value in records] == [value for *_, value in records_of(sent[2])]
    log.close()


def test_read_starts_at_the_batch_holding_the_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 4)
    file_slice = log.read(4, 1 << 20)
    assert file_slice is not None
    assert (file_slice.first_offset, file_slice.last_offset) == (3, 11)
    log.close()


def test_read_never_cuts_a_batch_in_two(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=300)
    fill(log, 40, records=2, value_size=150)
    batch_size = parse_header(log.read_bytes(0, 1)).size
    for max_bytes in range(batch_size, 12 * batch_size, 37):
        for offset in range(0, 80, 7):
            data = log.read_bytes(offset, max_bytes)
            batches = batches_in(data)
            assert len(data) <= max_bytes
            assert batches[0][0] <= offset <= batches[0][1]
            assert len(data) == (max_bytes // batch_size) * batch_size or batches[-1][1] == 79
    log.close()


def test_read_stops_before_the_batch_reaching_max_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=100)
    fill(log, 10)
    file_slice = log.read(0, 1 << 20, max_offset=14)
    assert file_slice is not None
    assert file_slice.last_offset == 11
    assert batches_in(log.read_bytes(0, 1 << 20, max_offset=14))[-1] == (9, 11)
    assert batches_in(log.read_bytes(3, 1 << 20, max_offset=15))[-1] == (12, 14)
    assert log.read(12, 1 << 20, max_offset=14) is None
    assert log.read(0, 1 << 20, max_offset=0) is None
    log.close()


def test_min_one_batch_returns_a_first_batch_larger_than_max_bytes_whole(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3, value_size=500)
    data = log.read_bytes(0, 100)
    assert batches_in(data) == [(0, 2)]
    assert log.read(0, 100, min_one_batch=False) is None
    log.close()


def test_read_at_the_log_end_returns_nothing_and_outside_the_log_raises(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2)
    assert log.read(6, 1000) is None
    assert log.read_bytes(6, 1000) == b""
    with pytest.raises(OffsetOutOfRangeError) as raised:
        log.read(7, 1000)
    assert (raised.value.offset, raised.value.log_start_offset, raised.value.log_end_offset) == (7, 0, 6)
    log.delete_records_before(3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 1000)
    log.close()


def test_an_empty_log_reads_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.read(0, 1000) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 1000)
    log.close()


def test_segments_roll_when_the_next_append_would_exceed_segment_bytes(tmp_path: Path) -> None:
    batch = make_batch(1, 100, NOW)
    log = open_log(tmp_path, segment_bytes=3 * len(batch) + 10)
    for _ in range(7):
        log.append(batch, now_ms=NOW)
    assert [segment.base_offset for segment in log.segments] == [0, 3, 6]
    assert all(segment.size <= 3 * len(batch) + 10 for segment in log.segments)
    assert sorted(p.name for p in (tmp_path / "topic-0").glob("*.log")) == [
        "00000000000000000000.log",
        "00000000000000000003.log",
        "00000000000000000006.log",
    ]
    assert batches_in(log.read_bytes(2, 1 << 20)) == [(2, 2)]
    assert batches_in(log.read_bytes(3, 1 << 20)) == [(3, 3), (4, 4), (5, 5)]
    log.close()


def test_segments_roll_once_segment_ms_passed_since_their_first_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    log.append(make_batch(1, 10, NOW), now_ms=NOW)
    log.append(make_batch(1, 10, NOW + 500), now_ms=NOW + 1000)
    assert len(log.segments) == 1
    log.append(make_batch(1, 10, NOW + 1001), now_ms=NOW + 1001)
    assert [segment.base_offset for segment in log.segments] == [0, 2]
    log.close()


def test_roll_flushes_the_sealed_segment_and_moves_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    assert log.recovery_point == 0
    log.roll(now_ms=NOW)
    assert log.recovery_point == 9
    assert (tmp_path / "topic-0" / "recovery-point").read_text() == "0\n1\n9\n"
    log.close()


def test_a_rolls_flush_handed_to_a_worker_moves_the_recovery_point_when_it_has_run(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    handed: list = []
    log.run_in_background = handed.append  # the owner's worker; run by hand here
    fill(log, 3)
    log.roll(now_ms=NOW)
    fill(log, 2)
    log.roll(now_ms=NOW)
    assert len(handed) == 2 and log.recovery_point == 0  # nothing fsynced on the appending thread
    handed[1]()  # the second roll's flush runs the first's before its own
    assert log.recovery_point == 15
    assert (tmp_path / "topic-0" / "recovery-point").read_text() == "0\n1\n15\n"
    handed[0]()  # already run: nothing happens twice, the recovery point does not go back
    assert log.recovery_point == 15
    log.close()


@pytest.mark.parametrize("change", ["truncate", "close", "retention"])
def test_a_change_to_the_log_finishes_a_pending_roll_flush_first(tmp_path: Path, change: str) -> None:
    log = open_log(tmp_path, retention_bytes=1)
    handed: list = []
    log.run_in_background = handed.append
    fill(log, 3)
    log.roll(now_ms=NOW)
    fill(log, 3)
    assert log.recovery_point == 0
    if change == "truncate":
        log.truncate_to(4)  # below the roll: the flush runs first, then the recovery point follows the end
        assert log.recovery_point == 3 and log.log_end_offset == 3
    elif change == "close":
        log.close()
        assert (tmp_path / "topic-0" / "recovery-point").read_text() == "0\n1\n18\n"
        return
    else:
        assert log.enforce_retention(now_ms=NOW) == 1  # the sealed segment goes: its flush runs first
        assert log.recovery_point == 9 and log.log_start_offset == 9
    handed[0]()  # run late by the worker: changes nothing now
    assert log.recovery_point <= log.log_end_offset
    log.close()


def test_flush_messages_forces_a_flush_every_n_messages(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=5)
    log.append(make_batch(3, 10, NOW), now_ms=NOW)
    assert log.recovery_point == 0
    log.append(make_batch(3, 10, NOW), now_ms=NOW)
    assert log.recovery_point == 6
    log.close()


def test_log_append_time_topics_stamp_the_broker_time_into_each_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = log.append(make_batch(3, 10, 5), now_ms=NOW)
    assert info.log_append_time == NOW and info.max_timestamp == NOW
    data = log.read_bytes(0, 1000)
    assert batches_in(data) == [(0, 2)]
    header = parse_header(data)
    assert header.max_timestamp == NOW and header.timestamp_type.name == "LOG_APPEND_TIME"
    assert log.offset_for_timestamp(NOW) == (0, NOW)
    log.close()


def test_log_append_time_stamps_every_batch_of_one_append(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    log.append(make_batch(1, 10, 5), now_ms=NOW - 1)
    info = log.append(make_batch(2, 10, 5) + make_batch(3, 10, 6) + make_batch(1, 10, 7), now_ms=NOW)
    assert (info.base_offset, info.last_offset, info.log_append_time) == (1, 6, NOW)
    data = log.read_bytes(1, 10_000)
    assert batches_in(data) == [(1, 2), (3, 5), (6, 6)]  # every CRC recomputed over its own batch
    assert [(h.max_timestamp, h.timestamp_type.name) for _, h in iter_headers(data)] == [(NOW, "LOG_APPEND_TIME")] * 3
    log.close()


def test_an_append_of_more_batches_than_one_write_call_takes_keeps_every_byte(tmp_path: Path) -> None:
    """Each batch is written as two buffers (its patched first bytes and the rest as given), and one
    pwritev call takes at most IOV_MAX (1024 on Linux) of them."""
    log = open_log(tmp_path)
    sent = [make_batch(1 + number % 3, 20, NOW + number, value_seed=number) for number in range(700)]
    info = log.append(b"".join(sent), leader_epoch=7, now_ms=NOW)
    assert info.num_batches == 700 and info.last_offset == sum(1 + number % 3 for number in range(700)) - 1
    stored = log.read_bytes(0, 1 << 24)
    assert len(stored) == sum(len(batch) for batch in sent) == log.active_segment.size
    position, expected_base = 0, 0
    for batch, (at, header) in zip(sent, iter_headers(stored, check_crc=True), strict=True):
        assert at == position and header.base_offset == expected_base and header.partition_leader_epoch == 7
        assert stored[position + 16:position + len(batch)] == batch[16:]  # from the magic byte on, as sent
        position += len(batch)
        expected_base = header.last_offset + 1
    log.close()


def _can_reserve_blocks(directory: Path) -> bool:
    fd = os.open(directory / "probe", os.O_RDWR | os.O_CREAT)
    try:
        return reserve_blocks(fd, 0, 4096)
    finally:
        os.close(fd)
        (directory / "probe").unlink()


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_the_active_segment_reserves_blocks_ahead_without_growing_and_sealing_gives_them_back(tmp_path: Path) -> None:
    if not _can_reserve_blocks(tmp_path):
        pytest.skip("this filesystem cannot reserve blocks past a file's end (fallocate FALLOC_FL_KEEP_SIZE)")
    log = open_log(tmp_path)
    log.append(make_batch(20, 1000, NOW), now_ms=NOW)
    active = log.active_segment
    assert os.stat(active.log_path).st_size == active.size  # readers and uploads see only the batches
    assert _allocated(active.log_path) >= active.size + RESERVE_AHEAD_BYTES
    written_at = os.stat(active.log_path).st_mtime_ns
    time.sleep(0.01)
    log.roll(now_ms=NOW + 1)
    sealed = os.stat(active.log_path)
    assert sealed.st_size == active.size and sealed.st_blocks * 512 < active.size + 64 * 1024
    assert sealed.st_mtime_ns == written_at  # stands for the last append when batches carry no timestamps
    assert batches_in(log.read_bytes(0, 1 << 20)) == [(0, 19)]
    log.close()


def test_blocks_a_crashed_process_reserved_are_given_back_when_the_reopened_segment_is_sealed(tmp_path: Path) -> None:
    if not _can_reserve_blocks(tmp_path):
        pytest.skip("this filesystem cannot reserve blocks past a file's end (fallocate FALLOC_FL_KEEP_SIZE)")
    settings = {"index_interval_bytes": 4096, "segment_index_bytes": 1 << 16}
    crashed = Segment.create(tmp_path, 0, now_ms=NOW, **settings)
    batch = make_batch(3, 100, NOW)
    crashed.append(batch, [(0, len(batch), 2, NOW)])
    assert _allocated(crashed.log_path) >= len(batch) + RESERVE_AHEAD_BYTES
    reopened, problem = Segment.open(tmp_path, 0, **settings)  # the first process never sealed or closed
    assert problem is None and reopened.check_tail() and reopened.size == len(batch)
    reopened.seal()
    assert _allocated(reopened.log_path) < len(batch) + 64 * 1024
    assert os.pread(reopened.fd, len(batch) + 1, 0) == batch
    crashed.close()
    reopened.close()


def test_a_write_the_filesystem_takes_only_in_part_is_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_pwritev = os.pwritev
    calls = []

    def short_pwritev(fd: int, buffers: list, offset: int) -> int:
        # Write the first buffer and half of the second, as a filesystem may when interrupted.
        calls.append(len(buffers))
        return real_pwritev(fd, [buffers[0], memoryview(buffers[1])[:len(buffers[1]) // 2]], offset)

    monkeypatch.setattr(segment_module.os, "pwritev", short_pwritev)
    log = open_log(tmp_path)
    sent = [make_batch(2, 50, NOW, value_seed=number) for number in range(3)]
    log.append(b"".join(sent), now_ms=NOW)
    assert calls == [6]
    assert batches_in(log.read_bytes(0, 1 << 20)) == [(0, 1), (2, 3), (4, 5)]
    log.close()


def test_a_bad_batch_anywhere_in_the_append_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    good = make_batch(2, 10, NOW)
    corrupt = bytearray(make_batch(2, 10, NOW))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptCrcError):
        log.append(good + bytes(corrupt), now_ms=NOW)
    with pytest.raises(TruncatedBatchError):
        log.append(good + b"\x00" * 20, now_ms=NOW)
    with pytest.raises(TruncatedBatchError):
        log.append(good[:-1], now_ms=NOW)
    assert log.log_end_offset == 0 and log.active_segment.size == 0
    log.close()


def test_a_batch_above_max_message_bytes_is_rejected_whole(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=500)
    small, large = make_batch(1, 10, NOW), make_batch(1, 600, NOW)
    with pytest.raises(RecordTooLargeError) as raised:
        log.append(small + large, now_ms=NOW)
    assert raised.value.size == len(large) and raised.value.position == len(small)
    assert log.log_end_offset == 0
    log.close()


def test_the_appended_input_is_not_modified(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(1, 10, NOW), now_ms=NOW)
    batch = bytearray(make_batch(1, 10, NOW))
    before = bytes(batch)
    log.append(batch, now_ms=NOW)
    assert bytes(batch) == before
    log.close()


def test_offset_for_timestamp_finds_the_first_record_at_or_after_it(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=200, segment_bytes=2000)
    for number in range(30):
        log.append(make_batch(4, 50, NOW + 100 * number, timestamp_step_ms=10), now_ms=NOW)
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(0) == (0, NOW)
    assert log.offset_for_timestamp(NOW) == (0, NOW)
    assert log.offset_for_timestamp(NOW + 1) == (1, NOW + 10)
    assert log.offset_for_timestamp(NOW + 1230) == (51, NOW + 1230)
    assert log.offset_for_timestamp(NOW + 1231) == (52, NOW + 1300)
    assert log.offset_for_timestamp(NOW + 2930) == (119, NOW + 2930)
    assert log.offset_for_timestamp(NOW + 2931) is None
    log.close()


def test_truncate_to_drops_everything_from_the_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1500)
    fill(log, 10)
    assert len(log.segments) > 2
    assert log.truncate_to(12)
    assert log.log_end_offset == 12
    assert batches_in(log.read_bytes(0, 1 << 20))[-1][1] <= 11
    data = b"".join(log.read_bytes(s.base_offset, 1 << 20) for s in log.segments if s.size)
    assert batches_in(data)[-1] == (9, 11)
    info = log.append(make_batch(2, 10, NOW), now_ms=NOW)
    assert info.base_offset == 12
    assert not log.truncate_to(100)
    log.close()


def test_truncate_to_inside_a_batch_drops_the_whole_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    log.truncate_to(4)
    assert log.log_end_offset == 3
    log.close()


def test_truncate_fully_and_start_at_empties_the_log_at_a_new_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1000)
    assert log.leader_epochs.entries == ()
    assert log.append(make_batch(1, 10, NOW), now_ms=NOW).base_offset == 1000
    log.close()
    reopened = open_log(tmp_path)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1000, 1001)
    reopened.close()


def test_delete_records_before_moves_the_log_start_and_drops_whole_segments_below_it(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1000)
    fill(log, 9)
    bases = [segment.base_offset for segment in log.segments]
    assert log.delete_records_before(bases[2] + 1) == bases[2] + 1
    assert [segment.base_offset for segment in log.segments] == bases[2:]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(bases[2], 1000)
    assert log.read(bases[2] + 1, 1000) is not None
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(1000)
    log.close()
    assert open_log(tmp_path).log_start_offset == bases[2] + 1


def test_retention_ms_deletes_old_segments_but_never_the_active_one(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1000, retention_ms=10_000)
    for number in range(9):
        log.append(make_batch(3, 100, NOW + number * 1000), now_ms=NOW + number * 1000)
    segments = log.segments
    assert len(segments) == 5
    newest_in_second = segments[1].largest_timestamp
    deleted = log.enforce_retention(now_ms=newest_in_second + 10_001)
    assert deleted == 2
    assert log.log_start_offset == segments[2].base_offset
    assert log.enforce_retention(now_ms=NOW + 10**9) == 2
    assert log.segments == [segments[-1]]
    assert log.log_start_offset == segments[-1].base_offset
    log.close()


def test_retention_bytes_keeps_at_least_retention_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1000, retention_bytes=2000)
    fill(log, 12)
    total = log.size_bytes
    assert log.enforce_retention(now_ms=NOW) > 0
    assert log.size_bytes >= 2000
    assert log.size_bytes - log.segments[0].size < 2000
    assert log.size_bytes < total
    log.close()


def test_retention_respects_the_high_watermark_and_the_can_delete_hook(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1000, retention_ms=1)
    fill(log, 9)
    bases = [segment.base_offset for segment in log.segments]
    assert log.enforce_retention(now_ms=NOW + 10**6, high_watermark=bases[1]) == 1
    assert log.enforce_retention(now_ms=NOW + 10**6, can_delete=lambda s: s.base_offset < bases[3]) == 2
    assert log.log_start_offset == bases[3]
    log.close()


def test_a_slice_stays_readable_after_retention_deletes_its_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1000, retention_ms=1)
    fill(log, 9)
    file_slice = log.read(0, 1 << 20)
    assert file_slice is not None
    expected = os.pread(file_slice.fd, file_slice.length, file_slice.position)
    assert log.enforce_retention(now_ms=NOW + 10**6) > 0
    assert not (tmp_path / "topic-0" / "00000000000000000000.log").exists()
    assert os.pread(file_slice.fd, file_slice.length, file_slice.position) == expected
    log.close()


def test_retired_segments_are_unlinked_after_the_file_delete_delay(tmp_path: Path) -> None:
    monotonic_s = [1000.0]
    log = PartitionLog.open(
        tmp_path / "topic-0",
        LogConfig(segment_bytes=1000, retention_ms=1, file_delete_delay_ms=50),
        topic="topic",
        partition=0,
        monotonic_clock=lambda: monotonic_s[0],
    )
    fill(log, 9)
    log.enforce_retention(now_ms=NOW + 10**6)
    directory = tmp_path / "topic-0"
    assert list(directory.glob("*.deleted"))
    monotonic_s[0] += 0.06
    log.delete_expired_segments()
    assert not list(directory.glob("*.deleted"))
    log.close()


def test_leader_epochs_are_recorded_at_their_first_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(2, 10, NOW), leader_epoch=0, now_ms=NOW)
    log.append(make_batch(2, 10, NOW), leader_epoch=3, now_ms=NOW)
    log.append(make_batch(2, 10, NOW), leader_epoch=3, now_ms=NOW)
    assert [(e.epoch, e.start_offset) for e in log.leader_epochs.entries] == [(0, 0), (3, 2)]
    assert parse_header(log.read_bytes(2, 1000)).partition_leader_epoch == 3
    assert log.end_offset_for_epoch(0) == (0, 2)
    assert log.end_offset_for_epoch(3) == (3, 6)
    with pytest.raises(LeaderEpochOutOfOrderError):
        log.append(make_batch(1, 10, NOW), leader_epoch=2, now_ms=NOW)
    log.truncate_to(2)
    assert [(e.epoch, e.start_offset) for e in log.leader_epochs.entries] == [(0, 0)]
    log.close()


def _checkpoint_lines(log: PartitionLog) -> list[str]:
    return (log.directory / "leader-epoch-checkpoint").read_text().splitlines()


def _killed_and_reopened(log: PartitionLog, destination: Path) -> PartitionLog:
    """The log as a killed process leaves it (what reached the page cache), opened again."""
    shutil.copytree(log.directory, destination)
    return PartitionLog.open(destination, LogConfig(), topic="topic", partition=0)


def test_a_new_leaders_epoch_file_is_written_by_the_worker_and_before_the_epochs_first_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    handed: list = []
    log.run_in_background = handed.append  # the owner's worker; run by hand here
    log.append(make_batch(2, 10, NOW), leader_epoch=0, now_ms=NOW)
    before = _checkpoint_lines(log)
    log.start_leader_epoch(1)  # elected: the epoch starts at the log end, as Kafka's makeLeader records it
    assert log.end_offset_for_epoch(0) == (0, 2) and log.leader_epochs.latest_epoch == 1
    assert len(handed) == 1 and _checkpoint_lines(log) == before  # the file is the worker's to write
    log.append(make_batch(3, 10, NOW), leader_epoch=1, now_ms=NOW)  # the worker has not run: written first
    assert _checkpoint_lines(log)[2:] == ["0 0", "1 2"]
    reopened = _killed_and_reopened(log, tmp_path / "killed")
    assert reopened.log_end_offset == 5 and reopened.end_offset_for_epoch(1) == (1, 5)
    reopened.close()
    handed[0]()  # run late by the worker: nothing left to write
    assert not log.leader_epochs.unwritten
    log.close()


def test_a_followers_new_epoch_is_in_the_file_before_its_batches_and_durable_by_the_next_flush(
        tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(leader_batches(0, [2], epoch=0), now_ms=NOW)
    log.append_as_follower(leader_batches(2, [3], epoch=1), now_ms=NOW)
    assert _checkpoint_lines(log)[2:] == ["0 0", "1 2"]
    assert log.leader_epochs.unwritten  # written without fsyncs: a durable write is owed
    reopened = _killed_and_reopened(log, tmp_path / "killed")
    assert reopened.log_end_offset == 5 and reopened.end_offset_for_epoch(0) == (0, 2)
    reopened.close()
    log.flush()  # before the recovery point passes the epoch's batches
    assert not log.leader_epochs.unwritten and log.recovery_point == 5
    log.close()


def test_append_as_follower_keeps_the_leaders_offsets_and_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    info = log.append_as_follower(leader_batches(0, [2, 3], epoch=4), now_ms=NOW)
    assert (info.base_offset, info.last_offset) == (0, 4)
    assert log.leader_epochs.latest_epoch == 4
    assert batches_in(log.read_bytes(0, 1000)) == [(0, 1), (2, 4)]
    log.close()


def test_append_as_follower_rejects_offsets_below_the_log_end_or_with_holes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(leader_batches(0, [2]), now_ms=NOW)
    with pytest.raises(OffsetsOutOfOrderError) as raised:
        log.append_as_follower(leader_batches(1, [2]), now_ms=NOW)
    assert (raised.value.offset, raised.value.expected_offset) == (1, 2)
    with pytest.raises(OffsetsOutOfOrderError):
        log.append_as_follower(leader_batches(2, [2]) + leader_batches(5, [1]), now_ms=NOW)
    assert log.log_end_offset == 2
    log.close()


def test_a_follower_told_to_continue_above_an_empty_log_starts_there(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(leader_batches(100, [2]), now_ms=NOW)
    assert (log.log_start_offset, log.log_end_offset) == (100, 102)
    assert [segment.base_offset for segment in log.segments] == [100]
    log.close()


def test_append_as_follower_above_the_log_end_starts_a_new_segment_there(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(leader_batches(0, [2]), now_ms=NOW)
    log.append_as_follower(leader_batches(10, [2]), now_ms=NOW)
    assert [segment.base_offset for segment in log.segments] == [0, 10]
    assert batches_in(log.read_bytes(5, 1000)) == [(10, 11)]
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == 12
    reopened.close()


def test_a_cleanly_closed_log_reopens_with_everything(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2000, index_interval_bytes=300)
    fill(log, 20)
    before = [log.read_bytes(offset, 1 << 20) for offset in range(0, 60, 5)]
    log.close()
    reopened = open_log(tmp_path, segment_bytes=2000, index_interval_bytes=300)
    assert reopened.log_end_offset == 60 and reopened.recovery_point == 60
    assert [reopened.read_bytes(offset, 1 << 20) for offset in range(0, 60, 5)] == before
    assert reopened.offset_for_timestamp(NOW + 19) == (57, NOW + 19)
    assert reopened.append(make_batch(1, 10, NOW), now_ms=NOW).base_offset == 60
    reopened.close()
