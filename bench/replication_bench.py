"""Replication cost and failover time on a local three-broker stack, measured in the same run.

Replicated throughput: one confluent-kafka Producer (one client thread) sends the same number of
same-sized records to a topic with replication factor 3 and min.insync.replicas=2 with acks=all, and
to a topic with replication factor 1 with acks=1; the ratio of the median rates (RF 3 / RF 1) is
what synchronous replication costs. RF 3 is also written with acks=1 (asynchronous replication,
Kafka's other 2014 figure). Each timed case writes to a six-partition topic created for it and
deleted after it (as in Kafka's 2014 "2 million writes per second" benchmark: 100-byte records,
synchronous-replication ratio 0.51), so that no case pays for the page cache an earlier one filled;
the runs rotate which case goes first, and each case starts and ends with idle brokers so that it is
charged its own followers' CPU. The client is the same in all: linger.ms=5, no idempotence (it would
force acks=all), no compression. Two record sizes: 100 bytes, where one Python client thread sets
the pace, and 1000 bytes, where each record gives the brokers ten times the bytes to copy. To tell
what sets the pace, each run also times the client's own ceiling (the same produce loop with no
broker to send to), and each case records the CPUs no process used while it ran and the client's
own CPU per record. Throughput is measured under each broker timing profile (below): Kafka's
defaults are what a broker runs unless told otherwise; the test stack's faster metadata polling
costs a few tenths of a CPU on this shared machine.

Failover time: an idempotent acks=all librdkafka producer writes one record every 5 ms to one
partition of an RF 3 topic; the partition's leader is SIGKILLed. From the kill the bench times the
election (the partition's row in DynamoDB names another leader), the first acks=all write the new
leader acknowledges (a one-record Produce sent straight to it, repeated until it succeeds: the
failover time, as a multiple of the configured broker.session.timeout.ms), and the delivery report
of the first record the librdkafka producer produced after the kill (end to end, including the
client's own leader discovery). Measured for a leader that is not the controller and, separately,
for a leader that is also the controller (the lease must move first), under two broker timing
profiles: the test stack's (3 s session timeout) and Kafka's defaults (9 s). After each trial the
killed broker is restarted and every replica is back in sync before the next.

The local stack's brokers replicate over loopback, so the machine's TCP congestion control is part
of what RF 3 costs (bench/loopback_tcp.py measures it alone); the JSON records which one was in
force, and ``--tcp-congestion`` runs under another (it sets the system-wide default, so it needs
root, and puts the previous one back after).

    .venv/bin/python bench/replication_bench.py [--sizes 100:1000000,1000:300000] [--runs 3]
        [--failovers 3] [--profiles test,defaults] [--skip-throughput] [--tcp-congestion cubic]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import psutil  # noqa: E402
from confluent_kafka import KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402

from bench.machine import machine_info, result_header, system_tcp_congestion_control, write_result  # noqa: E402
from broker_core.client import BrokerConnection, ClientError  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.metadata.controller import ControllerLease  # noqa: E402
from broker_core.metadata.store import MetadataStore  # noqa: E402
from broker_core.protocol.api_keys import ApiKey  # noqa: E402
from broker_core.records import SimpleRecord, build_batch  # noqa: E402

FAILOVER_RECORD_BYTES = 100
THROUGHPUT_PARTITIONS = 6
THROUGHPUT_PRODUCER = {"linger.ms": 5, "enable.idempotence": False, "compression.type": "none"}
CEILING_RECORDS = 300_000
FAILOVER_PARTITIONS = 3
FAILOVER_INTERVAL_S = 0.005
BROKERS = 3


class BenchError(RuntimeError):
    """The stack did not do what a measurement needs (e.g. no new leader was elected)."""


def create_topic(admin: AdminClient, name: str, partitions: int, replication: int, configs: dict[str, str]) -> None:
    admin.create_topics([NewTopic(name, partitions, replication, config=configs)])[name].result(timeout=60)


def wait_until(what: str, condition: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: not reached within {timeout_s:.0f}s")
        time.sleep(0.05)


def in_sync(store: MetadataStore, topic: str) -> bool:
    return all(p.leader >= 0 and len(p.isr) == len(p.replicas) for p in store.get_partitions(topic))


# throughput --------------------------------------------------------------------------------------


def broker_cpu_seconds(stack: LocalStack) -> float:
    """User plus system CPU time the broker processes have used so far."""
    return sum(broker_cpu_by_id(stack).values())


def broker_cpu_by_id(stack: LocalStack) -> dict[int, float]:
    """User plus system CPU seconds so far, by broker id."""
    return {broker_id: sum(psutil.Process(broker.pid).cpu_times()[:2]) for broker_id, broker in stack.processes.items()}


def produce_all(bootstrap: str, topic: str, acks: str, records: int, value_bytes: int,
                usage: dict[str, float] | None = None) -> float:
    """Send ``records`` values of ``value_bytes`` bytes, wait for every delivery report; returns records per second.

    With ``usage``, also fills in how the timed part used the machine: ``idle_cpus``, the CPUs no
    process used (idle plus I/O wait, from the system-wide counters), and ``client_cpus``, what this
    process (the Python thread and librdkafka's threads) used.
    """
    errors: list[str] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            errors.append(str(error))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, **THROUGHPUT_PRODUCER})
    producer.list_topics(topic, timeout=30)  # connections and metadata before the clock starts
    value = os.urandom(value_bytes)
    machine_before, client_before = psutil.cpu_times(), psutil.Process().cpu_times()
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(300) != 0:
        raise BenchError(f"{topic}: records still undelivered after 300 s")
    elapsed = time.perf_counter() - start
    machine_after, client_after = psutil.cpu_times(), psutil.Process().cpu_times()
    if errors:
        raise BenchError(f"{topic}: {len(errors)} deliveries failed, e.g. {errors[0]}")
    if usage is not None:
        idle = (machine_after.idle + machine_after.iowait) - (machine_before.idle + machine_before.iowait)
        client = (client_after.user + client_after.system) - (client_before.user + client_before.system)
        usage.update(idle_cpus=idle / elapsed, client_cpus=client / elapsed)
    return records / elapsed


def client_ceiling(records: int, value_bytes: int) -> float:
    """The same produce loop with nothing to send to (a bootstrap address no broker listens on): how
    fast the one client thread can hand records to librdkafka at all. A broker-side rate close to it
    means the client, not the brokers, set the pace."""
    producer = Producer({"bootstrap.servers": "127.0.0.1:9", "queue.buffering.max.messages": records + 1,
                         "queue.buffering.max.kbytes": 2**21, "message.timeout.ms": 600_000, **THROUGHPUT_PRODUCER})
    value = os.urandom(value_bytes)
    start = time.perf_counter()
    for _ in range(records):
        producer.produce("bench-ceiling", value=value)
        producer.poll(0)
    elapsed = time.perf_counter() - start
    producer.purge()
    return records / elapsed


def idle_broker_cpus(stack: LocalStack, window_s: float = 3.0) -> float:
    """CPUs the brokers use with nothing to do (heartbeats, metadata polls, controller duty)."""
    before = broker_cpu_seconds(stack)
    time.sleep(window_s)
    return (broker_cpu_seconds(stack) - before) / window_s


def wait_for_quiet_brokers(stack: LocalStack, idle_cpus: float, busy_cpus: float = 0.25, window_s: float = 1.0,
                           timeout_s: float = 120.0) -> None:
    """Wait until the brokers together use less than ``busy_cpus`` CPUs more than ``idle_cpus`` (what
    they use with nothing to do) over a ``window_s`` window.

    After an acks=1 run on the RF 3 topic the followers are still fetching what the leader took;
    without this wait the next case (whichever the rotation puts there) would run against that
    catch-up and be charged its CPU.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        before = broker_cpu_by_id(stack)
        time.sleep(window_s)
        after = broker_cpu_by_id(stack)
        used = {broker_id: round((after[broker_id] - before[broker_id]) / window_s, 2) for broker_id in after}
        if sum(used.values()) < idle_cpus + busy_cpus:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"the brokers were still busy {timeout_s:.0f} s after a run: CPUs by broker {used}, "
                             f"idle {idle_cpus:.2f}")


_TOPIC_NUMBERS = itertools.count()


def timed_case(stack: LocalStack, store: MetadataStore, admin: AdminClient, idle_cpus: float, prefix: str,
               replication: int, acks: str, records: int, value_bytes: int) -> tuple[float, float, dict[str, float]]:
    """(records per second, broker CPU seconds, machine use as `produce_all` measures it) of one
    case, on a topic created for it and deleted after."""
    topic = f"{prefix}-{next(_TOPIC_NUMBERS)}"
    create_topic(admin, topic, THROUGHPUT_PARTITIONS, replication,
                 {"min.insync.replicas": "2"} if replication == 3 else {})
    wait_until(f"{topic} in sync", lambda: in_sync(store, topic))
    wait_for_quiet_brokers(stack, idle_cpus)
    cpu_before = broker_cpu_seconds(stack)
    usage: dict[str, float] = {}
    rate = produce_all(stack.bootstrap_servers, topic, acks, records, value_bytes, usage)
    wait_for_quiet_brokers(stack, idle_cpus)  # so the followers' catch-up after acks=1 counts too
    cpu = broker_cpu_seconds(stack) - cpu_before
    admin.delete_topics([topic])[topic].result(timeout=60)
    return rate, cpu, usage


def measure_throughput(stack: LocalStack, store: MetadataStore, cases: list[tuple[int, int]],
                       runs: int) -> list[dict[str, Any]]:
    """For each (value bytes, records per run): RF 1 / acks=1 against RF 3 / acks=all, alternating.

    Every timed case writes to a topic created for it and deleted after it. Kept, the topics of
    earlier cases would grow the page cache by gigabytes, and on the virtual machines this was
    measured on, once the page cache had grown by a few GB every further byte written cost the
    brokers about three times the CPU (RF 3, acks=all: 12-15 instead of 4.6 CPU-seconds per
    million 1000-byte records): later cases, RF 3 most, would be charged for what earlier ones wrote.
    """
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    idle_cpus = idle_broker_cpus(stack)
    results = []
    for value_bytes, records in cases:
        cases_ = [("rf1", 1, "1"), ("rf3", 3, "all"), ("rf3_acks1", 3, "1")]
        for name, replication, acks in cases_:  # warm-up: code paths hot
            timed_case(stack, store, admin, idle_cpus, f"bench-{name}-{value_bytes}b", replication, acks,
                       max(records // 10, 1000), value_bytes)
        rates: dict[str, list[float]] = {name: [] for name, _, _ in cases_} | {"client": []}
        cpu: dict[str, list[float]] = {name: [] for name, _, _ in cases_}  # broker CPU s per million records
        idle: dict[str, list[float]] = {name: [] for name, _, _ in cases_}  # CPUs no process used
        client_cost: dict[str, list[float]] = {name: [] for name, _, _ in cases_}  # client CPU us per record
        for run in range(runs):
            for name, replication, acks in cases_[run % 3:] + cases_[:run % 3]:
                rate, cpu_s, usage = timed_case(stack, store, admin, idle_cpus, f"bench-{name}-{value_bytes}b",
                                                replication, acks, records, value_bytes)
                rates[name].append(round(rate))
                cpu[name].append(round(cpu_s / records * 1e6, 2))
                idle[name].append(round(usage["idle_cpus"], 2))
                client_cost[name].append(round(usage["client_cpus"] / rate * 1e6, 2))
            rates["client"].append(round(client_ceiling(min(records, CEILING_RECORDS), value_bytes)))
            print(f"  {value_bytes} B run {run + 1}: rf1 {rates['rf1'][-1]:9d}  rf3 {rates['rf3'][-1]:9d}  "
                  f"rf3 acks=1 {rates['rf3_acks1'][-1]:9d}  client ceiling {rates['client'][-1]:9d} records/s; "
                  f"broker CPU s per million records: rf1 {cpu['rf1'][-1]:.1f}, rf3 {cpu['rf3'][-1]:.1f}, "
                  f"rf3 acks=1 {cpu['rf3_acks1'][-1]:.1f}; idle CPUs: rf1 {idle['rf1'][-1]:.2f}, "
                  f"rf3 {idle['rf3'][-1]:.2f}; client CPU us per record: rf1 {client_cost['rf1'][-1]:.2f}, "
                  f"rf3 {client_cost['rf3'][-1]:.2f}", flush=True)
        rf1, rf3 = statistics.median(rates["rf1"]), statistics.median(rates["rf3"])
        rf3_acks1 = statistics.median(rates["rf3_acks1"])
        ceiling = statistics.median(rates["client"])
        results.append({
            "record_value_bytes": value_bytes,
            "records_per_run": records,
            "idle_broker_cpus": round(idle_cpus, 3),
            "rf1_acks1_records_per_s": rates["rf1"],
            "rf3_acksall_records_per_s": rates["rf3"],
            "rf3_acks1_records_per_s": rates["rf3_acks1"],
            "client_ceiling_records_per_s": rates["client"],
            "rf1_median_records_per_s": rf1,
            "rf3_median_records_per_s": rf3,
            "rf3_acks1_median_records_per_s": rf3_acks1,
            "client_ceiling_median_records_per_s": ceiling,
            "rf1_median_mib_per_s": round(rf1 * value_bytes / 2**20, 1),
            "rf3_median_mib_per_s": round(rf3 * value_bytes / 2**20, 1),
            "rf1_share_of_client_ceiling": round(rf1 / ceiling, 3),
            "rf1_broker_cpu_s_per_million_records": cpu["rf1"],
            "rf3_broker_cpu_s_per_million_records": cpu["rf3"],
            "rf3_acks1_broker_cpu_s_per_million_records": cpu["rf3_acks1"],
            "broker_cpu_cost_rf3_over_rf1": round(statistics.median(cpu["rf3"]) / statistics.median(cpu["rf1"]), 3),
            "rf1_idle_cpus": idle["rf1"],
            "rf3_idle_cpus": idle["rf3"],
            "rf3_acks1_idle_cpus": idle["rf3_acks1"],
            "rf1_client_cpu_us_per_record": client_cost["rf1"],
            "rf3_client_cpu_us_per_record": client_cost["rf3"],
            "rf3_acks1_client_cpu_us_per_record": client_cost["rf3_acks1"],
            "per_run_ratios": [round(b / a, 3) for a, b in zip(rates["rf1"], rates["rf3"], strict=True)],
            "ratio": round(rf3 / rf1, 3),
            "async_ratio": round(rf3_acks1 / rf1, 3),
        })
    return results


# failover ----------------------------------------------------------------------------------------


class PacedProducer:
    """An idempotent acks=all producer writing one record every FAILOVER_INTERVAL_S to one partition,
    noting when each record was produced and when its delivery report arrived (monotonic clock)."""

    def __init__(self, bootstrap: str, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self.produced_at: list[float] = []  # by record number; appended by the producing thread only
        self.acked_at: dict[int, float] = {}
        self.failed: list[str] = []
        self._stopping = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                   "linger.ms": 0, "message.timeout.ms": 120_000})
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        number = int(message.value().split(b"-", 1)[0])
        if error is None:
            self.acked_at[number] = time.monotonic()
        else:
            self.failed.append(str(error))

    def _run(self) -> None:
        number = 0
        while not self._stopping.is_set():
            value = f"{number}-".encode().ljust(FAILOVER_RECORD_BYTES, b"x")
            self.produced_at.append(time.monotonic())
            self._producer.produce(self.topic, value=value, partition=self.partition, on_delivery=self._delivered)
            number += 1
            deadline = time.monotonic() + FAILOVER_INTERVAL_S
            while time.monotonic() < deadline:
                self._producer.poll(max(0.0, deadline - time.monotonic()))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._producer.flush(120)

    def first_record_produced_after(self, moment: float) -> int | None:
        times = self.produced_at[:]
        return next((n for n, at in enumerate(times) if at > moment), None)


def produce_once(host: str, port: int, topic: str, partition: int, timeout_ms: int) -> ErrorCode:
    """One acks=all Produce of one record straight to this broker; returns its error code."""
    async def produce() -> ErrorCode:
        connection = BrokerConnection(host, port, request_timeout_s=timeout_ms / 1000 + 5)
        await connection.connect()
        try:
            response = await connection.send(ApiKey.PRODUCE, {
                "transactional_id": None, "acks": -1, "timeout": datetime.timedelta(milliseconds=timeout_ms),
                "topic_data": [{"name": topic, "partition_data": [
                    {"index": partition, "records": build_batch([SimpleRecord(value=b"failover-probe")])}]}],
            })
        finally:
            await connection.close()
        return ErrorCode(response.responses[0].partition_responses[0].error_code)

    try:
        return asyncio.run(produce())
    except ClientError:
        return ErrorCode.network_exception


def failover_trial(stack: LocalStack, store: MetadataStore, topic: str, with_controller: bool,
                   session_s: float) -> dict[str, Any]:
    """Kill one partition's leader and time three things from the kill: the election (the partition's
    row in DynamoDB names another leader), the first acks=all write the new leader acknowledges (a
    one-record Produce sent straight to it, repeated until it succeeds), and the delivery report of
    the first record the paced librdkafka producer produced after the kill. Then restart the broker
    and wait until every replica is back in sync."""
    controller = ControllerLease(store).current().holder
    chosen = [p for p in store.get_partitions(topic) if (p.leader == controller) == with_controller]
    if not chosen:
        raise BenchError(f"no partition of {topic} is led {'by' if with_controller else 'outside'} the controller")
    partition = chosen[0]
    producer = PacedProducer(stack.bootstrap_servers, topic, partition.partition)
    producer.start()
    new_leader = -1
    elected_at = ready_at = acked_at = None
    try:
        wait_until("steady acknowledgements", lambda: len(producer.acked_at) >= 200)
        killed_at = time.monotonic()
        stack.kill_broker(partition.leader, signal.SIGKILL)
        deadline = killed_at + 10 * session_s
        while acked_at is None or ready_at is None:
            if time.monotonic() > deadline:
                raise BenchError(f"failover not complete {10 * session_s:.0f}s after the kill")
            if elected_at is None:
                new_leader = store.get_partition(topic, partition.partition).leader
                if new_leader not in (-1, partition.leader):
                    elected_at = time.monotonic()
            elif ready_at is None:
                host, port = stack.host, stack.processes[new_leader].port
                if produce_once(host, port, topic, partition.partition, timeout_ms=2000) == ErrorCode.none:
                    ready_at = time.monotonic()
            first = producer.first_record_produced_after(killed_at)
            if acked_at is None and first is not None and first in producer.acked_at:
                acked_at = producer.acked_at[first]
            time.sleep(0.01)
    finally:
        producer.stop()
    stack.restart_broker(partition.leader)
    wait_until("replicas back in sync", lambda: in_sync(store, topic))
    return {
        "killed": partition.leader, "was_controller": controller == partition.leader, "new_leader": new_leader,
        "elected_after_s": round(elected_at - killed_at, 3),
        "new_leader_acked_after_s": round(ready_at - killed_at, 3),
        "client_acked_after_s": round(acked_at - killed_at, 3),
        "session_timeouts": round((ready_at - killed_at) / session_s, 3),
        "client_session_timeouts": round((acked_at - killed_at) / session_s, 3),
    }


def measure_failover(stack: LocalStack, store: MetadataStore, trials: int, session_s: float) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    topic = "bench-failover"
    create_topic(admin, topic, FAILOVER_PARTITIONS, 3, {"min.insync.replicas": "2"})
    wait_until("failover topic in sync", lambda: in_sync(store, topic))
    result: dict[str, Any] = {"record_interval_ms": FAILOVER_INTERVAL_S * 1000}
    for name, with_controller in (("leader", False), ("leader_and_controller", True)):
        outcomes = []
        for trial in range(trials):
            outcome = failover_trial(stack, store, topic, with_controller, session_s)
            outcomes.append(outcome)
            print(f"  {name} trial {trial + 1}: broker {outcome['killed']} killed; broker {outcome['new_leader']} "
                  f"elected after {outcome['elected_after_s']:.2f}s, acknowledged a write after "
                  f"{outcome['new_leader_acked_after_s']:.2f}s = {outcome['session_timeouts']:.2f}x the session "
                  f"timeout; librdkafka's first ack after {outcome['client_acked_after_s']:.2f}s", flush=True)
        result[name] = {"trials": outcomes} | {
            f"median_{key}": round(statistics.median(o[key] for o in outcomes), 3)
            for key in ("elected_after_s", "new_leader_acked_after_s", "client_acked_after_s",
                        "session_timeouts", "client_session_timeouts")
        }
    result["goal_session_timeouts"] = 1.2
    return result


# Broker timing settings the failover is measured under: the test stack's, and Kafka's defaults.
PROFILES: dict[str, dict[str, str]] = {
    "test": {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
             "metadata.poll.interval.ms": "200"},
    "defaults": {"broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000",
                 "metadata.poll.interval.ms": "500"},
}


def measure(profiles: list[str], cases: list[tuple[int, int]], args: argparse.Namespace) -> tuple[dict, dict]:
    """Throughput and failover results by profile, each profile on a local stack of its own."""
    throughput: dict[str, Any] = {}
    failover: dict[str, Any] = {}
    for profile in profiles:
        overrides = PROFILES[profile]
        with tempfile.TemporaryDirectory(prefix="floe-replication-bench-") as directory:
            stack = LocalStack(directory=Path(directory), brokers=BROKERS, overrides=overrides)
            stack.start()
            try:
                store = MetadataStore(stack.aws)
                if not args.skip_throughput:
                    print(f"throughput (records/s), profile {profile}:", flush=True)
                    throughput[profile] = {
                        "broker_overrides": overrides, "partitions": THROUGHPUT_PARTITIONS,
                        "producer": THROUGHPUT_PRODUCER, "goal": 0.6, "kafka_2014_ratio": 0.51,
                        "kafka_2014_async_ratio": 0.958, "cases": measure_throughput(stack, store, cases, args.runs),
                    }
                if args.failovers <= 0:
                    continue
                print(f"failover, profile {profile} {overrides}:", flush=True)
                session_s = int(overrides["broker.session.timeout.ms"]) / 1000
                failover[profile] = {"broker_overrides": overrides,
                                     **measure_failover(stack, store, args.failovers, session_s)}
            finally:
                stack.stop(save_state=False)
    return throughput, failover


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100:1000000,1000:300000",
                        help="throughput cases as value_bytes:records_per_run, comma separated")
    parser.add_argument("--runs", type=int, default=3, help="throughput runs per topic")
    parser.add_argument("--failovers", type=int, default=3, help="failover trials per case and profile")
    parser.add_argument("--profiles", default="test,defaults", help=f"failover profiles, from {sorted(PROFILES)}")
    parser.add_argument("--skip-throughput", action="store_true", help="measure failover only")
    parser.add_argument("--tcp-congestion", metavar="NAME",
                        help="run under this system-wide TCP congestion control (needs root; restored after)")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "results" / "replication_bench.json")
    args = parser.parse_args()
    profiles = [name.strip() for name in args.profiles.split(",") if name.strip()]
    try:
        cases = [(int(size), int(count)) for size, _, count in (c.partition(":") for c in args.sizes.split(","))]
    except ValueError:
        parser.error(f"--sizes wants value_bytes:records pairs, got {args.sizes!r}")
    unknown = [name for name in profiles if name not in PROFILES]
    if unknown or not profiles:
        parser.error(f"unknown profiles {unknown}; choose from {sorted(PROFILES)}")
    with system_tcp_congestion_control(args.tcp_congestion):
        machine = machine_info()  # read while the run's congestion control is in force
        throughput, failover = measure(profiles, cases, args)
    result = {
        **result_header("replication", machine),
        "brokers": BROKERS,
        "throughput": throughput,
        "failover": failover,
    }
    for profile, measured in throughput.items():
        for case in measured["cases"]:
            print(f"replicated throughput ratio ({profile}), {case['record_value_bytes']} B records: "
                  f"{case['ratio']:.3f} (goal >= 0.6; per run {case['per_run_ratios']}), {case['async_ratio']:.3f} "
                  f"with acks=1; RF 1 ran at {case['rf1_share_of_client_ceiling']:.0%} of the client's own ceiling")
    if throughput:
        congestion = machine["tcp_congestion_control"]
        print(f"TCP congestion control in force: {congestion} (default qdisc {machine['default_qdisc']})" + (
            "" if congestion == "cubic" else
            "; the brokers' AMI keeps Linux's default, cubic, and RF 3's share depends on this setting "
            "(docs/performance.md, Replication): compare with --tcp-congestion cubic"))
    for profile, measured in failover.items():
        print(f"failover ({profile}): {measured['leader']['median_session_timeouts']:.2f}x the session timeout "
              f"(goal <= 1.2; librdkafka resumes at {measured['leader']['median_client_session_timeouts']:.2f}x), "
              f"{measured['leader_and_controller']['median_session_timeouts']:.2f}x when the leader is also the "
              f"controller")
    write_result(args.output, result)
    print(f"wrote {args.output.name}")


if __name__ == "__main__":
    main()
