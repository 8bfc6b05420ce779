"""What this machine charges for putting new bytes into the page cache, against rewriting cached bytes.

A broker's append is a pwrite into the page cache; at replication factor 3 every record lands in
three brokers' page caches. This measures the physical cost of that on the machine it runs on:
bursts of 1 MiB pwrites of new bytes to a new file (in the default temporary directory, where the
local stack puts its brokers' data; the JSON names its file system), timed per 128 MiB chunk as CPU time of this process, then the file is deleted
and the next burst follows after a pause. The peer is the floor: rewriting bytes already in the
page cache, which allocates nothing.

On a virtual machine whose memory the host backs only when the guest first touches it (and takes
back once the guest frees it), new page-cache pages past what the guest used recently cost far
more than the floor: the "warm" figure is how many MiB a burst wrote before a chunk first cost more
than four times the burst's first chunk.

    .venv/bin/python bench/page_cache.py [--bursts 3] [--mib 3072] [--pause 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import result_header, write_result  # noqa: E402

MIB = 1024 * 1024
CHUNK_MIB = 128
SLOW_FACTOR = 4


def write_chunks(fd: int, data: bytes, chunks: int, start: int = 0) -> list[float]:
    """CPU microseconds per MiB of each CHUNK_MIB chunk written from ``start``."""
    costs = []
    position = start
    for _ in range(chunks):
        before = time.process_time()
        for _ in range(CHUNK_MIB):
            os.pwrite(fd, data, position)
            position += MIB
        costs.append((time.process_time() - before) / CHUNK_MIB * 1e6)
    return costs


def new_bytes_burst(directory: Path, data: bytes, mib: int) -> list[float]:
    path = directory / "burst"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        return write_chunks(fd, data, mib // CHUNK_MIB)
    finally:
        os.close(fd)
        path.unlink()


def rewrite_cost(directory: Path, data: bytes, rounds: int = 5) -> list[float]:
    """Rewriting one chunk already in the page cache, ``rounds`` times: nothing new to allocate."""
    path = directory / "rewrite"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_chunks(fd, data, 1)
        return [write_chunks(fd, data, 1)[0] for _ in range(rounds)]
    finally:
        os.close(fd)
        path.unlink()


def filesystem_of(path: str) -> str:
    """The type of the file system holding ``path`` (the longest matching mount point), or "unknown"."""
    best, kind = "", "unknown"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        fields = line.split()
        if len(fields) >= 3 and (path == fields[1] or path.startswith(fields[1].rstrip("/") + "/")) \
                and len(fields[1]) > len(best):
            best, kind = fields[1], fields[2]
    return kind


def warm_mib(costs: list[float]) -> int:
    """MiB written before the first chunk costing more than SLOW_FACTOR times the first one."""
    for index, cost in enumerate(costs):
        if cost > SLOW_FACTOR * costs[0]:
            return index * CHUNK_MIB
    return len(costs) * CHUNK_MIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--mib", type=int, default=3072, help="new bytes per burst")
    parser.add_argument("--pause", type=float, default=5.0, help="seconds between bursts")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "results" / "page_cache.json")
    args = parser.parse_args()
    data = os.urandom(MIB)
    bursts = []
    with tempfile.TemporaryDirectory(prefix="floe-page-cache-") as name:
        directory = Path(name)
        floor = rewrite_cost(directory, data)
        for number in range(args.bursts):
            if number:
                time.sleep(args.pause)
            costs = new_bytes_burst(directory, data, args.mib)
            bursts.append(costs)
            print(f"burst {number + 1}: CPU us per MiB by {CHUNK_MIB} MiB chunk: {[round(c) for c in costs]}; "
                  f"warm {warm_mib(costs)} MiB", flush=True)
    first = statistics.median(b[0] for b in bursts)
    last = statistics.median(b[-1] for b in bursts)
    floor_median = statistics.median(floor)
    result = {
        **result_header("page_cache"),
        "filesystem": filesystem_of(os.path.realpath(tempfile.gettempdir())),
        "chunk_mib": CHUNK_MIB,
        "pause_s": args.pause,
        "rewrite_cpu_us_per_mib": [round(c, 1) for c in floor],
        "bursts_cpu_us_per_mib": [[round(c, 1) for c in b] for b in bursts],
        "warm_mib": [warm_mib(b) for b in bursts],
        "median_rewrite_cpu_us_per_mib": round(floor_median, 1),
        "median_first_chunk_cpu_us_per_mib": round(first, 1),
        "median_last_chunk_cpu_us_per_mib": round(last, 1),
        "first_chunk_over_rewrite": round(first / floor_median, 2),
        "last_chunk_over_rewrite": round(last / floor_median, 2),
    }
    print(f"rewrite {floor_median:.0f} us/MiB; new bytes: first chunk {first:.0f} us/MiB "
          f"({result['first_chunk_over_rewrite']}x), last chunk {last:.0f} us/MiB ({result['last_chunk_over_rewrite']}x); "
          f"warm MiB per burst {result['warm_mib']}")
    write_result(args.output, result)


if __name__ == "__main__":
    main()
