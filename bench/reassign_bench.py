"""Partition reassignment: how long a move takes under a replication throttle, and produce latency meanwhile.

Two brokers (local stack). One partition of ``--mib`` MiB (64 KiB records) is moved back and forth
between them (AlterPartitionReassignments with the other broker as the only target, so every byte is
copied), three phases per run:

- **idle**: no move; a probe measures produce round trips (confluent-kafka, acks=all, one 100-byte
  record at a time every 5 ms) to a topic of its own with two replicas, one on each broker.
- **unthrottled**: the move with no throttle: its time is the physical limit of this machine's
  replication (the peer).
- **throttled**: the move with ``leader/follower.replication.throttled.rate`` = ``--throttle-mib`` MiB/s
  on both brokers (dynamic broker configs) and ``*`` as both topics' throttled-replicas lists, as
  kafka-reassign-partitions --throttle sets them. Ratio = move time / (partition bytes / throttle)
  (goal <= 1.2).

The move's time runs from the AlterPartitionReassignments answer to the first ListPartitionReassignments
that no longer lists it. The probe's p99 during each move is compared with the idle phase's: the throttle
holds the copy to its rate, and the probe's own replication (its followers are in sync) is never throttled.

Whether the throttle holds over short intervals, not only on average: during each move a thread reads
the size of the partition's segment files on the target broker's disk every 100 ms, and the run
records the most bytes copied in any 2 s and any 5 s interval, divided by what the throttle allows in
that time (1.0 = exactly the throttle). Each phase also records both brokers' event-loop lag
(floe_event_loop_lag_seconds, sampled every 10 ms) and CPU seconds. ``--py-spy DIR`` records both
brokers' stacks (py-spy, raw folded, per thread) during each throttled move into DIR.

Medians over ``--runs`` runs go to bench/results/reassign_bench.json (``--out`` names another file there).

    .venv/bin/python bench/reassign_bench.py [--runs 3] [--mib 256] [--throttle-mib 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.broker_probes import lag_between, loop_lag  # noqa: E402
from bench.machine import cpu_pressure, machine_info, result_header, write_result  # noqa: E402
from broker_core.client import FloeClient  # noqa: E402
from broker_core.quotas.replication import (  # noqa: E402
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
)

MIB = 1024 * 1024
RECORD_BYTES = 64 * 1024
PROBE_INTERVAL_S = 0.005
STACK_OVERRIDES = {"metadata.poll.interval.ms": "200", "broker.session.timeout.ms": "6000",
                   "broker.heartbeat.interval.ms": "1000", "auto.leader.rebalance.enable": "false",
                   "floe.event.loop.lag.sample.ms": "10"}
PROGRESS_INTERVAL_S = 0.1


def fill(bootstrap: str, topic: str, mib: int) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20,
                         "batch.size": 1024 * 1024, "message.max.bytes": 1000000, "queue.buffering.max.kbytes": 262144})
    chunk = os.urandom(RECORD_BYTES)
    sent = 0
    while sent < mib * MIB:
        while True:
            try:
                producer.produce(topic, value=chunk, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        sent += RECORD_BYTES
        producer.poll(0)
    producer.flush(120)
    return sent


class Probe:
    """Produce round trips, one record at a time, on a thread, while a phase runs."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        self.topic = topic
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Probe:
        self.producer.produce(self.topic, value=b"warm", partition=0)
        self.producer.flush(30)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            self.producer.produce(self.topic, value=b"x" * 100, partition=0)
            self.producer.flush(30)
            self.samples.append((time.perf_counter() - started) * 1000)
            time.sleep(PROBE_INTERVAL_S)


class Progress:
    """The bytes of a partition's segment files in one broker's data directory, read every
    PROGRESS_INTERVAL_S on a thread while a move runs."""

    def __init__(self, data_dir: Path, partition_dir: str) -> None:
        self.data_dir = data_dir
        self.partition_dir = partition_dir
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _size(self) -> int:
        total = 0
        for path in self.data_dir.rglob(f"{self.partition_dir}/*.log"):
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self._size()))
            time.sleep(PROGRESS_INTERVAL_S)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def most_in(self, seconds: float) -> float:
        """The most bytes that arrived in any interval of ``seconds`` (intervals between samples)."""
        best = 0
        j = 0
        for t, size in self.samples:
            while self.samples[j][0] < t - seconds - 1e-9:
                j += 1
            best = max(best, size - self.samples[j][1])
        return float(best)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BrokerWatch:
    """Both brokers' event-loop lag and CPU seconds over a phase; optionally their stacks (py-spy)."""

    def __init__(self, stack: object, py_spy_prefix: Path | None = None) -> None:
        self.stack = stack
        self.py_spy_prefix = py_spy_prefix
        self.result: dict = {}
        self._spies: list[subprocess.Popen] = []

    def __enter__(self) -> BrokerWatch:
        self._before = {b: (loop_lag(self.stack.metrics_url(p)), cpu_seconds(p.process.pid))
                        for b, p in self.stack.processes.items()}
        if self.py_spy_prefix is not None:
            spy = Path(sys.executable).with_name("py-spy")
            for broker_id, process in self.stack.processes.items():
                out = f"{self.py_spy_prefix}-broker{broker_id}.txt"
                self._spies.append(subprocess.Popen(
                    [str(spy), "record", "--pid", str(process.process.pid), "--format", "raw", "--threads",
                     "--rate", "200", "--output", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return self

    def __exit__(self, *exc: object) -> None:
        for spy in self._spies:
            spy.send_signal(signal.SIGINT)
        for spy in self._spies:
            spy.wait(60)
        for broker_id, process in self.stack.processes.items():
            lag, cpu = self._before[broker_id]
            self.result[f"broker{broker_id}"] = {
                **lag_between(lag, loop_lag(self.stack.metrics_url(process))),
                "cpu_s": round(cpu_seconds(process.process.pid) - cpu, 2)}


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98] if len(samples) >= 2 else float("nan")


async def move(client: FloeClient, topic: str, target: int) -> float:
    """Move ``topic``-0 to ``target`` alone; seconds until the controller completed the move."""
    outcome = await client.alter_partition_reassignments({(topic, 0): [target]})
    if outcome[(topic, 0)] is not None:
        raise RuntimeError(f"reassignment refused: {outcome[(topic, 0)]}")
    started = time.monotonic()
    while await client.list_partition_reassignments([(topic, 0)]):
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def throttle(client: FloeClient, brokers: list[int], topics: list[str], rate: int | None) -> None:
    for topic in topics:
        if rate is None:
            await client.alter_topic_configs(topic, {}, [LEADER_REPLICAS, FOLLOWER_REPLICAS])
        else:
            await client.alter_topic_configs(topic, {LEADER_REPLICAS: "*", FOLLOWER_REPLICAS: "*"})
    for broker in brokers:
        if rate is None:
            await client.alter_broker_configs(broker, {}, [LEADER_RATE, FOLLOWER_RATE])
        else:
            await client.alter_broker_configs(broker, {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)})


def run_all(runs: int, mib: int, throttle_mib: float, idle_s: float, py_spy: Path | None = None) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    from broker_core.local_stack import LocalStack

    directory = Path(tempfile.mkdtemp(prefix="reassign-bench-"))
    stack = LocalStack(directory=directory, brokers=2, overrides=STACK_OVERRIDES)
    stack.start()
    rate = int(throttle_mib * MIB)
    results: list[dict] = []
    try:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        for future in admin.create_topics([NewTopic("moving", 1, 1), NewTopic("probe", 1, 2)]).values():
            future.result(60)
        time.sleep(2)
        size = fill(stack.bootstrap_servers, "moving", mib)
        print(f"filled moving-0 with {size / MIB:.0f} MiB", flush=True)

        async def phases() -> None:
            async with FloeClient(stack.bootstrap_servers, request_timeout_s=60) as client:
                brokers = sorted(client.brokers)
                for run in range(runs):
                    entry: dict = {}
                    with BrokerWatch(stack) as watch, Probe(stack.bootstrap_servers, "probe") as probe:
                        await asyncio.sleep(idle_s)
                    entry["idle_p99_ms"] = p99(probe.samples)
                    entry["idle_p50_ms"] = statistics.median(probe.samples)
                    entry["idle_brokers"] = watch.result
                    for phase in ("unthrottled", "throttled"):
                        where = (await client.describe_topic("moving")).partitions[0].replicas[0]
                        target = next(b for b in brokers if b != where)
                        await throttle(client, brokers, ["moving"], rate if phase == "throttled" else None)
                        await asyncio.sleep(1)  # every broker has read the new configs (one metadata poll)
                        spy = py_spy / f"run{run}-{phase}" if py_spy is not None and phase == "throttled" else None
                        with (BrokerWatch(stack, spy) as watch,
                              Progress(stack.processes[target].data_dir, "moving-0") as progress,
                              Probe(stack.bootstrap_servers, "probe") as probe):
                            seconds = await move(client, "moving", target)
                        entry[f"{phase}_s"] = seconds
                        entry[f"{phase}_mib_per_s"] = size / MIB / seconds
                        entry[f"{phase}_p99_ms"] = p99(probe.samples)
                        entry[f"{phase}_p50_ms"] = statistics.median(probe.samples)
                        entry[f"{phase}_brokers"] = watch.result
                        for window in (2, 5):
                            entry[f"{phase}_most_mib_per_s_over_{window}s"] = progress.most_in(window) / window / MIB
                            if phase == "throttled":
                                entry[f"throttled_most_over_{window}s_ratio"] = progress.most_in(window) / (rate * window)
                    await throttle(client, brokers, ["moving"], None)
                    entry["throttled_ratio"] = entry["throttled_s"] / (size / rate)
                    results.append(entry)
                    print(f"run {run}: unthrottled {entry['unthrottled_s']:.1f} s "
                          f"({entry['unthrottled_mib_per_s']:.1f} MiB/s), throttled {entry['throttled_s']:.1f} s "
                          f"(ratio {entry['throttled_ratio']:.2f}); produce p99 idle {entry['idle_p99_ms']:.1f} ms, "
                          f"unthrottled {entry['unthrottled_p99_ms']:.1f} ms, throttled {entry['throttled_p99_ms']:.1f} ms; "
                          f"throttled most over 2 s / 5 s: {entry['throttled_most_over_2s_ratio']:.2f} / "
                          f"{entry['throttled_most_over_5s_ratio']:.2f} of the throttle", flush=True)

        asyncio.run(phases())
    finally:
        stack.stop(save_state=False)
        shutil.rmtree(directory, ignore_errors=True)

    def median(name: str) -> float:
        return statistics.median(r[name] for r in results)

    return {"partition_bytes": size, "throttle_bytes_per_s": rate, "runs": results,
            "throttled_ratio_median": median("throttled_ratio"),
            "unthrottled_mib_per_s_median": median("unthrottled_mib_per_s"),
            "idle_p99_ms_median": median("idle_p99_ms"),
            "throttled_p99_ms_median": median("throttled_p99_ms"),
            "unthrottled_p99_ms_median": median("unthrottled_p99_ms"),
            "throttled_p99_ratio": median("throttled_p99_ms") / median("idle_p99_ms"),
            "throttled_most_over_2s_ratio_max": max(r["throttled_most_over_2s_ratio"] for r in results),
            "throttled_most_over_5s_ratio_max": max(r["throttled_most_over_5s_ratio"] for r in results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--throttle-mib", type=float, default=16.0)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--out", default="reassign_bench.json", help="file name under bench/results/")
    parser.add_argument("--py-spy", type=Path, default=None, help="record the brokers' stacks into this directory")
    args = parser.parse_args()
    if args.py_spy is not None:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    result = {**result_header("reassign_bench", machine), "cpu_pressure_before": cpu_pressure(),
              "load_average_before": os.getloadavg(),
              **run_all(args.runs, args.mib, args.throttle_mib, args.idle_s, args.py_spy),
              "load_average_after": os.getloadavg()}
    print(f"throttled move time / (bytes / throttle): {result['throttled_ratio_median']:.3f} (goal <= 1.2); "
          f"produce p99 during the throttled move / idle: {result['throttled_p99_ratio']:.2f}; most copied in 2 s / "
          f"5 s over the throttle's allowance, worst run: {result['throttled_most_over_2s_ratio_max']:.2f} / "
          f"{result['throttled_most_over_5s_ratio_max']:.2f}", flush=True)
    write_result(REPO_ROOT / "bench" / "results" / args.out, result)


if __name__ == "__main__":
    main()
