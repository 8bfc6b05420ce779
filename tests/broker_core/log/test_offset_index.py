"""OffsetIndex: lookups at every boundary, truncation, the file format and its sanity check."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker_core.log import CorruptIndexError, OffsetIndex

BASE = 1000


def make_index(tmp_path: Path, entries: list[tuple[int, int]]) -> OffsetIndex:
    index = OffsetIndex(tmp_path / "00000000000000001000.index", BASE, 10 * 1024 * 1024)
    for offset, position in entries:
        index.append(offset, position)
    return index


ENTRIES = [(1010, 4100), (1025, 8300), (1040, 12600)]


def test_an_empty_index_points_at_the_segment_start(tmp_path: Path) -> None:
    index = make_index(tmp_path, [])
    assert index.lookup(BASE) == (BASE, 0)
    assert index.lookup(BASE + 10**6) == (BASE, 0)
    assert index.lookup_by_position(10**6) is None
    assert index.last_entry is None


def test_an_offset_before_the_first_entry_points_at_the_segment_start(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    assert index.lookup(BASE) == (BASE, 0)
    assert index.lookup(1009) == (BASE, 0)


def test_exact_hits_return_their_entry(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    assert [index.lookup(offset) for offset, _ in ENTRIES] == ENTRIES


def test_offsets_between_entries_return_the_entry_below(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    assert index.lookup(1011) == (1010, 4100)
    assert index.lookup(1024) == (1010, 4100)
    assert index.lookup(1039) == (1025, 8300)


def test_offsets_past_the_last_entry_return_the_last_entry(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    assert index.lookup(1041) == (1040, 12600)
    assert index.lookup(2**40) == (1040, 12600)


def test_lookup_by_position_returns_the_entry_at_or_before_the_position(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    assert index.lookup_by_position(4099) is None
    assert index.lookup_by_position(4100) == (1010, 4100)
    assert index.lookup_by_position(12599) == (1025, 8300)
    assert index.lookup_by_position(10**9) == (1040, 12600)


def test_entries_must_increase_in_offset_and_position(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    with pytest.raises(ValueError):
        index.append(1040, 20000)
    with pytest.raises(ValueError):
        index.append(1050, 12600)


def test_truncate_to_drops_entries_at_and_above_the_offset(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    index.truncate_to(1025)
    assert index.last_entry == (1010, 4100)
    assert index.lookup(1030) == (1010, 4100)
    index.truncate_to(1011)
    assert len(index) == 1
    index.truncate_to(BASE)
    assert len(index) == 0


def test_the_file_holds_big_endian_relative_offset_and_position(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    index.flush(fsync=True)
    assert index.path.read_bytes() == b"".join(struct.pack(">ii", o - BASE, p) for o, p in ENTRIES)
    loaded = OffsetIndex.load(index.path, BASE, 1024)
    assert [loaded.entry(n) for n in range(len(loaded))] == ENTRIES


def test_flush_after_truncation_shortens_the_file(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    index.flush(fsync=False)
    index.truncate_to(1025)
    index.append(1030, 9000)
    index.flush(fsync=False)
    assert OffsetIndex.load(index.path, BASE, 1024).last_entry == (1030, 9000)
    assert index.path.stat().st_size == 16


def test_an_index_is_full_at_segment_index_bytes(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0, 24)
    for n in range(1, 4):
        assert not index.is_full
        index.append(n, n * 100)
    assert index.is_full


@pytest.mark.parametrize(
    "content",
    [
        b"\x00" * 7,
        struct.pack(">iiii", 5, 100, 5, 200),
        struct.pack(">iiii", 5, 100, 6, 100),
        struct.pack(">iiii", 5, 100, 4, 200),
        struct.pack(">ii", -1, 100),
    ],
    ids=["partial-entry", "repeated-offset", "repeated-position", "offset-goes-back", "negative"],
)
def test_a_malformed_file_raises_corrupt_index_error_with_its_path(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError) as raised:
        OffsetIndex.load(path, 0, 1024)
    assert raised.value.path == path
