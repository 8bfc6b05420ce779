"""Failover, topic creation, idle CPU and memory as the partition count grows (issue 26).

Each case starts a fresh local stack (moto server + three broker processes on loopback), creates
one topic of N partitions with replication factor 3 and min.insync.replicas=2, and measures:

- create: from sending CreateTopics to the controller until every partition's leader
  acknowledges an acks=all write (so every replica is open, every leader knows it leads and
  every follower fetches: the topic is usable, not merely written down in DynamoDB);
- idle CPU: each broker's CPU time (utime + stime from /proc) over ``--idle-s`` seconds with no
  client traffic, as a percentage of one core, ``--settle-s`` after the creation probes; and the
  same brokers' before the topic existed (the fixed cost of DynamoDB polling, and of the load);
- RSS: each broker's resident set before the topic exists and after, and the difference per
  partition replica it hosts;
- failover: SIGKILL of one broker, chosen by ``--kill``: ``controller`` kills the holder of the
  controller lease (the survivors must take the lease over before one of them can fence it),
  ``other`` the broker leading the most partitions among the others (a controller that lives on
  fences it); each kind is a case of its own on a fresh stack. From the kill, a prober
  (``broker_core.client.write_probe``, shared with the kill-leader fault test) sends one-record
  acks=all Produce requests (up to 10 pending partitions a request, each request on a connection of
  its own, so that no answer waits behind another's acks) to whichever broker the
  surviving brokers' Metadata answers, or a NOT_LEADER_OR_FOLLOWER answer's KIP-951 hint, name as
  each partition's leader, until every partition has accepted one. The time each partition first accepted a write, as a multiple of
  ``broker.session.timeout.ms``: p50, p99 and max over the partitions (goal max <= 2x). The prober
  also counts the answers it got: NOT_LEADER_OR_FOLLOWER, and REQUEST_TIMED_OUT (the failure mode
  issue 26 reports).

The peer for failover is the physical floor, the session timeout itself: no broker can be replaced
before its session runs out. The peer for creation and idle cost is Floe at a smaller partition
count in the same run, which shows how each figure grows.

    .venv/bin/python bench/scale_bench.py [--partitions 3,100,1000] [--runs 3] [--idle-s 20]
        [--kill controller,other] [--settle-s 3] [--profile defaults|test] [--keep-logs DIR]
        [--output bench/results/scale_bench.json]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from kio.schema.errors import ErrorCode  # noqa: E402

from bench.machine import machine_info  # noqa: E402
from broker_core.client import BrokerConnection  # noqa: E402
from broker_core.client.write_probe import WriteProbe  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.metadata.store import MetadataStore  # noqa: E402
from broker_core.protocol.api_keys import ApiKey  # noqa: E402

TOPIC = "scale"
BROKERS = 3
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROBE_TIMEOUT_MS = 5000
PROBE_PAUSE_S = 0.05
METADATA_REFRESH_S = 0.2
# Partitions per Produce request of the prober: a request is answered when its slowest partition is
# acknowledged, so this bounds how many partitions one slow partition's wait is counted against.
PARTITIONS_PER_PROBE = 10


# Timing profiles: Floe's defaults (Kafka's: 9 s session, 2 s heartbeats, 500 ms metadata polls),
# and the test stack's (3 s session, 500 ms heartbeats, 200 ms polls).
PROFILES = {
    "defaults": {},
    "test": {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
             "metadata.poll.interval.ms": "200"},
}
DEFAULT_SESSION_TIMEOUT_MS = 9000


# /proc readings ----------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def idle_cpu_percent(stack: LocalStack, seconds: float) -> dict[int, float]:
    pids = {b: p.pid for b, p in stack.processes.items() if p.alive()}
    before = {b: cpu_seconds(pid) for b, pid in pids.items()}
    start = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - start
    return {b: round(100 * (cpu_seconds(pid) - before[b]) / elapsed, 2) for b, pid in pids.items()}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# the prober --------------------------------------------------------------------------------------


def write_probe(stack: LocalStack, partitions: int) -> WriteProbe:
    """The probe of ``broker_core.client.write_probe`` over the stack's live brokers."""
    def live_brokers() -> dict[int, tuple[str, int]]:
        return {b: (stack.host, p.port) for b, p in stack.processes.items() if p.alive()}

    return WriteProbe(live_brokers, TOPIC, partitions, timeout_ms=PROBE_TIMEOUT_MS,
                      partitions_per_request=PARTITIONS_PER_PROBE, metadata_refresh_s=METADATA_REFRESH_S,
                      pause_s=PROBE_PAUSE_S)


# one case ----------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def create_topic(stack: LocalStack, store: MetadataStore, partitions: int) -> None:
    """CreateTopics sent to the controller (the lease holder), as admin clients do."""
    lease = store.models.controller_lease.get("controller", consistent_read=True)

    async def create() -> None:
        process = stack.processes[int(lease.holder)]
        # A topic of 10,000 partitions is minutes of moto's writes on a loaded machine: the request
        # waits as long as the topic takes (the broker answers once it is written).
        connection = BrokerConnection(stack.host, process.port, request_timeout_s=max(120.0, partitions / 40))
        await connection.connect()
        try:
            response = await connection.send(ApiKey.CREATE_TOPICS, {
                "topics": [{"name": TOPIC, "num_partitions": partitions, "replication_factor": 3,
                            "assignments": [], "configs": [{"name": "min.insync.replicas", "value": "2"}]}],
                "timeout": datetime.timedelta(seconds=max(60.0, partitions / 40)), "validate_only": False})
        finally:
            await connection.close()
        for result in response.topics:
            if result.error_code != ErrorCode.none:
                raise RuntimeError(f"CreateTopics: {ErrorCode(result.error_code).name} {result.error_message}")

    asyncio.run(create())


def start_profilers(stack: LocalStack, store: MetadataStore, out: Path) -> list[subprocess.Popen]:
    """py-spy (raw samples at 50 Hz, idle threads too) of the controller broker, one other broker and
    moto, from before CreateTopics until every partition took a write; stopped with SIGINT, which
    makes py-spy write its file."""
    out.mkdir(parents=True, exist_ok=True)
    lease = store.models.controller_lease.get("controller", consistent_read=True)
    controller = int(lease.holder)
    other = min(b for b in stack.processes if b != controller)
    targets = {f"broker{controller}-controller": stack.processes[controller].pid,
               f"broker{other}": stack.processes[other].pid}
    if stack.moto is not None and stack.moto.pid > 0:
        targets["moto"] = stack.moto.pid
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return [subprocess.Popen([py_spy, "record", "-r", "50", "-f", "raw", "--idle", "-p", str(pid),
                              "-o", str(out / f"{name}.txt")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name, pid in targets.items()]


def stop_profilers(profilers: list[subprocess.Popen]) -> None:
    for profiler in profilers:
        profiler.send_signal(signal.SIGINT)
    for profiler in profilers:
        try:
            profiler.wait(timeout=60)
        except subprocess.TimeoutExpired:
            profiler.kill()


def run_case(partitions: int, profile: str, idle_s: float, directory: Path, kill: str | None,
             settle_s: float = 3.0, py_spy_dir: Path | None = None) -> dict[str, Any]:
    overrides = dict(PROFILES[profile])
    if partitions * 3 // BROKERS > 4000:
        # floe.max.replicas.per.broker (default 4,000) would refuse the topic with POLICY_VIOLATION.
        overrides["floe.max.replicas.per.broker"] = str(partitions * 3 // BROKERS)
    session_timeout_ms = int(overrides.get("broker.session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS))
    stack = LocalStack(directory=directory, brokers=BROKERS, overrides=overrides)
    stack.start()
    try:
        store = MetadataStore(stack.aws)
        time.sleep(2)
        rss_before = {b: rss_kib(p.pid) for b, p in stack.processes.items()}
        idle_before = idle_cpu_percent(stack, idle_s)
        profilers = start_profilers(stack, store, py_spy_dir) if py_spy_dir is not None else []
        if profilers:
            time.sleep(1)  # py-spy attached
        start = time.monotonic()
        try:
            create_topic(stack, store, partitions)
            created_s = time.monotonic() - start
            prober = write_probe(stack, partitions)
            asyncio.run(prober.run(start, give_up_after_s=max(120, partitions / 50)))
            usable_s = time.monotonic() - start
        finally:
            stop_profilers(profilers)
        if prober.pending:
            raise RuntimeError(f"{len(prober.pending)} partitions never accepted a write after creation; "
                               f"answers {dict(prober.answers)}")
        time.sleep(settle_s)  # let followers catch up the probe writes (and the checkpoints they cause)
        idle_after = idle_cpu_percent(stack, idle_s)
        rss_after = {b: rss_kib(p.pid) for b, p in stack.processes.items()}
        replicas_per_broker = partitions * 3 / BROKERS
        result: dict[str, Any] = {
            "partitions": partitions,
            "create_request_s": round(created_s, 3),
            "create_until_writable_s": round(usable_s, 3),
            "idle_cpu_percent_no_topic": idle_before,
            "idle_cpu_percent": idle_after,
            "rss_kib_no_topic": rss_before,
            "rss_kib": rss_after,
            "rss_kib_per_replica": {b: round((rss_after[b] - rss_before[b]) / replicas_per_broker, 1)
                                    for b in rss_after},
            "load_average": load_average(),
            # How many partitions first took a write in each second after CreateTopics was sent, and the
            # prober's answers (a partition whose write waited for a request's timeout shows as a burst).
            "create_accepted_by_second": {str(second): count for second, count in sorted(
                Counter(int(t) for t in prober.accepted_after_s.values()).items())},
            "create_answers": dict(prober.answers),
        }
        if kill is not None:
            result["failover"] = measure_failover(stack, store, partitions, session_timeout_ms, kill)
        return result
    finally:
        stack.stop(save_state=False)


def measure_failover(stack: LocalStack, store: MetadataStore, partitions: int,
                     session_timeout_ms: int, kill: str) -> dict[str, Any]:
    """SIGKILL the controller (``kill`` "controller") or the broker leading the most partitions among
    the others ("other"), and time each partition's first acks=all write after it."""
    states = store.get_partitions(TOPIC)
    led: dict[int, int] = {b: 0 for b in stack.processes}
    for state in states:
        led[state.leader] = led.get(state.leader, 0) + 1
    lease = store.models.controller_lease.get("controller", consistent_read=True)
    controller = int(lease.holder)
    if kill == "controller":
        victim = controller
    else:
        victim = max(sorted(b for b in stack.processes if b != controller), key=lambda b: led[b])
    start = time.monotonic()
    stack.kill_broker(victim, signal.SIGKILL)
    prober = write_probe(stack, partitions)
    asyncio.run(prober.run(start, give_up_after_s=max(120, 20 * session_timeout_ms / 1000)))
    session_s = session_timeout_ms / 1000
    times = list(prober.accepted_after_s.values())
    ratios = [t / session_s for t in times]
    return {
        "kill": kill,
        "killed_broker": victim,
        "killed_was_controller": controller == victim,
        "partitions_led_by_killed": led[victim],
        "never_accepted": len(prober.pending),
        "p50_x_session": round(percentile(ratios, 0.5), 3) if ratios else None,
        "p99_x_session": round(percentile(ratios, 0.99), 3) if ratios else None,
        "max_x_session": round(max(ratios), 3) if ratios else None,
        "max_s": round(max(times), 3) if times else None,
        "answers": dict(prober.answers),
        "not_leader_answers_naming_the_new_leader": prober.hinted_leaders,
        # How many partitions first took a write in each second after the kill (the failover's timeline).
        "accepted_by_second": {str(second): count for second, count in sorted(
            Counter(int(t) for t in times).items())},
        "load_average": load_average(),
    }


def summarize(runs: list[dict[str, Any]], kill: str | None) -> dict[str, Any]:
    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 3)

    summary: dict[str, Any] = {
        "partitions": runs[0]["partitions"],
        "kill": kill,
        "create_until_writable_s": median("create_until_writable_s"),
        "idle_cpu_percent_max_broker": round(statistics.median(max(r["idle_cpu_percent"].values()) for r in runs), 2),
        # The same brokers before the topic existed: the fixed cost (DynamoDB polls), and the load's share.
        "idle_cpu_percent_no_topic_max_broker": round(statistics.median(
            max(r["idle_cpu_percent_no_topic"].values()) for r in runs), 2),
        "rss_kib_per_replica": round(statistics.median(
            statistics.median(r["rss_kib_per_replica"].values()) for r in runs), 1),
    }
    failovers = [r["failover"] for r in runs if "failover" in r]
    if failovers:
        for key in ("p50_x_session", "p99_x_session", "max_x_session"):
            summary[f"failover_{key}"] = round(statistics.median(f[key] for f in failovers if f[key] is not None), 3)
        summary["failover_never_accepted"] = max(f["never_accepted"] for f in failovers)
        summary["failover_timeouts"] = max(f["answers"].get("request_timed_out", 0) for f in failovers)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="3,100,1000")
    parser.add_argument("--failover-at", default="3,1000", help="partition counts whose case also kills a leader")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--kill", default="controller,other",
                        help="which broker each failover case kills: controller (the lease holder), other (the "
                             "broker leading the most partitions among the rest); each a case of its own")
    parser.add_argument("--settle-s", type=float, default=3.0,
                        help="wait after the creation probes before the idle window (a high-watermark checkpoint "
                             "of every replica falls within replica.high.watermark.checkpoint.interval.ms)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="defaults")
    parser.add_argument("--keep-logs", type=Path, default=None,
                        help="copy each case's broker and moto logs under this directory")
    parser.add_argument("--py-spy", type=Path, default=None,
                        help="profile the controller broker, another broker and moto with py-spy during each "
                             "creation (raw samples, 50 Hz, with idle threads) into this directory")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "results" / "scale_bench.json")
    args = parser.parse_args()
    counts = [int(x) for x in args.partitions.split(",")]
    failover_at = {int(x) for x in args.failover_at.split(",") if x}
    session_timeout_ms = int(PROFILES[args.profile].get("broker.session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS))
    results: dict[str, Any] = {"machine": machine_info(), "profile": args.profile,
                               "overrides": PROFILES[args.profile], "session_timeout_ms": session_timeout_ms,
                               "idle_s": args.idle_s, "settle_s": args.settle_s,
                               "load_average_at_start": load_average(), "runs": {}, "summary": [], "failures": []}
    kills: list[str | None] = [k for k in args.kill.split(",") if k]
    if any(k not in ("controller", "other") for k in kills):
        parser.error(f"--kill takes controller and/or other, got {args.kill!r}")
    for count in counts:
        for kill in (kills if count in failover_at else [None]):
            key = f"{count}" if kill is None else f"{count}-kill-{kill}"
            runs = []
            for run in range(args.runs):
                directory = Path(tempfile.mkdtemp(prefix="floe-scale-"))
                try:
                    outcome = run_case(count, args.profile, args.idle_s, directory, kill, args.settle_s,
                                       None if args.py_spy is None else args.py_spy / f"{key}-run{run + 1}")
                except Exception as exc:  # recorded, with the brokers' logs kept, and the other cases still run
                    print(json.dumps({"partitions": count, "kill": kill, "failed": repr(exc),
                                      "logs": str(directory / "logs"), "load_average": load_average()}), flush=True)
                    results["failures"].append({"partitions": count, "kill": kill, "error": repr(exc),
                                                "load_average": load_average()})
                    continue
                if args.keep_logs is not None:
                    shutil.copytree(directory / "logs", args.keep_logs / f"{key}-run{run + 1}", dirs_exist_ok=True)
                shutil.rmtree(directory, ignore_errors=True)
                print(json.dumps(outcome), flush=True)
                runs.append(outcome)
                if run == 0 and count >= 10_000 and outcome["create_until_writable_s"] > 120:
                    break  # one run is enough to show it does not scale
            results["runs"][key] = runs
            if runs:
                results["summary"].append(summarize(runs, kill))
    results["load_average_at_end"] = load_average()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results["summary"], session_timeout_ms)


def print_table(summary: list[dict[str, Any]], session_timeout_ms: int) -> None:
    print(f"\nbroker.session.timeout.ms = {session_timeout_ms}; medians over runs")
    header = ("partitions", "kill", "create s", "idle CPU % (max broker)", "same, no topic", "RSS KiB/replica",
              "failover p50/p99/max x session")
    print(" | ".join(header))
    for row in summary:
        failover = "-"
        if "failover_max_x_session" in row:
            failover = (f"{row['failover_p50_x_session']}/{row['failover_p99_x_session']}/"
                        f"{row['failover_max_x_session']}")
        print(" | ".join(str(x) for x in (row["partitions"], row["kill"] or "-", row["create_until_writable_s"],
                                           row["idle_cpu_percent_max_broker"],
                                           row["idle_cpu_percent_no_topic_max_broker"], row["rss_kib_per_replica"],
                                           failover)))


if __name__ == "__main__":
    main()
