"""LeaderEpochCheckpoint: Kafka's file format and LeaderEpochFileCache semantics."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.log import CorruptCheckpointError, LeaderEpochCheckpoint


def entries(cache: LeaderEpochCheckpoint) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries]


def make_cache(tmp_path: Path, assigned: list[tuple[int, int]]) -> LeaderEpochCheckpoint:
    cache = LeaderEpochCheckpoint(tmp_path / "leader-epoch-checkpoint")
    for epoch, start in assigned:
        cache.assign(epoch, start)
    return cache


def test_the_checkpoint_round_trips_in_kafkas_text_format(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, [(0, 0), (2, 100), (5, 250)])
    assert cache.path.read_text() == "0\n3\n0 0\n2 100\n5 250\n"
    assert entries(LeaderEpochCheckpoint(cache.path)) == [(0, 0), (2, 100), (5, 250)]


def test_assign_ignores_the_latest_epoch_again_and_drops_entries_it_contradicts(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, [(0, 0), (2, 100)])
    assert not cache.assign(2, 150)
    assert cache.latest_epoch == 2
    assert cache.assign(3, 90)
    assert entries(cache) == [(0, 0), (3, 90)]
    assert cache.assign(1, 200)
    assert entries(cache) == [(0, 0), (1, 200)]


def test_end_offset_for_answers_offsets_for_leader_epoch(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, [(1, 0), (3, 100), (6, 250)])
    assert cache.end_offset_for(6, log_end_offset=300) == (6, 300)
    assert cache.end_offset_for(3, log_end_offset=300) == (3, 250)
    assert cache.end_offset_for(4, log_end_offset=300) == (3, 250)
    assert cache.end_offset_for(1, log_end_offset=300) == (1, 100)
    assert cache.end_offset_for(0, log_end_offset=300) == (0, 0)
    assert cache.end_offset_for(7, log_end_offset=300) == (-1, -1)
    assert cache.end_offset_for(-1, log_end_offset=300) == (-1, -1)
    assert make_cache(tmp_path / "empty", []).end_offset_for(0, 10) == (-1, -1)


def test_epoch_for_offset_finds_the_epoch_range_holding_it(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, [(1, 10), (3, 100)])
    assert cache.epoch_for_offset(9) is None
    assert cache.epoch_for_offset(10) == 1
    assert cache.epoch_for_offset(99) == 1
    assert cache.epoch_for_offset(100) == 3


def test_truncate_from_end_drops_epochs_starting_at_or_after_the_offset(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, [(1, 0), (3, 100), (6, 250)])
    cache.truncate_from_end(250)
    assert entries(cache) == [(1, 0), (3, 100)]
    cache.truncate_from_end(101)
    assert entries(cache) == [(1, 0), (3, 100)]
    assert entries(LeaderEpochCheckpoint(cache.path)) == [(1, 0), (3, 100)]


def test_truncate_from_start_moves_the_covering_epoch_up_to_the_new_start(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, [(1, 0), (3, 100), (6, 250)])
    cache.truncate_from_start(150)
    assert entries(cache) == [(3, 150), (6, 250)]
    cache.truncate_from_start(250)
    assert entries(cache) == [(6, 250)]
    assert entries(LeaderEpochCheckpoint(cache.path)) == [(6, 250)]


@pytest.mark.parametrize("content", ["0\n2\n3 10\n2 20\n", "0\n1\n1\n", "0\n2\n1 0\n"])
def test_a_malformed_checkpoint_raises_corrupt_checkpoint_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochCheckpoint(path)
