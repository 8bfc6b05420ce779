"""Retired segments are unlinked on the log owner's worker thread when it gives one (`run_in_background`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from broker_core.log import LogConfig, PartitionLog
from tests.support.batches import make_batch

NOW = 1_700_000_000_000


def test_expired_retired_segments_are_unlinked_by_the_background_runner_not_the_caller(tmp_path: Path) -> None:
    monotonic_s = [1000.0]
    log = PartitionLog.open(tmp_path / "topic-0", LogConfig(segment_bytes=1000, retention_ms=1, file_delete_delay_ms=50),
                            topic="topic", partition=0, monotonic_clock=lambda: monotonic_s[0])
    handed_over: list[Callable[[], None]] = []
    log.run_in_background = handed_over.append
    for number in range(9):
        log.append(make_batch(3, 100, NOW + number, value_seed=number), now_ms=NOW + number)
    for step in handed_over:  # the rolls' flushes
        step()
    handed_over.clear()
    log.enforce_retention(now_ms=NOW + 10**6)
    directory = tmp_path / "topic-0"
    retired = sorted(directory.glob("*.deleted"))
    assert retired
    log.delete_expired_segments()  # within the delay: nothing to do
    assert not handed_over and sorted(directory.glob("*.deleted")) == retired
    monotonic_s[0] += 0.06
    log.delete_expired_segments()
    assert len(handed_over) == 1 and sorted(directory.glob("*.deleted")) == retired  # not on this thread
    handed_over.pop()()
    assert not list(directory.glob("*.deleted"))
    log.delete_expired_segments()
    assert not handed_over  # each retired segment is handed over once
    assert log.read_bytes(log.log_start_offset, 1 << 20)  # the live segments are untouched
    log.close()
