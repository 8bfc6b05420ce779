"""Recovery after crashes and damage: the log reopens to a valid prefix holding everything it must."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core.log import LogConfig, PartitionLog
from broker_core.records.header import Compression, iter_headers, parse_header
from tests.support.batches import make_batch, records_of

NOW = 1_700_000_000_000
REPO_ROOT = Path(__file__).resolve().parents[3]


def read_all_batches(log: PartitionLog, max_bytes: int = 1 << 20) -> dict[int, bytes]:
    """Every batch the log serves from its start, keyed by base offset; each must pass its CRC."""
    found: dict[int, bytes] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_bytes(offset, max_bytes)
        if not data:
            break
        for position, header in iter_headers(data, check_crc=True):
            found[header.base_offset] = data[position : position + header.size]
            offset = header.next_offset
    return found


def crash_image(log: PartitionLog, destination: Path) -> Path:
    """The directory as a killed process leaves it: what reached the page cache, not what the log buffers."""
    shutil.copytree(log.directory, destination)
    return destination


def test_a_partial_batch_at_the_tail_is_cut_off(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    for number in range(5):
        log.append(make_batch(2, 50, NOW + number), now_ms=NOW)
    expected = read_all_batches(log)
    image = crash_image(log, tmp_path / "crashed")
    log.close()
    with open(image / "00000000000000000000.log", "ab") as file:
        file.write(make_batch(2, 50, NOW)[:-7])
    recovered = PartitionLog.open(image, LogConfig())
    assert recovered.log_end_offset == 10
    assert read_all_batches(recovered) == expected
    assert recovered.append(make_batch(1, 10, NOW), now_ms=NOW).base_offset == 10
    recovered.close()


def test_a_corrupt_index_of_a_flushed_segment_is_rebuilt_without_losing_data(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=2000, index_interval_bytes=200)
    log = PartitionLog.open(tmp_path / "t-0", config)
    for number in range(20):
        log.append(make_batch(2, 100, NOW + number), now_ms=NOW)
    expected = read_all_batches(log)
    log.close()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    assert index.stat().st_size >= 16
    index.write_bytes(index.read_bytes()[:-3])
    (tmp_path / "t-0" / "00000000000000000000.timeindex").unlink()
    reopened = PartitionLog.open(tmp_path / "t-0", config)
    assert read_all_batches(reopened) == expected
    assert index.stat().st_size % 8 == 0 and index.stat().st_size >= 8
    assert reopened.offset_for_timestamp(NOW + 3) == (6, NOW + 3)
    reopened.close()


def test_files_left_by_an_interrupted_deletion_are_removed_on_open(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    log.append(make_batch(1, 10, NOW), now_ms=NOW)
    log.close()
    (tmp_path / "t-0" / "00000000000000000007.log.deleted").write_bytes(b"x")
    (tmp_path / "t-0" / "recovery-point.tmp").write_bytes(b"0\n")
    (tmp_path / "t-0" / "00000000000000000099.index").write_bytes(b"")
    reopened = PartitionLog.open(tmp_path / "t-0", LogConfig())
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
        "recovery-point",
    ]
    assert reopened.log_end_offset == 1
    reopened.close()


def test_a_new_log_is_created_without_an_fsync_and_its_first_flush_makes_its_directory_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig())
    assert synced == []  # an empty new log is simply created again if a crash loses it
    dir_fsyncs: list[int] = []
    real_open = os.open

    def noting_open(path: object, flags: int, *args: object) -> int:
        fd = real_open(path, flags, *args)
        if Path(str(path)) == directory:
            dir_fsyncs.append(fd)
        return fd

    monkeypatch.setattr(os, "open", noting_open)
    log.append(make_batch(3, 10, NOW), now_ms=NOW)
    log.flush()
    assert dir_fsyncs and set(dir_fsyncs) & set(synced)
    log.close()
    reopened = PartitionLog.open(directory, LogConfig())
    assert reopened.log_end_offset == 3
    reopened.close()


def test_a_damaged_base_offset_or_leader_epoch_is_caught_although_the_crc_does_not_cover_it(
    tmp_path: Path,
) -> None:
    for field_position in (7, 15):
        directory = tmp_path / f"t-{field_position}"
        log = PartitionLog.open(directory, LogConfig())
        sizes = [log.append(make_batch(1, 40, NOW), leader_epoch=2, now_ms=NOW).size_bytes for _ in range(4)]
        image = crash_image(log, tmp_path / f"crashed-{field_position}")
        log.close()
        with open(image / "00000000000000000000.log", "r+b") as file:
            file.seek(sum(sizes[:2]) + field_position)
            byte = file.read(1)
            file.seek(-1, os.SEEK_CUR)
            file.write(bytes([byte[0] ^ 0x01]))
        recovered = PartitionLog.open(image, LogConfig())
        assert recovered.log_end_offset == 2
        recovered.close()


def test_an_index_entry_damaged_into_another_ordered_value_is_not_trusted(tmp_path: Path) -> None:
    config = LogConfig(index_interval_bytes=0)
    log = PartitionLog.open(tmp_path / "t-0", config)
    for number in range(10):
        log.append(make_batch(2, 50, NOW + number), now_ms=NOW)
    expected = {offset: log.read_bytes(offset, 1) for offset in range(20)}
    log.close()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    content = bytearray(index.read_bytes())
    content[8 * 3 + 7] ^= 0x03  # entry 3's position moves by 3 bytes and still lies between its neighbours
    index.write_bytes(bytes(content))
    reopened = PartitionLog.open(tmp_path / "t-0", config)
    assert {offset: reopened.read_bytes(offset, 1) for offset in range(20)} == expected
    assert read_all_batches(reopened, max_bytes=400) == read_all_batches(reopened)
    reopened.close()


DAMAGE_KINDS = ("flip-log-above", "cut-log-above", "cut-log-anywhere", "flip-index", "cut-index")


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_damage_after_a_crash_never_yields_a_bad_batch_nor_loses_flushed_data(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    root = tmp_path_factory.mktemp("damage")
    config = LogConfig(
        segment_bytes=data.draw(st.sampled_from([1200, 3000, 1 << 20]), label="segment_bytes"),
        index_interval_bytes=data.draw(st.sampled_from([0, 150, 600]), label="index_interval_bytes"),
    )
    log = PartitionLog.open(root / "t-0", config)
    appended: dict[int, bytes] = {}
    timestamps: dict[int, int] = {}
    epoch = 0
    for number in range(data.draw(st.integers(1, 25), label="batches")):
        epoch += data.draw(st.sampled_from([0, 0, 0, 1]))
        batch = make_batch(
            data.draw(st.integers(1, 4)),
            data.draw(st.integers(1, 250)),
            NOW + number,
            data.draw(st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP])),
            value_seed=number,
        )
        info = log.append(batch, leader_epoch=epoch, now_ms=NOW + number)
        appended[info.base_offset] = log.read_bytes(info.base_offset, 1)
        timestamps[info.base_offset] = NOW + number
        if data.draw(st.integers(0, 4)) == 0:
            log.flush()
    clean_shutdown = data.draw(st.booleans(), label="clean_shutdown")
    if clean_shutdown:
        log.close()
    recovery_point = log.recovery_point
    log_end_offset = log.log_end_offset
    segment_ranges = {s.log_path.name: (s.base_offset, s.next_offset, s.size) for s in log.segments}
    image = crash_image(log, root / "crashed")
    log.close()

    kind = data.draw(st.sampled_from(DAMAGE_KINDS), label="kind")
    # bytes at the start of each segment holding batches wholly below the recovery point
    protected_end = {
        name: sum(
            len(batch)
            for offset, batch in appended.items()
            if base <= offset < next_offset and parse_header(batch).last_offset < recovery_point
        )
        for name, (base, next_offset, _) in segment_ranges.items()
    }
    if kind.endswith("-above"):
        candidates = [name for name, (_, _, size) in segment_ranges.items() if protected_end[name] < size]
    elif kind == "cut-log-anywhere":
        candidates = [name for name, (_, _, size) in segment_ranges.items() if size]
    else:
        suffix = data.draw(st.sampled_from([".index", ".timeindex"]))
        candidates = [p.name for p in image.glob(f"*{suffix}") if p.stat().st_size]
    if candidates:
        target = image / data.draw(st.sampled_from(sorted(candidates)), label="file")
        size = target.stat().st_size
        low = protected_end.get(target.name, 0) if kind.endswith("-above") else 0
        position = data.draw(st.integers(low, size - 1), label="position")
        content = bytearray(target.read_bytes())
        if kind.startswith("flip"):
            content[position] ^= data.draw(st.sampled_from([1, 2, 4, 8, 0x10, 0x80, 0xFF]), label="xor")
        else:
            del content[position:]
        target.write_bytes(bytes(content))

    recovered = PartitionLog.open(root / "crashed", config)
    served = read_all_batches(recovered)
    # (a) whatever is served is a batch that was appended at that offset, byte for byte, however it is
    # asked for (small reads go through the offset index for both ends of the slice)
    for base_offset, batch in served.items():
        assert appended[base_offset] == batch
        last_offset = parse_header(batch).last_offset
        assert recovered.read_bytes(last_offset, 1) == batch
    assert read_all_batches(recovered, max_bytes=700) == served
    # (b) damage above the recovery point (or to indexes only) loses nothing below it
    if kind != "cut-log-anywhere":
        must_survive = [o for o in appended if o < recovery_point]
        if kind in ("flip-index", "cut-index"):
            must_survive = list(appended)
            assert recovered.log_end_offset == log_end_offset
        assert all(o in served for o in must_survive)
        for base_offset in must_survive[-3:]:
            assert recovered.offset_for_timestamp(timestamps[base_offset]) == (
                base_offset,
                timestamps[base_offset],
            )
    # (c) the log continues where the valid prefix ends
    end = recovered.log_end_offset
    assert end >= recovery_point or kind == "cut-log-anywhere"
    info = recovered.append(make_batch(2, 10, NOW), leader_epoch=epoch, now_ms=NOW)
    assert info.base_offset == end
    assert records_of(recovered.read_bytes(end, 1 << 20))[0][0] == end
    recovered.close()
