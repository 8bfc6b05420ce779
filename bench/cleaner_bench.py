"""Log cleaner throughput against raw sequential I/O, and produce latency while the cleaner runs.

- **Throughput**: a compacted partition log of ``--mib`` MiB (16 KiB batches of keyed records with
  100-byte values over 50,000 keys, so about one record in ten survives; 8 MiB segments, all sealed)
  is cleaned in one pass on this thread (`plan_cleaning`, `clean`, `apply_cleaning`; no throttle).
  The figure is MiB of log cleaned per second (what one cleaner process does; the broker runs the
  same `clean` in a spawned process). Its peer reads the same segment files sequentially in
  1 MiB pieces and writes them to a new file in the same directory, fsyncing it at the end as the
  cleaner fsyncs its segments: raw sequential read+write of the same bytes. Both start from a fresh
  copy of the log, in the page cache. Ratio = cleaner MiB/s / raw MiB/s (goal >= 0.3). The cleaner's
  native kernels are loaded before the runs, as a broker's cleaner process loads them when it starts
  (`init_cleaner_process`), not in its passes.
- **Produce latency**: one broker (local stack, log.cleaner.backoff.ms=100). A writer process sends
  keyed 200-byte records at 2 MiB/s to a background topic with 1 MiB segments while a probe
  (confluent-kafka, acks=1, one record at a time, every 5 ms) measures produce round trips to a
  topic of its own. Phase "idle": the background topic has cleanup.policy=delete, so the cleaner has
  nothing to do. Phase "cleaning": the background topic has cleanup.policy=compact with
  min.cleanable.dirty.ratio=0.01, so the cleaner runs pass after pass (the passes and bytes it
  cleaned during the phase are counted from the broker log). Ratio = p99 cleaning / p99 idle
  (goal <= 1.5). The two phases alternate which goes first.

Medians over ``--runs`` runs go to bench/results/cleaner_bench.json.

    .venv/bin/python bench/cleaner_bench.py [--runs 3] [--mib 64] [--probe-s 15]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import cpu_pressure, machine_info, result_header, write_result  # noqa: E402
from broker_core.log import LogConfig, PartitionLog  # noqa: E402
from broker_core.log.cleaner import apply_cleaning, clean, plan_cleaning  # noqa: E402
from broker_core.log.cleaner_kernels import warm_up  # noqa: E402
from broker_core.log.offset_map import OffsetMap  # noqa: E402
from broker_core.records.batch import SimpleRecord, build_batch  # noqa: E402

MIB = 1024 * 1024
KEYS = 50_000
VALUE_BYTES = 100
BATCH_RECORDS = 120
SEGMENT_BYTES = 8 * MIB
CHUNK = MIB
WRITER_RATE = 2 * MIB
WRITER_VALUE_BYTES = 200
WRITER_KEYS = 20_000
PROBE_INTERVAL_S = 0.005


# ---------------------------------------------------------------------------------- throughput


def build_log(directory: Path, mib: int) -> int:
    config = LogConfig(cleanup_policy="compact", segment_bytes=SEGMENT_BYTES)
    log = PartitionLog.open(directory, config, topic="bench")
    now = time.time_ns() // 1_000_000
    number = 0
    while log.size_bytes < mib * MIB:
        records = [
            SimpleRecord(key=b"key-%06d" % ((number * BATCH_RECORDS + i) * 7919 % KEYS),
                         value=os.urandom(VALUE_BYTES // 2).hex().encode(), timestamp=now)
            for i in range(BATCH_RECORDS)
        ]
        log.append(build_batch(records), now_ms=now)
        number += 1
    log.roll(now_ms=now)
    size = log.size_bytes
    log.close()
    return size


def run_cleaner(source: Path, work: Path) -> tuple[float, int]:
    shutil.copytree(source, work)
    log = PartitionLog.open(work, LogConfig(cleanup_policy="compact", segment_bytes=SEGMENT_BYTES), topic="bench")
    try:
        started = time.perf_counter()
        plan = plan_cleaning(log, high_watermark=log.log_end_offset, now_ms=time.time_ns() // 1_000_000, force=True)
        assert plan is not None
        result = clean(plan.job, OffsetMap(10 * KEYS))
        swapped = apply_cleaning(plan, result)
        elapsed = time.perf_counter() - started
        assert swapped == len(result.groups)
        cleaned = sum(plan.sizes)
    finally:
        log.close()
        shutil.rmtree(work)
    return elapsed, cleaned


def run_raw(source: Path, work: Path) -> tuple[float, int]:
    shutil.copytree(source, work)
    files = sorted(p for p in work.iterdir() if p.suffix == ".log" and p.stat().st_size)
    out = os.open(work / "copy.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    moved = 0
    try:
        started = time.perf_counter()
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                position = 0
                while chunk := os.pread(fd, CHUNK, position):
                    os.write(out, chunk)
                    position += len(chunk)
                    moved += len(chunk)
            finally:
                os.close(fd)
        os.fsync(out)
        elapsed = time.perf_counter() - started
    finally:
        os.close(out)
        shutil.rmtree(work)
    return elapsed, moved


def throughput_runs(runs: int, mib: int) -> dict:
    base = Path(tempfile.mkdtemp(prefix="cleaner-bench-"))
    try:
        size = build_log(base / "source", mib)
        warm_up()
        cleaner, raw = [], []
        for run in range(runs):
            order = ("cleaner", "raw") if run % 2 == 0 else ("raw", "cleaner")
            for side in order:
                if side == "cleaner":
                    elapsed, cleaned = run_cleaner(base / "source", base / "work")
                    cleaner.append(cleaned / MIB / elapsed)
                else:
                    elapsed, moved = run_raw(base / "source", base / "work")
                    raw.append(moved / MIB / elapsed)
            print(f"run {run}: cleaner {cleaner[-1]:.1f} MiB/s, raw read+write {raw[-1]:.1f} MiB/s", flush=True)
    finally:
        shutil.rmtree(base)
    cleaner_median, raw_median = statistics.median(cleaner), statistics.median(raw)
    return {"log_bytes": size, "cleaner_mib_s": cleaner, "raw_mib_s": raw,
            "cleaner_median_mib_s": cleaner_median, "raw_median_mib_s": raw_median,
            "ratio": cleaner_median / raw_median}


# ---------------------------------------------------------------------------------- latency


def background_writer(bootstrap: str, topic: str, stop_at: float) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5})
    value = b"v" * WRITER_VALUE_BYTES
    per_tick = max(1, int(WRITER_RATE * 0.01 / WRITER_VALUE_BYTES))
    number = 0
    next_tick = time.monotonic()
    while time.monotonic() < stop_at:
        for _ in range(per_tick):
            while True:
                try:
                    producer.produce(topic, key=b"key-%d" % (number % WRITER_KEYS), value=value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
            number += 1
        producer.poll(0)
        next_tick += 0.01
        time.sleep(max(0.0, next_tick - time.monotonic()))
    producer.flush(30)


def probe(bootstrap: str, topic: str, seconds: float) -> list[float]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    producer.produce(topic, key=b"warm", value=b"up", partition=0)
    producer.flush(10)
    samples = []
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        started = time.perf_counter()
        producer.produce(topic, key=b"probe", value=b"x" * 100, partition=0)
        producer.flush(10)
        samples.append((time.perf_counter() - started) * 1000)
        time.sleep(PROBE_INTERVAL_S)
    return samples


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


def cleaned_in(log_path: Path, start: int) -> tuple[int, int]:
    """Passes and bytes read the broker log reports after byte ``start``."""
    text = log_path.read_bytes()[start:].decode(errors="replace")
    found = re.findall(r"cleaned \S+: \d+ of \d+ groups swapped, (\d+) bytes read", text)
    return len(found), sum(int(n) for n in found)


def latency_phase(stack: object, topic: str, probe_topic: str, seconds: float) -> dict:
    log_path = stack.directory / "logs" / "broker-1.log"
    start = log_path.stat().st_size
    stop_at = time.monotonic() + seconds + 3
    writer = multiprocessing.Process(target=background_writer, args=(stack.bootstrap_servers, topic, stop_at))
    writer.start()
    time.sleep(2)  # the writer up to speed and, on the compacted topic, passes under way
    samples = probe(stack.bootstrap_servers, probe_topic, seconds)
    writer.join()
    passes, cleaned = cleaned_in(log_path, start)
    return {"p50_ms": statistics.median(samples), "p99_ms": p99(samples), "samples": len(samples),
            "cleaner_passes": passes, "cleaner_bytes_read": cleaned}


def latency_runs(runs: int, seconds: float) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    from broker_core.local_stack import LocalStack

    directory = Path(tempfile.mkdtemp(prefix="cleaner-latency-"))
    stack = LocalStack(directory=directory, brokers=1, overrides={"log.cleaner.backoff.ms": "100"})
    stack.start()
    phases: dict[str, list[dict]] = {"idle": [], "cleaning": []}
    try:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        topics = []
        for run in range(runs):
            topics += [NewTopic(f"background-delete-{run}", 1, 1, config={"segment.bytes": str(MIB)}),
                       NewTopic(f"background-compact-{run}", 1, 1, config={
                           "segment.bytes": str(MIB), "cleanup.policy": "compact",
                           "min.cleanable.dirty.ratio": "0.01"}),
                       NewTopic(f"probe-{run}", 1, 1)]
        for future in admin.create_topics(topics).values():
            future.result(30)
        for run in range(runs):
            order = ("idle", "cleaning") if run % 2 == 0 else ("cleaning", "idle")
            for phase in order:
                topic = f"background-{'delete' if phase == 'idle' else 'compact'}-{run}"
                phases[phase].append(latency_phase(stack, topic, f"probe-{run}", seconds))
            print(f"run {run}: p99 idle {phases['idle'][-1]['p99_ms']:.2f} ms, cleaning "
                  f"{phases['cleaning'][-1]['p99_ms']:.2f} ms ({phases['cleaning'][-1]['cleaner_passes']} passes)",
                  flush=True)
    finally:
        stack.stop(save_state=False)
        shutil.rmtree(directory, ignore_errors=True)
    idle = statistics.median(p["p99_ms"] for p in phases["idle"])
    cleaning = statistics.median(p["p99_ms"] for p in phases["cleaning"])
    return {"phases": phases, "idle_p99_median_ms": idle, "cleaning_p99_median_ms": cleaning,
            "ratio": cleaning / idle}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--probe-s", type=float, default=15.0)
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    machine = machine_info()
    pressure = cpu_pressure()
    result = {**result_header("cleaner_bench", machine), "cpu_pressure_before": pressure,
              "throughput": throughput_runs(args.runs, args.mib)}
    print(f"throughput ratio {result['throughput']['ratio']:.3f} (goal >= 0.3)", flush=True)
    if not args.skip_latency:
        result["latency"] = latency_runs(args.runs, args.probe_s)
        print(f"p99 ratio {result['latency']['ratio']:.3f} (goal <= 1.5)", flush=True)
    write_result(REPO_ROOT / "bench" / "results" / "cleaner_bench.json", result)


if __name__ == "__main__":
    main()
