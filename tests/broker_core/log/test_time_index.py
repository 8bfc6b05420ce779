"""TimeIndex: lookups by timestamp, monotonic appends, truncation, the file format and its sanity check."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker_core.log import CorruptIndexError, TimeIndex

BASE = 500


def make_index(tmp_path: Path, entries: list[tuple[int, int]]) -> TimeIndex:
    index = TimeIndex(tmp_path / "00000000000000000500.timeindex", BASE, 1024 * 1024)
    for timestamp, offset in entries:
        assert index.maybe_append(timestamp, offset)
    return index


ENTRIES = [(10_000, 510), (10_500, 530), (11_000, 531)]


def test_an_empty_index_gives_the_base_offset(tmp_path: Path) -> None:
    assert make_index(tmp_path, []).lookup(10**12) == (-1, BASE)


def test_a_timestamp_before_the_first_entry_gives_the_base_offset(tmp_path: Path) -> None:
    assert make_index(tmp_path, ENTRIES).lookup(9_999) == (-1, BASE)


def test_exact_hits_and_timestamps_between_entries_give_the_entry_at_or_below(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    assert [index.lookup(ts) for ts, _ in ENTRIES] == ENTRIES
    assert index.lookup(10_499) == (10_000, 510)
    assert index.lookup(10_999) == (10_500, 530)
    assert index.lookup(10**12) == (11_000, 531)


def test_only_a_growing_timestamp_adds_an_entry(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    assert not index.maybe_append(11_000, 540)
    assert not index.maybe_append(10_900, 545)
    assert len(index) == 3
    with pytest.raises(ValueError):
        index.maybe_append(12_000, 520)


def test_truncate_to_drops_entries_at_and_above_the_offset(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    index.truncate_to(531)
    assert index.last_entry == (10_500, 530)
    index.truncate_to(BASE)
    assert index.last_entry is None


def test_the_file_holds_big_endian_timestamp_and_relative_offset(tmp_path: Path) -> None:
    index = make_index(tmp_path, ENTRIES)
    index.flush(fsync=True)
    assert index.path.read_bytes() == b"".join(struct.pack(">qi", t, o - BASE) for t, o in ENTRIES)
    loaded = TimeIndex.load(index.path, BASE, 1024)
    assert [loaded.entry(n) for n in range(len(loaded))] == ENTRIES


@pytest.mark.parametrize(
    "content",
    [
        b"\x00" * 13,
        struct.pack(">qiqi", 100, 1, 100, 2),
        struct.pack(">qiqi", 100, 2, 200, 1),
        struct.pack(">qi", 100, -3),
    ],
    ids=["partial-entry", "timestamp-repeats", "offset-goes-back", "negative-offset"],
)
def test_a_malformed_file_raises_corrupt_index_error_with_its_path(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError) as raised:
        TimeIndex.load(path, 0, 1024)
    assert raised.value.path == path
