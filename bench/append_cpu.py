"""CPU time of the leader append alone, for comparing two versions of the log's code on a busy machine.

Wall-clock benchmarks on a shared two-CPU machine move with whatever else runs; the CPU time a process
spends in `PartitionLog.append` (user and system, `time.process_time`) moves much less. This appends
``--requests`` produce requests of 8 batches of 140 100-byte records (123 KB each, uncompressed) to a
fresh log in a temporary directory, ``--repeats`` times, and prints the median. To compare two
versions, run it from a checkout of each, alternating.

    .venv/bin/python bench/append_cpu.py [--requests 3000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from broker_core.log.config import LogConfig  # noqa: E402
from broker_core.log.partition_log import PartitionLog  # noqa: E402
from broker_core.records.batch import SimpleRecord, build_batch  # noqa: E402

BATCHES_PER_REQUEST = 8
RECORDS_PER_BATCH = 140


def append_cpu_s(request: bytes, requests: int) -> float:
    directory = Path(tempfile.mkdtemp(prefix="floe-append-cpu-"))
    try:
        log = PartitionLog.open(directory / "bench-0", LogConfig(), topic="bench", partition=0)
        started = time.process_time()
        for _ in range(requests):
            log.append(request, leader_epoch=0)
        spent = time.process_time() - started
        log.close()
        return spent
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    batch = bytes(build_batch([SimpleRecord(value=b"x" * 100) for _ in range(RECORDS_PER_BATCH)]))
    request = batch * BATCHES_PER_REQUEST
    spent = [append_cpu_s(request, args.requests) for _ in range(args.repeats)]
    print(f"CPU s for {args.requests} appends of {len(request):,} bytes: median {statistics.median(spent):.3f} "
          f"(runs {', '.join(f'{s:.3f}' for s in spent)})")


if __name__ == "__main__":
    main()
