"""The broker's data directory: which entries are partition logs, and how a log leaves it.

A partition's log lives in ``<data>/<topic>-<partition>/``. A log the broker no longer hosts (its
topic was deleted, or its replica reassigned to other brokers) leaves as Kafka's LogManager lets it
go: the directory is renamed at once to ``<topic>-<partition>.<32 hex digits>-delete`` and removed,
files and all, ``file.delete.delay.ms`` later. The rename is what takes the log out of service: no
``-delete`` name is ever opened as a partition log, so its records are never served again and a
topic re-created under the same name starts from an empty directory (readers that still hold a
descriptor of one of its files keep reading until the removal). A ``-delete`` directory found at
startup (the broker stopped before removing it) is removed the same delay after the start. Entries
that are neither a partition directory nor a ``-delete`` one are left alone.

`stray_partition_directories` is the startup check, as Kafka's: the partition directories of a data
directory that the broker's first complete metadata image does not assign to it.

`LogDeletions` holds the pending removals. It is not thread-safe: the broker's event loop owns it,
and hands the removal of each due directory (`remove_directory`, an rmtree) to a worker thread.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
import uuid
from collections.abc import Callable, Collection
from pathlib import Path

from .checkpoint import fsync_directory

log = logging.getLogger(__name__)

DELETE_SUFFIX = "-delete"
_PARTITION_DIRECTORY = re.compile(r"(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>[0-9]+)")
_DELETE_DIRECTORY = re.compile(r"[a-zA-Z0-9._-]+-[0-9]+\.[0-9a-f]{32}" + re.escape(DELETE_SUFFIX))


def partition_of_directory(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a partition directory's name, None for any other name."""
    match = _PARTITION_DIRECTORY.fullmatch(name)
    if match is None:
        return None
    return match["topic"], int(match["partition"])


def is_deleted_directory(name: str) -> bool:
    """Whether ``name`` is a partition directory renamed for deletion."""
    return _DELETE_DIRECTORY.fullmatch(name) is not None


def stray_partition_directories(
    data_dir: Path, hosted: Collection[tuple[str, int]], assigned_here: Callable[[tuple[str, int]], bool]
) -> list[Path]:
    """The partition directories of ``data_dir`` the broker must not keep, by name.

    ``hosted`` are the partitions the broker opened from its current metadata image;
    ``assigned_here`` says whether that image assigns a partition to this broker (one it did not open,
    because the image lacks its topic's description, is kept: it is not known to be stray).
    """
    if not data_dir.is_dir():
        return []
    stray = []
    for entry in sorted(data_dir.iterdir()):
        key = partition_of_directory(entry.name)
        if key is None or not entry.is_dir() or key in hosted or assigned_here(key):
            continue
        stray.append(entry)
    return stray


def remove_directory(path: Path) -> None:
    """Remove a directory renamed for deletion, with everything in it (blocking: run it off the event loop)."""
    shutil.rmtree(path, ignore_errors=True)


class LogDeletions:
    """Partition directories renamed for deletion, each removed ``delay_ms`` after its rename.

    Times are taken from ``clock`` (monotonic seconds; tests pass a fake one). See the module
    docstring for the naming and the thread-safety contract.
    """

    def __init__(self, delay_ms: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.delay_s = max(delay_ms, 0) / 1000
        self.clock = clock
        self._pending: list[tuple[float, Path]] = []

    @property
    def pending(self) -> list[Path]:
        """The renamed directories not yet handed out by `due`, oldest first."""
        return [path for _, path in self._pending]

    def schedule(self, directory: Path) -> Path | None:
        """Rename ``directory`` to its ``-delete`` name now and schedule its removal; return the new path
        (None when the directory is already gone: nothing is left to delete)."""
        renamed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        try:
            directory.rename(renamed)
        except FileNotFoundError:
            log.warning("%s is already gone", directory)
            return None
        fsync_directory(directory.parent)
        self._pending.append((self.clock() + self.delay_s, renamed))
        log.info("renamed %s to %s; it is removed in %gs", directory, renamed.name, self.delay_s)
        return renamed

    def adopt_leftovers(self, data_dir: Path) -> list[Path]:
        """Schedule the removal of the ``-delete`` directories a previous run left in ``data_dir``."""
        if not data_dir.is_dir():
            return []
        due = self.clock() + self.delay_s
        leftovers = [entry for entry in sorted(data_dir.iterdir())
                     if entry.is_dir() and is_deleted_directory(entry.name) and entry not in self.pending]
        self._pending.extend((due, entry) for entry in leftovers)
        return leftovers

    def due(self) -> list[Path]:
        """The directories whose delay has passed, taken off the pending list: the caller removes them."""
        now = self.clock()
        ready = [path for when, path in self._pending if when <= now]
        self._pending = [(when, path) for when, path in self._pending if when > now]
        return ready
