"""The cleaner's crash-safe file swap, and how opening a log finishes or discards an interrupted one.

The cleaner (`broker_core.log.cleaner`) replaces a group of old segments by one cleaned segment named
after the group's first base offset, in Kafka's steps:

1. it writes `<base>.log.cleaned` (with `.index.cleaned` and `.timeindex.cleaned`) and fsyncs them;
2. renames them to `.swap` (indexes first, the .log last) and fsyncs the directory;
3. on the log's writer, takes the old segments out of the log (renamed to `*.deleted`, see
   `RetiredSegments`) and puts the new one in, then renames its files from `.swap` to their plain
   names (indexes first, the .log last).

A cleaned segment always ends where its group ended (the cleaner keeps the header of the group's last
batch, as an empty batch if need be), so the offsets a `.swap` segment covers, [base, next offset of
its last batch), name exactly the old segments it replaces. After a kill at any point, `finish_swaps`
(run when the log is opened, before anything else reads the directory) restores one consistent state:
`.cleaned` files are deleted (step 1 was not finished: the old segments are whole); a `<base>.log.swap`
means step 2 was finished, so the old segments inside its range are deleted and the swap files are
renamed in, completing step 3. Index files of a swap whose .log was not yet renamed are deleted and
rebuilt by recovery. It runs once, on the thread opening the log.
"""

from __future__ import annotations

import os
from pathlib import Path

from broker_core.records.header import BATCH_HEADER, CURRENT_MAGIC, HEADER_SIZE, LOG_OVERHEAD, BatchHeader

from .checkpoint import fsync_directory
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_file_name

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def finish_swaps(directory: Path) -> bool:
    """Delete unfinished `.cleaned` files and complete every `.swap`; return whether anything changed."""
    changed = False
    swapped_logs = []
    for path in list(directory.iterdir()):
        name = path.name
        if name.endswith(CLEANED_SUFFIX):
            path.unlink()
            changed = True
        elif name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            swapped_logs.append(path)
    for log_swap in sorted(swapped_logs):
        _complete_swap(directory, log_swap)
        changed = True
    for path in list(directory.iterdir()):
        if path.name.endswith(SWAP_SUFFIX):  # an index whose .log never reached .swap
            path.unlink()
            changed = True
    if changed:
        fsync_directory(directory)
    return changed


def _complete_swap(directory: Path, log_swap: Path) -> None:
    base_offset = int(log_swap.name[:20])
    end_offset = _next_offset(log_swap, base_offset)
    for path in list(directory.iterdir()):
        stem, dot, suffix = path.name.partition(".")
        if (
            len(stem) == 20
            and stem.isdigit()
            and "." + suffix in _SEGMENT_SUFFIXES
            and base_offset <= int(stem) < max(end_offset, base_offset + 1)
        ):
            path.unlink()
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
        swapped = directory / (segment_file_name(base_offset, suffix) + SWAP_SUFFIX)
        if swapped.exists():
            swapped.rename(directory / segment_file_name(base_offset, suffix))


def _next_offset(log_file: Path, base_offset: int) -> int:
    """One past the last offset of the last whole batch of ``log_file`` (its base offset when empty).

    The file was fsynced whole before it was renamed to `.swap`, so its batches are all complete; the
    walk still stops at anything that is not a sane header.
    """
    next_offset = base_offset
    fd = os.open(log_file, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position = 0
        while position + HEADER_SIZE <= size:
            header = BatchHeader(*BATCH_HEADER.unpack(os.pread(fd, HEADER_SIZE, position)))
            if (
                header.magic != CURRENT_MAGIC
                or header.batch_length < HEADER_SIZE - LOG_OVERHEAD
                or position + header.size > size
            ):
                break
            next_offset = header.next_offset
            position += header.size
    finally:
        os.close(fd)
    return next_offset
