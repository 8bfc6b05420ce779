"""Bringing a partition's segments back after a clean shutdown or a crash, when its log is opened.

`PartitionLog.open` has `swap.finish_swaps` settle an interrupted cleaner swap, then calls `remove_leftovers`, to delete what a crash can leave behind
(retired `*.deleted` files, temp checkpoints, indexes without a .log), reads the checkpoints, and
then has `recover_segments` open every segment and re-validate batch by batch each one that
reaches past the recovery point or whose cheap check fails (indexes rebuilt, the file cut at the
first bad or partial batch, later segments deleted); an empty log gets its first segment. The
leader-epoch cache is checked against the batches, or rebuilt from them when its file was lost.
Both run once, on the thread opening the log, before any reader can see it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .checkpoint import TEMP_SUFFIX
from .config import LogConfig
from .errors import CorruptIndexError
from .leader_epoch import LeaderEpochCheckpoint
from .segment import DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, Segment
from .transaction_index import TXN_INDEX_SUFFIX


def recover_segments(
    directory: Path,
    config: LogConfig,
    leader_epochs: LeaderEpochCheckpoint,
    *,
    recovery_point: int,
    log_start_offset: int,
    clock_ms: Callable[[], int],
) -> tuple[list[Segment], bool]:
    """Open and repair the segments of ``directory``; return them in offset order and whether any was repaired or created.

    An empty directory gets one segment at ``log_start_offset``, created at the time ``clock_ms`` gives.
    """
    segments: list[Segment] = []
    index_problems: list[CorruptIndexError | None] = []
    for base_offset in _segment_base_offsets(directory):
        segment, problem = Segment.open(
            directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            segment_index_bytes=config.segment_index_bytes,
        )
        segment.offsets_may_skip = config.compact
        segments.append(segment)
        index_problems.append(problem)

    accept_epoch = _epoch_validator(leader_epochs)
    recovered_any = False
    number = 0
    while number < len(segments):
        segment = segments[number]
        wholly_below_recovery_point = (
            number + 1 < len(segments) and segments[number + 1].base_offset <= recovery_point
        )
        if (
            index_problems[number] is None
            and segment.check_tail()
            and segment.next_offset <= recovery_point
        ):
            number += 1
            continue
        recovered_any = True
        truncated = segment.recover(config.max_message_bytes, accept_epoch)
        if truncated and not wholly_below_recovery_point:
            for later in segments[number + 1 :]:
                later.close_and_delete()
            del segments[number + 1 :]
        number += 1

    if not segments:
        segment = Segment.create(
            directory,
            log_start_offset,
            index_interval_bytes=config.index_interval_bytes,
            segment_index_bytes=config.segment_index_bytes,
            now_ms=clock_ms(),
        )
        segment.offsets_may_skip = config.compact
        segments.append(segment)
        recovered_any = True
    return segments, recovered_any


def _segment_base_offsets(directory: Path) -> list[int]:
    bases = []
    for path in directory.iterdir():
        stem, suffix = path.stem, path.suffix
        if suffix == LOG_SUFFIX and len(stem) == 20 and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


def remove_leftovers(directory: Path) -> None:
    """Delete what a crash can leave behind: retired segment files, temp checkpoints, indexes without a log.

    A .txnindex without its log inside the log's range is kept: it belongs to a segment a cleaner's
    swap absorbed, and `PartitionLog` moves its entries to the segment that holds its base offset."""
    bases = set(_segment_base_offsets(directory))
    first = min(bases, default=None)
    for path in directory.iterdir():
        name = path.name
        if name.endswith(DELETED_SUFFIX) or name.endswith(TEMP_SUFFIX):
            path.unlink()
        elif path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX) and (
            not path.stem.isdigit() or int(path.stem) not in bases
        ):
            if path.suffix == TXN_INDEX_SUFFIX and path.stem.isdigit() and first is not None and int(path.stem) > first:
                continue
            path.unlink()


def _epoch_validator(leader_epochs: LeaderEpochCheckpoint) -> Callable[[int, int], bool]:
    """The leader-epoch rule recovery applies to each batch (partitionLeaderEpoch is not under the CRC).

    With a non-empty cache, a batch at or above the first entry must carry exactly the epoch the
    cache gives its offset: the log writes the cache before the batches, so any other value is
    damage. With an empty cache (file lost), the cache is rebuilt from the batches as Kafka does.
    """
    rebuilding = not leader_epochs.entries

    def accept(base_offset: int, epoch: int) -> bool:
        if rebuilding:
            latest = leader_epochs.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                leader_epochs.assign(epoch, base_offset)
            return True
        expected = leader_epochs.epoch_for_offset(base_offset)
        return expected is None or epoch == expected

    return accept
