"""Checkpoint files: Kafka's text format, atomic replacement, single-offset checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.log.checkpoint import (
    atomic_write,
    read_checkpoint,
    read_offset_checkpoint,
    write_checkpoint,
    write_offset_checkpoint,
)
from broker_core.log.errors import CorruptCheckpointError


def test_the_recovery_point_round_trips_in_kafkas_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point"
    write_offset_checkpoint(path, 12345)
    assert path.read_text() == "0\n1\n12345\n"
    assert read_offset_checkpoint(path) == 12345


def test_a_missing_checkpoint_reads_as_none(tmp_path: Path) -> None:
    assert read_offset_checkpoint(tmp_path / "recovery-point") is None


def test_a_write_replaces_the_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point"
    write_offset_checkpoint(path, 1)
    write_offset_checkpoint(path, 2)
    assert read_offset_checkpoint(path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recovery-point"]


def test_a_torn_temp_file_from_a_crash_leaves_the_checkpoint_intact(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point"
    write_offset_checkpoint(path, 77)
    (tmp_path / "recovery-point.tmp").write_text("0\n1\n9")
    assert read_offset_checkpoint(path) == 77
    write_offset_checkpoint(path, 78)
    assert read_offset_checkpoint(path) == 78


def test_atomic_write_writes_exact_bytes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    atomic_write(path, b"\x00\x01abc")
    assert path.read_bytes() == b"\x00\x01abc"


def test_multi_field_entries_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "c"
    write_checkpoint(path, [(1, 10), (3, 40)])
    assert read_checkpoint(path, fields_per_entry=2) == [[1, 10], [3, 40]]


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ("1\n1\n5\n", 1),
        ("0\nx\n", 2),
        ("0\n2\n5\n", 2),
        ("0\n1\n5 6\n", 3),
        ("0\n1\nfive\n", 3),
        ("0\n", None),
    ],
)
def test_a_malformed_checkpoint_raises_with_the_line(tmp_path: Path, content: str, line: int | None) -> None:
    path = tmp_path / "recovery-point"
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError) as raised:
        read_offset_checkpoint(path)
    assert raised.value.line == line and raised.value.path == path
