"""A process killed with SIGKILL mid-append loses no acknowledged batch: the page cache keeps them."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from broker_core.log import LogConfig, PartitionLog
from broker_core.records.header import iter_headers
from tests.support.batches import make_batch, records_of

REPO_ROOT = Path(__file__).resolve().parents[3]
CONFIG = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024, segment_ms=10**12)

# The child appends forever and prints "number base last" once each append returned (acknowledged);
# every 40th append it also flushes, so the recovery point moves while it runs.
WRITER = """
import sys
from pathlib import Path
from broker_core.log import LogConfig, PartitionLog
from tests.support.batches import make_batch

directory, start_ms = Path(sys.argv[1]), int(sys.argv[2])
log = PartitionLog.open(directory, LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024, segment_ms=10**12))
number = 0
while True:
    batch = make_batch(1 + number % 4, 200, start_ms + number, value_seed=number)
    info = log.append(batch, leader_epoch=number // 500)
    sys.stdout.write(f"{number} {info.base_offset} {info.last_offset}\\n")
    sys.stdout.flush()
    if number % 40 == 39:
        log.flush()
    number += 1
"""


def run_writer_and_kill(directory: Path, start_ms: int, run_seconds: float) -> list[tuple[int, int, int]]:
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(directory), str(start_ms)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert child.stdout is not None
    first_line = child.stdout.readline()
    assert first_line, "the writer died before its first append"
    time.sleep(run_seconds)
    os.kill(child.pid, signal.SIGKILL)
    rest = child.stdout.read()
    child.wait()
    acknowledged = []
    for line in (first_line + rest).decode().splitlines():
        parts = line.split()
        if len(parts) == 3:
            acknowledged.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return acknowledged


def test_every_acknowledged_batch_survives_a_sigkill_intact(tmp_path: Path) -> None:
    rng = random.Random()
    for attempt in range(3):
        directory = tmp_path / f"t-{attempt}"
        start_ms = time.time_ns() // 1_000_000
        acknowledged = run_writer_and_kill(directory, start_ms, run_seconds=rng.uniform(0.2, 1.2))
        assert len(acknowledged) > 1

        log = PartitionLog.open(directory, CONFIG)
        served = {}
        offset = 0
        while offset < log.log_end_offset:
            data = log.read_bytes(offset, 1 << 20)
            for position, header in iter_headers(data, check_crc=True):
                served[header.base_offset] = (header.last_offset, data[position : position + header.size])
                offset = header.next_offset
        assert log.log_end_offset >= acknowledged[-1][2] + 1
        for number, base_offset, last_offset in acknowledged:
            assert served[base_offset][0] == last_offset
            expected = make_batch(1 + number % 4, 200, start_ms + number, value_seed=number)
            got = records_of(served[base_offset][1])
            assert [(t, v) for _, t, _, v in got] == [(t, v) for _, t, _, v in records_of(expected)]
            assert [o for o, *_ in got] == list(range(base_offset, last_offset + 1))
        info = log.append(make_batch(1, 10), leader_epoch=log.leader_epochs.latest_epoch or 0)
        assert info.base_offset == log.log_end_offset - 1
        log.close()
