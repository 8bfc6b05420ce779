"""Follower fetch cost at 1,000 partitions: KIP-227 fetch sessions against full fetch requests, in one run.

Two brokers of a local stack follow each other's leaders of one topic with 1,000 partitions and
replication factor 2 (about 500 partitions followed per broker, one replica fetcher each: Kafka's
default num.replica.fetchers). The same stack is started twice per run, once with Kafka's default
``max.incremental.fetch.session.cache.slots=1000`` (followers fetch in sessions) and once with 0
(the leaders open no sessions, so every follower request names all its partitions and every answer
all of them, which is what Floe did before sessions); the run order alternates between runs.

Each stack is measured in two phases of ``--window`` seconds once both brokers' fetchers run (and
a 20 s warm-up); replica.lag.time.max.ms is raised to 10 minutes so that no ISR changes on a busy
machine:
``idle`` (nothing produced; followers long-poll with replica.fetch.wait.max.ms=500, Kafka's
default) and ``trickle`` (one producer writes ``--rate`` 100-byte records per second, acks=1, to the
partitions in turn, so a few partitions change per round trip). Measured per phase:

- follower fetch bytes: the bytes the followers' fetcher sockets sent (requests) and received
  (responses), read from the kernel's per-socket TCP counters (``ss -ti``: bytes_sent,
  bytes_received) of every connection from one broker process to the other's listener, so nothing
  in Floe counts them;
- broker CPU: user+system CPU seconds of both broker processes (psutil), as a share of one core.

The ratio printed per phase is full/sessions (how many times more bytes, and CPU, full fetches
cost). Medians over ``--runs``. The machine is shared: the load average is recorded with each run.

    .venv/bin/python bench/fetch_session_bench.py [--runs 3] [--window 15] [--partitions 1000] [--rate 200]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import psutil  # noqa: E402
from confluent_kafka import Producer  # noqa: E402

from bench.machine import cpu_pressure, result_header, write_result  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.metadata.errors import MetadataError, TopicExistsError  # noqa: E402
from broker_core.metadata.store import MetadataStore  # noqa: E402

TOPIC = "fetch-sessions"
BROKERS = 2
CASES = {"sessions": "1000", "full": "0"}
WARM_UP_S = 20
RESULT = REPO_ROOT / "bench" / "results" / "fetch_session_bench.json"
_COUNTER = re.compile(r"\b(bytes_sent|bytes_received):(\d+)")


def socket_counters() -> dict[tuple[str, str], tuple[int, int]]:
    """(local address, peer address) -> (bytes sent, bytes received) of every established TCP socket."""
    text = subprocess.run(["ss", "-tinH", "state", "established"], capture_output=True, text=True,
                          check=True).stdout
    counters: dict[tuple[str, str], tuple[int, int]] = {}
    key = None
    for line in text.splitlines():
        if not line.startswith((" ", "\t")):
            parts = line.split()
            key = (parts[2], parts[3]) if len(parts) >= 4 else None
            continue
        if key is not None:
            found = dict(_COUNTER.findall(line))
            counters[key] = (int(found.get("bytes_sent", 0)), int(found.get("bytes_received", 0)))
    return counters


def follower_sockets(stack: LocalStack) -> list[tuple[str, str]]:
    """The sockets a broker process opened to the other broker's listener: its replica fetchers'."""
    ports = {broker_id: process.port for broker_id, process in stack.processes.items()}
    found = []
    for broker_id, process in stack.processes.items():
        others = {port for other, port in ports.items() if other != broker_id}
        for connection in psutil.Process(process.pid).net_connections(kind="tcp"):
            if connection.status == psutil.CONN_ESTABLISHED and connection.raddr and connection.raddr.port in others:
                found.append((f"{connection.laddr.ip}:{connection.laddr.port}",
                              f"{connection.raddr.ip}:{connection.raddr.port}"))
    return found


def broker_cpu_s(stack: LocalStack) -> float:
    total = 0.0
    for process in stack.processes.values():
        times = psutil.Process(process.pid).cpu_times()
        total += times.user + times.system
    return total


def measure(stack: LocalStack, window_s: float) -> dict[str, float]:
    """Follower fetch bytes and broker CPU over ``window_s``."""
    sockets = follower_sockets(stack)
    before, cpu_before, started = socket_counters(), broker_cpu_s(stack), time.monotonic()
    time.sleep(window_s)
    after, cpu_after, elapsed = socket_counters(), broker_cpu_s(stack), time.monotonic() - started
    missing = [s for s in sockets if s not in before or s not in after]
    if missing or not sockets:
        raise SystemExit(f"follower sockets changed during the window ({missing or 'none found'}); run again")
    sent = sum(after[s][0] - before[s][0] for s in sockets)
    received = sum(after[s][1] - before[s][1] for s in sockets)
    return {"seconds": round(elapsed, 2), "fetcher_sockets": len(sockets),
            "request_bytes_per_s": round(sent / elapsed), "response_bytes_per_s": round(received / elapsed),
            "broker_cpu_percent_of_core": round(100 * (cpu_after - cpu_before) / elapsed, 2),
            "cpu_pressure_avg10": cpu_pressure(), "load_average_1m": os.getloadavg()[0]}


def create_topic(store: MetadataStore, partitions: int) -> None:
    """Create the topic, again while moto is too slow to answer (a failed try leaves no topic visible)."""
    for attempt in range(5):
        try:
            store.create_topic(TOPIC, partitions, BROKERS)
            return
        except TopicExistsError:
            return  # a try whose answer timed out went through
        except MetadataError as exc:
            print(f"create_topic try {attempt + 1}: {exc}", flush=True)
            time.sleep(5)
    raise SystemExit("the topic could not be created")


def in_sync(store: MetadataStore, partitions: int) -> bool:
    """Every partition has a leader and both replicas in its ISR (False while moto is too busy to say).
    Recorded, not waited for: the ISR starts full and cannot shrink within replica.lag.time.max.ms."""
    try:
        states = store.get_partitions(TOPIC)
    except MetadataError:
        return False
    return len(states) == partitions and all(p.leader >= 0 and len(p.isr) == BROKERS for p in states)


def run_case(slots: str, partitions: int, window_s: float, rate: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fetch-sessions-") as directory:
        # replica.lag.time.max.ms is raised so that a follower slowed down by a busy shared machine does
        # not leave the ISR (and make the brokers write ISR changes) while fetch costs are measured.
        stack = LocalStack(directory=Path(directory), brokers=BROKERS,
                           overrides={"max.incremental.fetch.session.cache.slots": slots,
                                      "replica.lag.time.max.ms": "600000"})
        stack.start()
        try:
            # Written straight to the metadata store: what is measured is fetching, not topic creation
            # (whose 1,000-partition CreateTopics can outlast a client's request timeout on a busy machine).
            store = MetadataStore(stack.aws)
            create_topic(store, partitions)
            deadline = time.monotonic() + 300
            print(f"  topic created; in sync: {in_sync(store, partitions)}", flush=True)
            # Both brokers follow the other's leaders once each has a fetcher connection to the other;
            # then past the first (full) fetches and the creation's metadata churn.
            while len(follower_sockets(stack)) < BROKERS:
                if time.monotonic() > deadline:
                    raise SystemExit("replica fetchers did not connect within 300 s")
                time.sleep(1)
            time.sleep(WARM_UP_S)
            result = {"in_sync_before": in_sync(store, partitions), "idle": measure(stack, window_s)}
            stop = threading.Event()
            producer_thread = threading.Thread(target=_trickle, args=(stack, partitions, rate, stop), daemon=True)
            producer_thread.start()
            time.sleep(2)
            try:
                result["trickle"] = measure(stack, window_s)
            finally:
                stop.set()
                producer_thread.join(30)
            result["in_sync_after"] = in_sync(store, partitions)
            return result
        finally:
            stack.stop(save_state=False)


def _trickle(stack: LocalStack, partitions: int, rate: int, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": 1, "linger.ms": 0})
    value = b"x" * 100
    number = 0
    started = time.monotonic()
    while not stop.is_set():
        due = started + number / rate
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        producer.produce(TOPIC, value, partition=number % partitions)
        producer.poll(0)
        number += 1
    producer.flush(30)
    del producer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=200)
    args = parser.parse_args()
    runs = []
    for run in range(args.runs):
        order = list(CASES) if run % 2 == 0 else list(reversed(CASES))
        outcome: dict[str, Any] = {"order": order}
        for case in order:
            print(f"run {run + 1}/{args.runs}: {case} ...", flush=True)
            outcome[case] = run_case(CASES[case], args.partitions, args.window, args.rate)
            print(f"  {case}: {outcome[case]}", flush=True)
        runs.append(outcome)
        report(args, runs)


def report(args: argparse.Namespace, runs: list[dict[str, Any]]) -> None:
    """Write the result of the runs so far (after each run, so that an interrupted bench keeps them)."""
    summary: dict[str, Any] = {}
    for phase in ("idle", "trickle"):
        medians = {case: {metric: statistics.median(r[case][phase][metric] for r in runs)
                          for metric in ("request_bytes_per_s", "response_bytes_per_s", "broker_cpu_percent_of_core")}
                   for case in CASES}
        summary[phase] = {
            **medians,
            "ratio_full_to_sessions": {
                metric: round(medians["full"][metric] / medians["sessions"][metric], 2)
                if medians["sessions"][metric] else None
                for metric in medians["full"]},
        }
    result = {**result_header("fetch_session_bench"),
              "settings": {"partitions": args.partitions, "replication_factor": BROKERS, "window_s": args.window,
                           "trickle_records_per_s": args.rate, "runs": len(runs), "runs_asked": args.runs},
              "summary": summary, "runs": runs}
    write_result(RESULT, result)
    for phase, figures in summary.items():
        print(f"{phase}: " + ", ".join(
            f"{metric} sessions {figures['sessions'][metric]} full {figures['full'][metric]} "
            f"(x{figures['ratio_full_to_sessions'][metric]})" for metric in figures["full"]))
    print(f"wrote {RESULT.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
