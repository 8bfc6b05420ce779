"""Small text checkpoint files of a partition directory, written atomically.

Kafka's checkpoint format: a version line, an entry-count line, then one entry per line with
space-separated fields. The partition log keeps two single-offset checkpoints in its directory,
``recovery-point`` (everything below it was fsynced, so recovery after a crash starts there) and
``log-start-offset``; the leader-epoch checkpoint uses the same file format and writer.

Every write goes temp file -> fsync -> rename -> fsync of the directory, so a crash leaves either the
old or the new file, never a torn one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .errors import CorruptCheckpointError

RECOVERY_POINT_FILE = "recovery-point"
LOG_START_OFFSET_FILE = "log-start-offset"
# The compacted log's first dirty offset (broker_core/log/cleaner.py); truncation pulls it back.
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
TEMP_SUFFIX = ".tmp"
CHECKPOINT_VERSION = 0


def fsync_directory(directory: Path) -> None:
    """Make a rename or file creation inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` durably: write a temp file, fsync it, rename it over, fsync the directory.

    With ``durable`` False the fsyncs are left out: a process crash still leaves the old or the new
    file (the rename is atomic), but a power loss may leave neither, or a torn one; only for files
    whose loss costs nothing but a lower starting point (the high-watermark checkpoint)."""
    temp = path.with_name(path.name + TEMP_SUFFIX)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    if durable:
        fsync_directory(path.parent)


def write_checkpoint(
    path: Path, entries: Sequence[Sequence[int | str]], version: int = CHECKPOINT_VERSION, *, durable: bool = True
) -> None:
    """Write ``entries`` (one line each, fields space-separated) in Kafka's checkpoint format
    (``durable``: see `atomic_write`)."""
    lines = [str(version), str(len(entries))]
    lines.extend(" ".join(str(field) for field in entry) for entry in entries)
    atomic_write(path, ("\n".join(lines) + "\n").encode("ascii"), durable=durable)


def read_checkpoint(
    path: Path, fields_per_entry: int, version: int = CHECKPOINT_VERSION
) -> list[list[int]] | None:
    """Read a checkpoint of integer fields; None if the file does not exist.

    Raises CorruptCheckpointError (with the line number) on a wrong version, a count that does not
    match the entries, or a line that does not hold ``fields_per_entry`` integers.
    """
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise CorruptCheckpointError(path, "not ASCII text") from None
    lines = text.splitlines()
    if len(lines) < 2:
        raise CorruptCheckpointError(path, "missing version or count line")
    if lines[0].strip() != str(version):
        raise CorruptCheckpointError(path, f"unsupported version {lines[0]!r}, expected {version}", line=1)
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(path, f"bad entry count {lines[1]!r}", line=2) from None
    body = lines[2:]
    if count < 0 or count != len(body):
        raise CorruptCheckpointError(path, f"count says {count} entries, file holds {len(body)}", line=2)
    entries = []
    for number, line in enumerate(body, start=3):
        parts = line.split()
        if len(parts) != fields_per_entry:
            raise CorruptCheckpointError(
                path, f"expected {fields_per_entry} fields, got {line!r}", line=number
            )
        try:
            entries.append([int(part) for part in parts])
        except ValueError:
            raise CorruptCheckpointError(path, f"non-integer field in {line!r}", line=number) from None
    return entries


def write_offset_checkpoint(path: Path, offset: int, *, durable: bool = True) -> None:
    """Write a single-offset checkpoint (recovery point, log start offset; ``durable``: see `atomic_write`)."""
    write_checkpoint(path, [[offset]], durable=durable)


def read_offset_checkpoint(path: Path) -> int | None:
    """Read a single-offset checkpoint; None if missing. Raises CorruptCheckpointError if malformed."""
    entries = read_checkpoint(path, fields_per_entry=1)
    if entries is None:
        return None
    if len(entries) != 1 or entries[0][0] < 0:
        raise CorruptCheckpointError(path, f"expected one non-negative offset, got {entries}")
    return entries[0][0]
