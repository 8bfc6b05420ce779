"""The log cleaner on a real partition log: what survives a pass, offsets, producer batches, tombstones, swaps."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from broker_core.log import LogConfig, PartitionLog
from broker_core.log.cleaner import (
    CLEANER_CHECKPOINT_FILE,
    IoThrottle,
    OffsetMapTooSmallError,
    apply_cleaning,
    clean,
    open_cleaned,
    plan_cleaning,
    swap_group,
)
from broker_core.log.errors import RecordWithoutKeyError
from broker_core.log.offset_map import OffsetMap
from broker_core.log.swap import SWAP_SUFFIX
from broker_core.records import SimpleRecord, build_batch, iter_batches
from broker_core.records.header import DELETE_HORIZON_MASK, Compression

NOW = 1_700_000_000_000
COMPACT = {"cleanup_policy": "compact", "segment_bytes": 600, "index_interval_bytes": 100}


def open_log(path: Path, **settings: object) -> PartitionLog:
    return PartitionLog.open(path / "t-0", LogConfig(**{**COMPACT, **settings}), topic="t", partition=0)


def put(log: PartitionLog, pairs: list[tuple[bytes, bytes | None]], **batch: object) -> None:
    records = [SimpleRecord(key=k, value=v, timestamp=NOW) for k, v in pairs]
    log.append(build_batch(records, **batch), now_ms=NOW)


def all_batches(log: PartitionLog) -> list:
    """Every batch as a consumer fetching from the log start gets them, segment after segment."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_bytes(offset, 1 << 20)
        if not data:
            break
        for batch in iter_batches(data):
            out.append(batch)
            offset = batch.header.next_offset
    return out


def read_all(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for batch in all_batches(log) for r in batch.records]


def run_pass(log: PartitionLog, *, now_ms: int = NOW, producers: frozenset = frozenset(),
             capacity: int = 10_000) -> int:
    plan = plan_cleaning(log, high_watermark=log.log_end_offset, producer_last_offsets=producers,
                         now_ms=now_ms, force=True)
    assert plan is not None
    return apply_cleaning(plan, clean(plan.job, OffsetMap(capacity)))


def latest(pairs: list[tuple[int, bytes | None, bytes | None]]) -> dict:
    found = {}
    for _, key, value in pairs:
        found[key] = value
    return found


def fill_updates(log: PartitionLog, rounds: int, keys: int) -> None:
    for number in range(rounds):
        put(log, [(b"k%d" % key, b"v%d-%d" % (key, number)) for key in range(keys)])
    log.roll(now_ms=NOW)


def test_a_pass_keeps_only_the_latest_record_of_each_key_at_its_original_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill_updates(log, rounds=20, keys=5)
    before = read_all(log)
    end = log.log_end_offset
    assert len(log.segments) > 3
    assert run_pass(log) >= 1
    after = read_all(log)
    assert latest(after) == latest(before)
    assert [o for o, _, _ in after] == [o for o, k, v in before if o >= end - 5]
    assert log.log_end_offset == end
    # a fetch from an offset that was compacted away starts at the next record kept
    assert read_all(log)[0][0] == end - 5
    log.close()


def test_the_cleaned_log_reopens_with_the_same_records_and_no_swap_files(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill_updates(log, rounds=20, keys=5)
    run_pass(log)
    after = read_all(log)
    log.close()
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(SWAP_SUFFIX)]
    reopened = open_log(tmp_path)
    assert read_all(reopened) == after
    put(reopened, [(b"k1", b"new")])
    assert read_all(reopened)[-1][2] == b"new"
    reopened.close()


def test_the_active_segment_is_never_cleaned(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1 << 20)
    for number in range(10):
        put(log, [(b"k", b"v%d" % number)])
    assert plan_cleaning(log, high_watermark=log.log_end_offset, now_ms=NOW, force=True) is None
    assert len(read_all(log)) == 10
    log.close()


def test_records_at_or_above_the_high_watermark_are_not_cleaned(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill_updates(log, rounds=20, keys=5)
    plan = plan_cleaning(log, high_watermark=30, now_ms=NOW, force=True)
    assert plan is not None
    assert plan.first_uncleanable_offset <= 30
    log.close()


def test_tombstones_stay_for_delete_retention_ms_after_the_pass_that_first_saw_them(tmp_path: Path) -> None:
    log = open_log(tmp_path, delete_retention_ms=1000)
    fill_updates(log, rounds=10, keys=3)
    put(log, [(b"k1", None)])
    log.roll(now_ms=NOW)
    run_pass(log, now_ms=NOW)
    assert latest(read_all(log))[b"k1"] is None  # the tombstone is readable
    horizon_batches = [b for b in all_batches(log) if b.header.attributes & DELETE_HORIZON_MASK]
    assert [b.header.base_timestamp for b in horizon_batches] == [NOW + 1000]
    fill_updates(log, rounds=1, keys=1)  # something dirty, so a pass runs
    run_pass(log, now_ms=NOW + 999)
    assert b"k1" in latest(read_all(log))
    fill_updates(log, rounds=1, keys=1)
    run_pass(log, now_ms=NOW + 1001)
    assert b"k1" not in latest(read_all(log))
    assert set(latest(read_all(log))) == {b"k0", b"k2"}
    log.close()


def test_the_last_batch_of_each_producer_is_kept_even_with_no_record_left(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    put(log, [(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=0)
    put(log, [(b"a", b"2")])
    log.roll(now_ms=NOW)
    run_pass(log, producers=frozenset({(7, 0)}))
    headers = [b.header for b in all_batches(log)]
    kept = [h for h in headers if h.producer_id == 7]
    assert len(kept) == 1 and kept[0].records_count == 0 and kept[0].base_sequence == 0
    assert read_all(log) == [(1, b"a", b"2")]
    log.close()


def test_compressed_batches_are_rewritten_with_their_codec_and_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for number in range(5):
        put(log, [(b"a", b"x%d" % number), (b"b%d" % number, b"y")], compression=Compression.ZSTD)
    log.roll(now_ms=NOW)
    run_pass(log)
    batches = list(all_batches(log))
    assert all(b.header.compression is Compression.ZSTD for b in batches)
    assert [(r.offset, r.key) for b in batches for r in b.records] == [
        (1, b"b0"), (3, b"b1"), (5, b"b2"), (7, b"b3"), (8, b"a"), (9, b"b4")]
    log.close()


def test_a_second_pass_over_a_clean_log_finds_nothing_dirty(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill_updates(log, rounds=20, keys=5)
    run_pass(log)
    assert (tmp_path / "t-0" / CLEANER_CHECKPOINT_FILE).exists()
    assert plan_cleaning(log, high_watermark=log.log_end_offset, now_ms=NOW, force=True) is None
    log.close()


def test_a_plan_is_not_due_below_the_dirty_ratio(tmp_path: Path) -> None:
    log = open_log(tmp_path, min_cleanable_dirty_ratio=0.9)
    fill_updates(log, rounds=20, keys=5)
    run_pass(log)
    fill_updates(log, rounds=1, keys=5)
    assert plan_cleaning(log, high_watermark=log.log_end_offset, now_ms=NOW) is None
    log.close()


def test_an_offset_map_too_small_for_one_segment_refuses_the_pass(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    put(log, [(b"k%d" % n, b"v") for n in range(10)])
    log.roll(now_ms=NOW)
    with pytest.raises(OffsetMapTooSmallError):
        run_pass(log, capacity=3)
    assert [p.name for p in (tmp_path / "t-0").iterdir() if "cleaned" in p.name or "swap" in p.name] == []
    log.close()


def test_a_swap_is_refused_when_retention_took_the_segments_first(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy="compact,delete", retention_bytes=1, file_delete_delay_ms=0)
    fill_updates(log, rounds=20, keys=5)
    plan = plan_cleaning(log, high_watermark=log.log_end_offset, now_ms=NOW, force=True)
    result = clean(plan.job, OffsetMap(1000))
    deleted = log.enforce_retention(now_ms=NOW)
    assert deleted >= 1
    assert apply_cleaning(plan, result) == len(result.groups) - deleted
    assert [p.name for p in (tmp_path / "t-0").iterdir() if p.name.endswith(SWAP_SUFFIX)] == []
    assert not (tmp_path / "t-0" / CLEANER_CHECKPOINT_FILE).exists()
    assert latest(read_all(log)) == {b"k%d" % key: b"v%d-19" % key for key in range(5)}
    log.close()


def test_compact_only_topics_keep_old_segments_past_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=1)
    fill_updates(log, rounds=20, keys=5)
    segments = len(log.segments)
    assert log.enforce_retention(now_ms=NOW + 10_000) == 0
    assert len(log.segments) == segments
    log.close()


def test_a_record_without_a_key_is_refused_on_a_compacted_log_and_nothing_is_written(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(RecordWithoutKeyError):
        log.append(build_batch([SimpleRecord(key=b"a", value=b"1"), SimpleRecord(key=None, value=b"2")]))
    assert log.log_end_offset == 0
    log.close()


@pytest.mark.parametrize("stage", ["cleaned", "swap", "half-retired", "swapped"])
def test_a_kill_at_any_stage_of_a_swap_leaves_a_log_that_opens_with_every_latest_value(
    tmp_path: Path, stage: str
) -> None:
    log = open_log(tmp_path, file_delete_delay_ms=60_000)
    fill_updates(log, rounds=20, keys=5)
    expected = latest(read_all(log))
    end = log.log_end_offset
    plan = plan_cleaning(log, high_watermark=end, now_ms=NOW, force=True)
    result = clean(plan.job, OffsetMap(1000))
    directory = tmp_path / "t-0"
    group = result.groups[0]
    if stage == "cleaned":  # the files as they were before the rename to .swap
        for path in directory.glob(f"{group.base_offset:020d}.*{SWAP_SUFFIX}"):
            path.rename(path.with_name(path.name.replace(SWAP_SUFFIX, ".cleaned")))
    elif stage == "half-retired":
        plan.segments[group.numbers[0]].mark_deleted()
    elif stage == "swapped":
        apply_cleaning(plan, result)
    # simulate the kill: drop descriptors without closing the log properly
    for segment in log.segments:
        if segment.fd >= 0:
            os.close(segment.fd)
            segment.fd = -1
    reopened = open_log(tmp_path)
    pairs = read_all(reopened)
    assert latest(pairs) == expected
    assert reopened.log_end_offset == end
    offsets = [o for o, _, _ in pairs]
    assert offsets == sorted(set(offsets))
    assert not [p for p in directory.iterdir() if p.name.endswith((SWAP_SUFFIX, ".cleaned"))]
    reopened.close()


def test_the_throttle_holds_callers_to_its_rate() -> None:
    now = [0.0]
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    throttle = IoThrottle(1000, clock=lambda: now[0], sleep=sleep)
    for _ in range(10):
        throttle.acquire(500)
    assert now[0] == pytest.approx(5.0, abs=0.01)


def test_a_pass_under_a_throttle_sleeps_for_the_bytes_it_read_and_wrote(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill_updates(log, rounds=20, keys=5)
    plan = plan_cleaning(log, high_watermark=log.log_end_offset, now_ms=NOW, force=True)
    assert plan is not None
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    rate = 1000.0
    result = clean(plan.job, OffsetMap(10_000), throttle=IoThrottle(rate, clock=lambda: now[0], sleep=sleep))
    # The throttle's window restarts after a second of keeping up, so up to a second's bytes go unslept.
    moved = result.bytes_read + result.bytes_written
    assert moved > 3 * rate
    assert moved / rate - 1.0 <= now[0] <= moved / rate
    apply_cleaning(plan, result)
    log.close()


def swapped_in_without_renames(log: PartitionLog) -> list:
    """Plan and clean ``log`` and put every group in the segment list, leaving the file steps to the log
    (each swap finishes the one before it first, so the last one is left unfinished)."""
    plan = plan_cleaning(log, high_watermark=log.log_end_offset, now_ms=NOW, force=True)
    assert plan is not None
    result = clean(plan.job, OffsetMap(10_000))
    swaps = [swap_group(plan, group, segment)
             for group, segment in zip(result.groups, open_cleaned(plan, result), strict=True)]
    assert all(swap is not None for swap in swaps)
    assert [swap.done for swap in swaps] == [True] * (len(swaps) - 1) + [False]
    return swaps


def test_a_swap_shows_the_cleaned_segments_before_its_renames_and_the_renames_finish_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill_updates(log, rounds=20, keys=5)
    before = latest(read_all(log))
    swaps = swapped_in_without_renames(log)
    directory = tmp_path / "t-0"
    assert [p.name for p in directory.glob("*.log" + SWAP_SUFFIX)] == [swaps[-1].segment.log_path.name]
    assert latest(read_all(log)) == before
    assert len(read_all(log)) == 5
    threads = [threading.Thread(target=swap.finish) for swap in swaps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(swap.done for swap in swaps)
    assert not list(directory.glob("*" + SWAP_SUFFIX))
    log.close()
    reopened = open_log(tmp_path)
    assert latest(read_all(reopened)) == before
    assert len(read_all(reopened)) == 5
    reopened.close()


@pytest.mark.parametrize("change", ["close", "truncate", "retention"])
def test_a_change_to_the_log_finishes_a_swap_left_unfinished_first(tmp_path: Path, change: str) -> None:
    log = open_log(tmp_path, file_delete_delay_ms=0)
    fill_updates(log, rounds=20, keys=5)
    before = latest(read_all(log))
    end = log.log_end_offset
    swaps = swapped_in_without_renames(log)
    if change == "truncate":
        log.truncate_to(end - 1)
        assert log.log_end_offset < end
    elif change == "retention":
        log.delete_records_before(swaps[-1].segment.next_offset)
        assert log.log_start_offset == swaps[-1].segment.next_offset
    records, end_after = read_all(log), log.log_end_offset
    log.close()
    assert all(swap.done for swap in swaps)
    directory = tmp_path / "t-0"
    assert not list(directory.glob("*" + SWAP_SUFFIX))
    assert not list(directory.glob("*.deleted"))
    reopened = open_log(tmp_path)
    assert read_all(reopened) == records
    assert reopened.log_end_offset == end_after
    if change == "close":
        assert latest(records) == before
    reopened.close()


def test_a_time_lookup_passes_over_a_batch_the_cleaner_emptied(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1 << 20)
    log.append(build_batch([SimpleRecord(key=b"a", value=b"1", timestamp=NOW + 10)],
                           producer_id=7, producer_epoch=0, base_sequence=0), now_ms=NOW)
    log.append(build_batch([SimpleRecord(key=b"b", value=b"1", timestamp=NOW + 5)]), now_ms=NOW)
    log.append(build_batch([SimpleRecord(key=b"a", value=b"2", timestamp=NOW + 20)]), now_ms=NOW)
    log.roll(now_ms=NOW)
    run_pass(log, producers=frozenset({(7, 0)}))
    assert [b.header.records_count for b in all_batches(log)] == [0, 1, 1]
    assert log.offset_for_timestamp(NOW + 8) == (2, NOW + 20)
    log.close()


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP, Compression.LZ4])
def test_the_record_scan_reads_what_a_full_decode_reads(compression: Compression) -> None:
    from broker_core.log.cleaner import records_section, scan_records
    from broker_core.log.offset_map import key_digest
    from broker_core.records.batch import decode_batch
    from broker_core.records.header import parse_header

    records = [
        SimpleRecord(key=None if n % 7 == 0 else b"k" * (n * 37 % 300), value=None if n % 5 == 0 else b"v" * (n * 71),
                     headers=[("h", b"x" * n)], timestamp=NOW + n * 1000, offset_delta=n * 3)
        for n in range(60)
    ]
    data = memoryview(build_batch(records, compression=compression, base_offset=1000))
    header = parse_header(data)
    scanned = scan_records(records_section(data, header, 1 << 30), header.records_count, header.base_offset)
    decoded = decode_batch(data).records
    assert [(s[0], s[1], s[2], s[5]) for s in scanned] == [
        (r.offset, None if r.key is None else key_digest(r.key), r.value is None, r.timestamp - NOW)
        for r in decoded]


def test_truncation_below_the_cleaner_checkpoint_makes_what_follows_dirty_again(tmp_path: Path) -> None:
    from broker_core.log.checkpoint import read_offset_checkpoint

    log = open_log(tmp_path)
    fill_updates(log, rounds=20, keys=5)
    run_pass(log)
    checkpoint = tmp_path / "t-0" / CLEANER_CHECKPOINT_FILE
    assert read_offset_checkpoint(checkpoint) == 100
    log.truncate_to(60)
    assert read_offset_checkpoint(checkpoint) == log.log_end_offset <= 60
    fill_updates(log, rounds=20, keys=5)
    run_pass(log)
    pairs = read_all(log)
    below = [key for offset, key, _ in pairs if offset < read_offset_checkpoint(checkpoint)]
    assert len(below) == len(set(below))
    log.close()


def test_small_cleaned_segments_are_grouped_into_one_on_the_next_pass(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill_updates(log, rounds=20, keys=5)
    run_pass(log)
    cleaned = len(log.segments)
    assert cleaned > 4
    fill_updates(log, rounds=1, keys=5)
    run_pass(log)
    assert len(log.segments) < cleaned
    assert sum(segment.size for segment in log.segments[:-2]) <= 600
    assert latest(read_all(log)) == {b"k%d" % key: b"v%d-0" % key for key in range(5)}
    log.close()
