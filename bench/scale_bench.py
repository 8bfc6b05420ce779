"""Failover, topic creation, idle CPU and memory as the partition count grows (issue 26).

Each case starts a fresh local stack (moto server + three broker processes on loopback), creates
one topic of N partitions with replication factor 3 and min.insync.replicas=2, and measures:

- create: from sending CreateTopics to the controller until every partition's leader
  acknowledges an acks=all write (so every replica is open, every leader knows it leads and
  every follower fetches: the topic is usable, not merely written down in DynamoDB);
- idle CPU: each broker's CPU time (utime + stime from /proc) over ``--idle-s`` seconds with no
  client traffic, as a percentage of one core;
- RSS: each broker's resident set before the topic exists and after, and the difference per
  partition replica it hosts;
- failover: SIGKILL of the broker that leads the most partitions; from the kill, a prober sends
  one-record acks=all Produce requests (up to 100 pending partitions a request) to whichever broker
  the surviving brokers' Metadata answers, or a NOT_LEADER_OR_FOLLOWER answer's KIP-951 hint, name
  as each partition's leader, until every partition has accepted one. The time each partition first accepted a write, as a multiple of
  ``broker.session.timeout.ms``: p50, p99 and max over the partitions (goal max <= 2x). The prober
  also counts the answers it got: NOT_LEADER_OR_FOLLOWER, and REQUEST_TIMED_OUT (the failure mode
  issue 26 reports).

The peer for failover is the physical floor, the session timeout itself: no broker can be replaced
before its session runs out. The peer for creation and idle cost is Floe at a smaller partition
count in the same run, which shows how each figure grows.

    .venv/bin/python bench/scale_bench.py [--partitions 3,100,1000] [--runs 3] [--idle-s 20]
        [--profile defaults|test] [--output bench/results/scale_bench.json]
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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from kio.schema.errors import ErrorCode  # noqa: E402

from bench.machine import machine_info  # noqa: E402
from broker_core.client import BrokerConnection  # noqa: E402
from broker_core.client.errors import BrokerConnectionError  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.metadata.store import MetadataStore  # noqa: E402
from broker_core.protocol.api_keys import ApiKey  # noqa: E402
from broker_core.records import SimpleRecord, build_batch  # noqa: E402

TOPIC = "scale"
BROKERS = 3
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROBE_TIMEOUT_MS = 5000
PROBE_PAUSE_S = 0.05
METADATA_REFRESH_S = 0.2
# Partitions per Produce request of the prober, as a client's request size limit would split them.
PARTITIONS_PER_PROBE = 100


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


class Prober:
    """Sends acks=all one-record writes to each pending partition's leader until each accepted one.

    It learns leaders as a current client does: from Metadata answers of a live broker (asked again
    at most every `METADATA_REFRESH_S` while some partition's leader is unknown or refused), and
    from the new leader a NOT_LEADER_OR_FOLLOWER answer names (KIP-951, Produce v10+).
    """

    def __init__(self, stack: LocalStack, partitions: int) -> None:
        self.stack = stack
        self.pending = set(range(partitions))
        self.accepted_at: dict[int, float] = {}
        self.answers: dict[str, int] = {}
        self.hinted_leaders = 0  # NOT_LEADER_OR_FOLLOWER answers naming a current leader (KIP-951)
        self.leader_of: dict[int, int] = {}
        self._metadata_due = 0.0
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting = asyncio.Lock()  # concurrent probes of one broker share its connection

    async def _connection(self, broker_id: int) -> BrokerConnection | None:
        async with self._connecting:
            return await self._connect(broker_id)

    async def _connect(self, broker_id: int) -> BrokerConnection | None:
        connection = self._connections.get(broker_id)
        if connection is not None and connection.connected:
            return connection
        process = self.stack.processes.get(broker_id)
        if process is None or not process.alive():
            return None
        connection = BrokerConnection(self.stack.host, process.port, request_timeout_s=PROBE_TIMEOUT_MS / 1000 + 5)
        try:
            await connection.connect()
        except BrokerConnectionError:
            return None
        self._connections[broker_id] = connection
        return connection

    async def _refresh_leaders(self) -> None:
        for broker_id, process in sorted(self.stack.processes.items()):
            if not process.alive():
                continue
            connection = await self._connection(broker_id)
            if connection is None:
                continue
            try:
                response = await connection.send(ApiKey.METADATA, {
                    "topics": [{"name": TOPIC, "topic_id": None}], "allow_auto_topic_creation": False,
                    "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})
            except BrokerConnectionError:
                continue
            for topic in response.topics:
                for p in topic.partitions:
                    self.leader_of[p.partition_index] = p.leader_id
            return

    async def _probe(self, broker_id: int, partitions: list[int], start: float) -> None:
        connection = await self._connection(broker_id)
        if connection is None:
            self._count("connection refused", len(partitions))
            self._metadata_due = 0.0
            return
        batch = build_batch([SimpleRecord(value=b"probe")])
        try:
            response = await connection.send(ApiKey.PRODUCE, {
                "transactional_id": None, "acks": -1, "timeout": datetime.timedelta(milliseconds=PROBE_TIMEOUT_MS),
                "topic_data": [{"name": TOPIC, "partition_data": [
                    {"index": p, "records": batch} for p in partitions]}],
            })
        except BrokerConnectionError:
            self._count("connection lost", len(partitions))
            self._metadata_due = 0.0
            return
        now = time.monotonic() - start
        for topic in response.responses:
            for answer in topic.partition_responses:
                code = ErrorCode(answer.error_code)
                self._count(code.name)
                if code == ErrorCode.none:
                    self.pending.discard(answer.index)
                    self.accepted_at.setdefault(answer.index, now)
                    continue
                hint = getattr(getattr(answer, "current_leader", None), "leader_id", -1)
                if code == ErrorCode.not_leader_or_follower and hint >= 0:
                    self.hinted_leaders += 1
                    self.leader_of[answer.index] = hint
                else:
                    self._metadata_due = min(self._metadata_due, time.monotonic() + METADATA_REFRESH_S)

    def _count(self, what: str, n: int = 1) -> None:
        self.answers[what] = self.answers.get(what, 0) + n

    async def run(self, start: float, deadline_s: float) -> None:
        # Each probe request is a task of its own and a partition is in one request at a time: an
        # acks=all write waiting (up to PROBE_TIMEOUT_MS) for its ISR to shrink must not hold back
        # the Metadata refresh and the writes to partitions whose new leader is known (before, one
        # slow request delayed every other partition by up to the probe timeout).
        in_flight: set[int] = set()
        tasks: set[asyncio.Task] = set()

        def done(task: asyncio.Task, partitions: list[int]) -> None:
            tasks.discard(task)
            in_flight.difference_update(partitions)

        try:
            while self.pending and time.monotonic() - start < deadline_s:
                if time.monotonic() >= self._metadata_due:
                    self._metadata_due = float("inf")
                    await self._refresh_leaders()
                by_leader: dict[int, list[int]] = {}
                for p in sorted(self.pending - in_flight):
                    by_leader.setdefault(self.leader_of.get(p, -1), []).append(p)
                unknown = by_leader.pop(-1, [])
                if unknown:
                    self._count("no leader", len(unknown))
                    self._metadata_due = min(self._metadata_due, time.monotonic() + METADATA_REFRESH_S)
                for b, ps in by_leader.items():
                    for i in range(0, len(ps), PARTITIONS_PER_PROBE):
                        chunk = ps[i:i + PARTITIONS_PER_PROBE]
                        in_flight.update(chunk)
                        task = asyncio.create_task(self._probe(b, chunk, start))
                        tasks.add(task)
                        task.add_done_callback(lambda t, chunk=chunk: done(t, chunk))
                await asyncio.sleep(PROBE_PAUSE_S)
        finally:
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for connection in self._connections.values():
                await connection.close()


# one case ----------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def create_topic(stack: LocalStack, store: MetadataStore, partitions: int) -> None:
    """CreateTopics sent to the controller (the lease holder), as admin clients do."""
    lease = store.models.controller_lease.get("controller", consistent_read=True)

    async def create() -> None:
        process = stack.processes[int(lease.holder)]
        connection = BrokerConnection(stack.host, process.port, request_timeout_s=120)
        await connection.connect()
        try:
            response = await connection.send(ApiKey.CREATE_TOPICS, {
                "topics": [{"name": TOPIC, "num_partitions": partitions, "replication_factor": 3,
                            "assignments": [], "configs": [{"name": "min.insync.replicas", "value": "2"}]}],
                "timeout": datetime.timedelta(seconds=60), "validate_only": False})
        finally:
            await connection.close()
        for result in response.topics:
            if result.error_code != ErrorCode.none:
                raise RuntimeError(f"CreateTopics: {ErrorCode(result.error_code).name} {result.error_message}")

    asyncio.run(create())


def run_case(partitions: int, profile: str, idle_s: float, directory: Path, failover: bool) -> dict[str, Any]:
    overrides = PROFILES[profile]
    session_timeout_ms = int(overrides.get("broker.session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS))
    stack = LocalStack(directory=directory, brokers=BROKERS, overrides=overrides)
    stack.start()
    try:
        store = MetadataStore(stack.aws)
        time.sleep(2)
        rss_before = {b: rss_kib(p.pid) for b, p in stack.processes.items()}
        idle_before = idle_cpu_percent(stack, idle_s)
        start = time.monotonic()
        create_topic(stack, store, partitions)
        created_s = time.monotonic() - start
        prober = Prober(stack, partitions)
        asyncio.run(prober.run(start, deadline_s=120))
        usable_s = time.monotonic() - start
        if prober.pending:
            raise RuntimeError(f"{len(prober.pending)} partitions never accepted a write after creation; "
                               f"answers {prober.answers}")
        time.sleep(3)  # let followers catch up the probe writes
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
        }
        if failover:
            result["failover"] = measure_failover(stack, store, partitions, session_timeout_ms)
        return result
    finally:
        stack.stop(save_state=False)


def measure_failover(stack: LocalStack, store: MetadataStore, partitions: int,
                     session_timeout_ms: int) -> dict[str, Any]:
    states = store.get_partitions(TOPIC)
    led: dict[int, int] = {}
    for state in states:
        led[state.leader] = led.get(state.leader, 0) + 1
    victim = max(sorted(led), key=lambda b: led[b])
    lease = store.models.controller_lease.get("controller", consistent_read=True)
    start = time.monotonic()
    stack.kill_broker(victim, signal.SIGKILL)
    prober = Prober(stack, partitions)
    asyncio.run(prober.run(start, deadline_s=max(120, 20 * session_timeout_ms / 1000)))
    session_s = session_timeout_ms / 1000
    times = list(prober.accepted_at.values())
    ratios = [t / session_s for t in times]
    return {
        "killed_broker": victim,
        "killed_was_controller": int(lease.holder) == victim,
        "partitions_led_by_killed": led[victim],
        "never_accepted": len(prober.pending),
        "p50_x_session": round(percentile(ratios, 0.5), 3) if ratios else None,
        "p99_x_session": round(percentile(ratios, 0.99), 3) if ratios else None,
        "max_x_session": round(max(ratios), 3) if ratios else None,
        "max_s": round(max(times), 3) if times else None,
        "answers": prober.answers,
        "not_leader_answers_naming_the_new_leader": prober.hinted_leaders,
        "load_average": load_average(),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 3)

    summary: dict[str, Any] = {
        "partitions": runs[0]["partitions"],
        "create_until_writable_s": median("create_until_writable_s"),
        "idle_cpu_percent_max_broker": round(statistics.median(max(r["idle_cpu_percent"].values()) for r in runs), 2),
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
    parser.add_argument("--profile", choices=sorted(PROFILES), default="defaults")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "results" / "scale_bench.json")
    args = parser.parse_args()
    counts = [int(x) for x in args.partitions.split(",")]
    failover_at = {int(x) for x in args.failover_at.split(",") if x}
    session_timeout_ms = int(PROFILES[args.profile].get("broker.session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS))
    results: dict[str, Any] = {"machine": machine_info(), "profile": args.profile,
                               "overrides": PROFILES[args.profile], "session_timeout_ms": session_timeout_ms,
                               "load_average_at_start": load_average(), "runs": {}, "summary": [], "failures": []}
    for count in counts:
        runs = []
        for run in range(args.runs):
            directory = Path(tempfile.mkdtemp(prefix="floe-scale-"))
            try:
                outcome = run_case(count, args.profile, args.idle_s, directory, count in failover_at)
            except Exception as exc:  # recorded, with the brokers' logs kept, and the other cases still run
                print(json.dumps({"partitions": count, "failed": repr(exc), "logs": str(directory / "logs"),
                                  "load_average": load_average()}), flush=True)
                results["failures"].append({"partitions": count, "error": repr(exc), "load_average": load_average()})
                continue
            shutil.rmtree(directory, ignore_errors=True)
            print(json.dumps(outcome), flush=True)
            runs.append(outcome)
            if run == 0 and count >= 10_000 and outcome["create_until_writable_s"] > 120:
                break  # one run is enough to show it does not scale
        results["runs"][str(count)] = runs
        if runs:
            results["summary"].append(summarize(runs))
    results["load_average_at_end"] = load_average()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results["summary"], session_timeout_ms)


def print_table(summary: list[dict[str, Any]], session_timeout_ms: int) -> None:
    print(f"\nbroker.session.timeout.ms = {session_timeout_ms}; medians over runs")
    header = ("partitions", "create s", "idle CPU % (max broker)", "RSS KiB/replica",
              "failover p50/p99/max x session")
    print(" | ".join(header))
    for row in summary:
        failover = "-"
        if "failover_max_x_session" in row:
            failover = (f"{row['failover_p50_x_session']}/{row['failover_p99_x_session']}/"
                        f"{row['failover_max_x_session']}")
        print(" | ".join(str(x) for x in (row["partitions"], row["create_until_writable_s"],
                                           row["idle_cpu_percent_max_broker"], row["rss_kib_per_replica"], failover)))


if __name__ == "__main__":
    main()
