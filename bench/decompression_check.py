"""What the produce path's decompression check costs: leader appends of compressed batches with it, against without.

A leader append (PartitionLog.append) now decompresses every compressed batch once as a stream,
counting its bytes (floe.message.max.decompressed.bytes). The peer is the same append with that
check skipped (the follower's validation: header, max.message.bytes, CRC-32C), in the same run, on
the same pre-built batches, alternating which side goes first. Batches hold JSON-like records of
about 100 bytes, compressed by Floe's codecs as a producer would; two sizes: 16 KiB of records (the
producer's default batch.size) and 1 MiB (a producer with linger and a large batch.size).
Uncompressed batches are not touched by the check and are not measured. Throughput is MiB/s of
records (uncompressed); the ratio is with / without. Medians of ``--runs`` runs; writes
bench/results/decompression_check.json.

    .venv/bin/python bench/decompression_check.py [--runs 5] [--mib 64]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import cpu_pressure, result_header, write_result  # noqa: E402
from broker_core.log import LogConfig, PartitionLog  # noqa: E402
from broker_core.records import Compression, SimpleRecord, build_batch  # noqa: E402

MIB = 1024 * 1024
BATCH_SIZES = {"16KiB": 16 * 1024, "1MiB": MIB}
CODECS = (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)
DISTINCT_BATCHES = 16


def records_of(size: int, seed: int) -> list[SimpleRecord]:
    rng = random.Random(seed)
    records, total = [], 0
    now_ms = time.time_ns() // 1_000_000
    while total < size:
        value = json.dumps({"id": rng.randrange(10**9), "user": f"user-{rng.randrange(5000)}",
                            "event": rng.choice(("view", "click", "buy", "search")),
                            "page": f"/p/{rng.randrange(800)}", "ms": now_ms}).encode()
        records.append(SimpleRecord(value=value, timestamp=now_ms))
        total += len(value) + 10
    return records


def append_all(directory: Path, batches: list[bytes], count: int, *, check: bool) -> float:
    log = PartitionLog.open(directory, LogConfig(), topic="bench")
    try:
        started = time.perf_counter()
        for number in range(count):
            batch = batches[number % len(batches)]
            log.append(batch if check else log.validate(batch, as_leader=False))
        return time.perf_counter() - started
    finally:
        log.close()
        shutil.rmtree(directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, default=64, help="MiB of (uncompressed) records appended per run and side")
    args = parser.parse_args()
    result = result_header("decompression_check")
    result["runs"] = args.runs
    result["mib_per_run"] = args.mib
    pressure_before = cpu_pressure()
    cases = {}
    with tempfile.TemporaryDirectory(dir=REPO_ROOT / "bench") as scratch:
        for size_name, size in BATCH_SIZES.items():
            for codec in CODECS:
                batches = [build_batch(records_of(size, seed), compression=codec) for seed in range(DISTINCT_BATCHES)]
                count = max(1, args.mib * MIB // size)
                with_check, without_check = [], []
                for run in range(args.runs):
                    sides = [(True, with_check), (False, without_check)]
                    for check, times in sides if run % 2 == 0 else reversed(sides):
                        elapsed = append_all(Path(scratch) / f"run-{run}-{check}", batches, count, check=check)
                        times.append(count * size / MIB / elapsed)
                name = f"{codec.name.lower()}_{size_name}"
                cases[name] = {
                    "compressed_batch_bytes": statistics.median(len(b) for b in batches),
                    "with_check_mib_s": statistics.median(with_check),
                    "without_check_mib_s": statistics.median(without_check),
                    "ratio_with_over_without": statistics.median(with_check) / statistics.median(without_check),
                    "runs_with": with_check,
                    "runs_without": without_check,
                }
                print(f"{name:14s} with {cases[name]['with_check_mib_s']:8.1f} MiB/s  without "
                      f"{cases[name]['without_check_mib_s']:8.1f} MiB/s  ratio {cases[name]['ratio_with_over_without']:.2f}",
                      flush=True)
    result["cases"] = cases
    result["cpu_pressure_some_avg10_percent"] = {"before": pressure_before, "after": cpu_pressure()}
    write_result(REPO_ROOT / "bench" / "results" / "decompression_check.json", result)


if __name__ == "__main__":
    main()
