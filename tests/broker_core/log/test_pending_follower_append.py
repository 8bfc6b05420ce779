"""A follower's append whose bytes are written on another thread (`PartitionLog.begin_append_as_follower`):
the log end moves only when the append is taken in, and any other change to the log takes it in first."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from broker_core.log import LogConfig, PartitionLog
from broker_core.log.partition_log import PendingAppend
from broker_core.log.segment import Segment
from broker_core.records.header import iter_headers
from tests.support.batches import leader_batches, make_batch

NOW = 1_700_000_000_000


def open_log(path: Path, **settings: object) -> PartitionLog:
    return PartitionLog.open(path / "topic-0", LogConfig(**settings), topic="topic", partition=0)


def offsets_read(log: PartitionLog) -> list[tuple[int, int]]:
    data = log.read_bytes(0, 1 << 20)
    return [(header.base_offset, header.last_offset) for _, header in iter_headers(data)]


def test_the_log_end_moves_when_an_append_written_on_another_thread_is_taken_in(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(leader_batches(0, [2]), now_ms=NOW)
    taken_in = []
    pending = log.begin_append_as_follower(leader_batches(2, [3, 1], epoch=1), now_ms=NOW,
                                           on_taken_in=taken_in.append)
    assert isinstance(pending, PendingAppend) and log.pending_append is pending
    assert log.log_end_offset == 2 and offsets_read(log) == [(0, 1)]
    writer = threading.Thread(target=pending.finish)
    writer.start()
    writer.join()
    assert log.log_end_offset == 2  # written, not yet taken in: readers still end at 2
    log.finish_append()
    assert log.pending_append is None and log.log_end_offset == 6
    assert offsets_read(log) == [(0, 1), (2, 4), (5, 5)]
    assert [(info.base_offset, info.last_offset) for info in taken_in] == [(2, 5)]
    assert log.leader_epochs.latest_epoch == 1
    log.close()


@pytest.mark.parametrize("change", ["leader append", "truncate", "flush", "close", "next follower append"])
def test_any_other_change_takes_a_pending_append_in_first_writing_it_if_no_thread_has(
        tmp_path: Path, change: str) -> None:
    log = open_log(tmp_path)
    taken_in = []
    log.begin_append_as_follower(leader_batches(0, [2, 2]), now_ms=NOW, on_taken_in=taken_in.append)
    if change == "leader append":
        assert log.append(make_batch(1, 10, NOW), now_ms=NOW).base_offset == 4
    elif change == "truncate":
        log.truncate_to(2)
        assert log.log_end_offset == 2
    elif change == "flush":
        log.flush()
        assert log.recovery_point == 4
    elif change == "next follower append":
        assert log.append_as_follower(leader_batches(4, [1]), now_ms=NOW).base_offset == 4
    else:
        log.close()
        log = open_log(tmp_path)
        assert log.log_end_offset == 4
    assert len(taken_in) == 1 and log.pending_append is None
    assert offsets_read(log)[:1] == [(0, 1)]
    log.close()


def test_a_write_that_fails_is_not_taken_in_and_the_next_append_goes_where_it_would_have(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(leader_batches(0, [2]), now_ms=NOW)
    taken_in = []
    pending = log.begin_append_as_follower(leader_batches(2, [3]), now_ms=NOW, on_taken_in=taken_in.append)

    def disk_full(self: Segment, start: int, data: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(Segment, "write_at", disk_full)
        with pytest.raises(OSError):
            pending.finish()  # the worker thread sees the failure
    with pytest.raises(OSError, match="No space"):
        log.finish_append()  # and so does whoever takes the append in
    assert log.log_end_offset == 2 and not taken_in and log.pending_append is None
    assert log.append_as_follower(leader_batches(2, [3]), now_ms=NOW).last_offset == 4
    assert offsets_read(log) == [(0, 1), (2, 4)]
    log.close()


def test_an_append_that_starts_past_the_log_end_rolls_before_its_bytes_are_written(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(leader_batches(0, [2]), now_ms=NOW)
    pending = log.begin_append_as_follower(leader_batches(10, [2]), now_ms=NOW)
    assert isinstance(pending, PendingAppend)
    assert [segment.base_offset for segment in log.segments] == [0, 10] and log.log_end_offset == 10
    pending.finish()
    log.finish_append()
    assert log.log_end_offset == 12
    log.close()
