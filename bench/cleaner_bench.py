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
  (goal <= 1.5). The two phases alternate which goes first. Before the runs a compacted warm-up topic
  is written until the first pass is logged, so that the broker's cleaner process (spawned at its
  first pass, loading numba) is running before any phase is measured. Each phase also records the
  broker's event-loop lag (floe_event_loop_lag_seconds, sampled every 10 ms), the cleaner's passes and
  bytes, and the CPU seconds and storage bytes of the broker and its cleaner processes.
  ``--compacted-phase`` adds a phase whose compacted topic is never cleanable (the compacted produce
  path, which checks every record's key, without passes); ``--io-rate`` sets
  log.cleaner.io.max.bytes.per.second.

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

from bench.broker_probes import lag_between, loop_lag  # noqa: E402
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


def cleaned_in(log_path: Path, start: int) -> dict:
    """Passes and bytes read and written that the broker log reports after byte ``start``."""
    text = log_path.read_bytes()[start:].decode(errors="replace")
    found = re.findall(r"cleaned \S+: \d+ of \d+ groups swapped, (\d+) bytes read, (\d+) written", text)
    return {"cleaner_passes": len(found), "cleaner_bytes_read": sum(int(r) for r, _ in found),
            "cleaner_bytes_written": sum(int(w) for _, w in found)}


def process_usage(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) and bytes read from and written to storage by process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    usage = {"cpu_s": (int(fields[11]) + int(fields[12])) / ticks}
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            name, value = line.split(":")
            if name in ("read_bytes", "write_bytes"):
                usage[name] = int(value)
    except OSError:  # /proc/<pid>/io needs the same user (or ptrace rights)
        pass
    return usage


def cleaner_pids(broker_pid: int) -> list[int]:
    """The broker's cleaner processes: its children started by multiprocessing's spawn."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if parent == broker_pid and b"multiprocessing" in (stat.parent / "cmdline").read_bytes():
                pids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def usage_of(pids: list[int]) -> dict[str, float]:
    total: dict[str, float] = {}
    for pid in pids:
        try:
            usage = process_usage(pid)
        except OSError:  # ended meanwhile
            continue
        for name, value in usage.items():
            total[name] = total.get(name, 0) + value
    return total


def usage_between(before: dict[str, float], after: dict[str, float], prefix: str) -> dict:
    return {f"{prefix}_{name}": round(after[name] - before.get(name, 0), 3) for name in after}


def latency_phase(stack: object, topic: str, probe_topic: str, seconds: float) -> dict:
    broker = stack.processes[1]
    log_path = stack.directory / "logs" / "broker-1.log"
    metrics_url = stack.metrics_url(broker)
    start = log_path.stat().st_size
    stop_at = time.monotonic() + seconds + 3
    writer = multiprocessing.Process(target=background_writer, args=(stack.bootstrap_servers, topic, stop_at))
    writer.start()
    time.sleep(2)  # the writer up to speed and, on the compacted topic, passes under way
    broker_pid = broker.process.pid
    lag_before, broker_before = loop_lag(metrics_url), usage_of([broker_pid])
    cleaners = cleaner_pids(broker_pid)
    cleaners_before = usage_of(cleaners)
    started = time.monotonic()
    samples = probe(stack.bootstrap_servers, probe_topic, seconds)
    elapsed = time.monotonic() - started
    lag_after, broker_after, cleaners_after = loop_lag(metrics_url), usage_of([broker_pid]), usage_of(cleaners)
    writer.join()
    return {"p50_ms": statistics.median(samples), "p99_ms": p99(samples), "samples": len(samples),
            "probe_s": round(elapsed, 2), **cleaned_in(log_path, start), **lag_between(lag_before, lag_after),
            **usage_between(broker_before, broker_after, "broker"),
            **usage_between(cleaners_before, cleaners_after, "cleaner_process")}


def warm_up_cleaner(stack: object, seconds: float = 4.0, timeout_s: float = 120.0) -> float:
    """Write to a compacted topic until the broker's first pass is logged; return how long that took.

    A broker starts its cleaner processes at its first pass (a spawned interpreter that loads numba and
    the kernels: seconds of CPU on a loaded machine), so without this the first "cleaning" phase
    would measure that start-up along with the passes.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    log_path = stack.directory / "logs" / "broker-1.log"
    start = log_path.stat().st_size
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    for future in admin.create_topics([NewTopic("warm-up", 1, 1, config=PHASE_TOPIC_CONFIGS["cleaning"])]).values():
        future.result(30)
    began = time.monotonic()
    background_writer(stack.bootstrap_servers, "warm-up", began + seconds)
    while not cleaned_in(log_path, start)["cleaner_passes"]:
        if time.monotonic() - began > timeout_s:
            raise RuntimeError(f"no cleaner pass within {timeout_s:.0f} s; see {log_path}")
        time.sleep(0.5)
    return time.monotonic() - began


# A phase's background topic: "idle" is not compacted, so the cleaner has nothing to do; "compacted"
# (with --compacted-phase) is compacted but never cleanable (min.compaction.lag.ms of a day), so it
# carries a compacted topic's produce path (every record's key checked) without passes; "cleaning" is
# compacted and cleaned pass after pass.
PHASE_TOPIC_CONFIGS = {
    "idle": {"segment.bytes": str(MIB)},
    "compacted": {"segment.bytes": str(MIB), "cleanup.policy": "compact", "min.compaction.lag.ms": str(86_400_000)},
    "cleaning": {"segment.bytes": str(MIB), "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"},
}


def latency_runs(runs: int, seconds: float, *, io_rate: float | None = None, compacted_phase: bool = False) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    from broker_core.local_stack import LocalStack

    overrides = {"log.cleaner.backoff.ms": "100", "floe.event.loop.lag.sample.ms": "10"}
    if io_rate is not None:
        overrides["log.cleaner.io.max.bytes.per.second"] = str(io_rate)
    directory = Path(tempfile.mkdtemp(prefix="cleaner-latency-"))
    stack = LocalStack(directory=directory, brokers=1, overrides=overrides)
    stack.start()
    names = ["idle", "cleaning"] + (["compacted"] if compacted_phase else [])
    phases: dict[str, list[dict]] = {name: [] for name in names}
    try:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        topics = [NewTopic(f"background-{name}-{run}", 1, 1, config=PHASE_TOPIC_CONFIGS[name])
                  for run in range(runs) for name in names]
        topics += [NewTopic(f"probe-{run}", 1, 1) for run in range(runs)]
        for future in admin.create_topics(topics).values():
            future.result(30)
        warm_up_s = warm_up_cleaner(stack)
        print(f"cleaner warmed up: first pass {warm_up_s:.1f} s after writing began", flush=True)
        for run in range(runs):
            order = names if run % 2 == 0 else names[::-1]
            for phase in order:
                phases[phase].append(latency_phase(stack, f"background-{phase}-{run}", f"probe-{run}", seconds))
            line = ", ".join(f"{name} {phases[name][-1]['p99_ms']:.2f} ms (loop late >= 10 ms "
                             f"{phases[name][-1]['loop_lag_over_10ms']}x, {phases[name][-1]['loop_lag_total_s']:.2f} s)"
                             for name in names)
            print(f"run {run}: p99 {line}; {phases['cleaning'][-1]['cleaner_passes']} passes", flush=True)
    finally:
        stack.stop(save_state=False)
        shutil.rmtree(directory, ignore_errors=True)
    medians = {name: statistics.median(p["p99_ms"] for p in phases[name]) for name in names}
    idle_p99s = [p["p99_ms"] for p in phases["idle"]]
    result = {"settings": overrides, "cleaner_warm_up_s": warm_up_s, "phases": phases, "idle_p99_median_ms": medians["idle"],
              "cleaning_p99_median_ms": medians["cleaning"], "ratio": medians["cleaning"] / medians["idle"],
              "idle_p99_spread": max(idle_p99s) / min(idle_p99s),
              "run_ratios": [c["p99_ms"] / i["p99_ms"] for i, c in zip(phases["idle"], phases["cleaning"], strict=True)]}
    if compacted_phase:
        result["compacted_p99_median_ms"] = medians["compacted"]
        result["cleaning_vs_compacted_ratio"] = medians["cleaning"] / medians["compacted"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--probe-s", type=float, default=15.0)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--io-rate", type=float, default=None,
                        help="the broker's log.cleaner.io.max.bytes.per.second in the latency phases (default: unlimited)")
    parser.add_argument("--compacted-phase", action="store_true",
                        help="also a phase with a compacted topic that is never cleanable (the compacted produce path alone)")
    parser.add_argument("--out", default="cleaner_bench.json", help="file name under bench/results/")
    args = parser.parse_args()
    machine = machine_info()
    pressure = cpu_pressure()
    result = {**result_header("cleaner_bench", machine), "cpu_pressure_before": pressure,
              "load_average_before": os.getloadavg(), "argv": sys.argv[1:]}
    if not args.skip_throughput:
        result["throughput"] = throughput_runs(args.runs, args.mib)
        print(f"throughput ratio {result['throughput']['ratio']:.3f} (goal >= 0.3)", flush=True)
    if not args.skip_latency:
        result["latency"] = latency_runs(args.runs, args.probe_s, io_rate=args.io_rate,
                                         compacted_phase=args.compacted_phase)
        latency = result["latency"]
        print(f"p99 ratio {latency['ratio']:.3f} (goal <= 1.5); per run "
              f"{', '.join(f'{r:.2f}' for r in latency['run_ratios'])}; idle p99 spread {latency['idle_p99_spread']:.2f}x"
              + (f"; cleaning / compacted {latency['cleaning_vs_compacted_ratio']:.3f}" if args.compacted_phase else ""),
              flush=True)
    result["load_average_after"] = os.getloadavg()
    write_result(REPO_ROOT / "bench" / "results" / args.out, result)


if __name__ == "__main__":
    main()
