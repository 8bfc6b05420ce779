"""What the broker's metrics cost: produce throughput with metrics on / off, in one run.

Two one-broker local stacks run side by side: one with metrics on (``metrics.port=0``: every
request timed into Kafka's RequestMetrics histograms, records and bytes counted per topic, lag
sampled, an endpoint served) and one with metrics off (``metrics.port=-1``: the null metrics, nothing
kept, no endpoint). The two sides produce at the same time, each from a confluent-kafka (librdkafka)
producer in a process of its own, starting together: on a shared, loaded machine both then meet the
same neighbours, where one side after the other met whatever load came at its turn (ratios of
0.71..1.02 in trials that way). While they run a scraper process GETs and parses the "on" broker's
endpoint every ``--scrape-interval`` seconds (default 15, Prometheus's usual setting; a scrape costs
the broker about 24 ms of CPU for 2,000 lines, so at 1 s it is a large share of a slow broker's work).

Four workloads (``--workloads`` picks some), because the metrics cost is per request and per
partition append, not per byte:

- **batched**: ``--records`` values of 1000 bytes, acks=1, linger.ms=5 (large requests);
- **small requests**: ``--small-records`` values of 100 bytes, acks=1, linger.ms=0 and at most
  10 records per batch (many small requests: the worst case for per-request costs);
- **fixed requests**: ``--fixed-requests`` identical Produce requests of one 10-record batch (100-byte
  values), acks=1, 16 in flight on one Floe client connection. A librdkafka producer's requests
  grow when it falls behind, so its broker CPU per record moves with the client's speed; these do
  not, so their broker CPU per request is the cleanest figure of what the metrics cost;
- **one-record requests**: the same with one record per request: the smallest Produce request, where
  the metrics' per-request cost weighs most.

Throughput on a shared machine swings with the neighbours' load, so each run also records each
broker process's CPU time per record, read from the kernel's CPU clock of the process (every
thread, nanoseconds: psutil's user + system times move in 10 ms ticks, 5 % of a short run's CPU).
Ratios are on / off for throughput (the goal's figure, >= 0.97) and off / on for CPU per record
(so that both read "1.0 = free, lower = metrics cost more"); medians over ``--runs`` go to
bench/results/metrics_overhead.json.

``--order`` says how the two sides share the machine: ``together`` (both at once, as before; the
side the scheduler favours runs faster *and* spends less CPU per record, because a busier event
loop reads more requests per wake-up, so the two figures are not independent) or ``alternate``
(one side at a time, on/off in even runs and off/on in odd ones, so a drift in the neighbours' load
cancels over pairs of runs) or ``interleaved`` (the default: one producer process drives both sides in
short bursts taken in turn, see `produce_interleaved`). Interleaved, both brokers run pinned to CPU 0
and the producer to CPU 1 (``--no-pin`` leaves them to the scheduler): unpinned, a broker process
keeps its place for the whole bench, next to the producer or not, next to a busy neighbour or
not, and control runs (no difference at all) read one side 5-15 % faster than the other in most
runs. ``--control`` starts both stacks with metrics off: the ratios it prints are what the bench
reads when there is no difference at all (its noise and any bias of its own), to set beside an
on/off run of the same command. Every run meets a new pair of broker processes (both are stopped
and started again between runs, in turn; ``--keep-brokers`` keeps the first pair for the whole
bench), and every second run the two stacks swap roles (`restart_brokers`): a broker process keeps
a speed of its own for its life, and with one pair per bench a control command read one side 1-14 %
slower in every run (bench/results/metrics_overhead_2026-11-27_bisect_control_2.json). Both brokers'
command lines have the same length (`side_settings`: port 0 is given as "00" beside "-1", and the stacks'
directories, which the command line names, are stack-0 and stack-1): the kernel puts a process's
arguments and environment at the top of its stack, so their length moves the alignment of everything
below, which can move a program's speed by a few per cent (Mytkowicz et al., ASPLOS 2009); before, the
"on" broker's command line was 1 byte shorter ("0" against "-1") and the stacks' "on" / "off"
directories, named twice in it, moved it by 2 bytes more either way. Besides the
process's CPU, each run records its event-loop thread's (the main thread's run time from
/proc/PID/task/PID/schedstat, in nanoseconds: ``loop_cpu_*``), to tell the request path from the
worker threads' DynamoDB and S3 calls. The
``records_per_s`` and ``broker_cpu_us_per_record`` fields of fixed_requests count requests (``unit``).
The librdkafka workloads also record how many Produce requests each side's producer sent (librdkafka's
statistics), so the broker CPU per request and the records per request are known: the metrics'
cost is per request, and how many records a librdkafka request carries depends on how fast the
broker answers.

    .venv/bin/python bench/metrics_overhead.py [--runs 5] [--records 200000] [--small-records 50000]
        [--order alternate|together] [--control] [--keep-brokers] [--scrape-interval 15] [--output metrics_overhead.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import multiprocessing
import multiprocessing.sharedctypes
import multiprocessing.synchronize
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import psutil  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.kafka_load import produce_values  # noqa: E402
from bench.machine import cpu_pressure, result_header, write_result  # noqa: E402
from broker_core.client import BrokerConnection  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.metrics.scrape import ScrapeError, scrape  # noqa: E402
from broker_core.protocol.api_keys import ApiKey  # noqa: E402
from broker_core.records import SimpleRecord, build_batch  # noqa: E402

WORKLOADS = {
    "batched": {"value_bytes": 1000, "settings": {"acks": "1", "linger.ms": "5", "batch.size": "1000000",
                                                  "batch.num.messages": "100000"}},
    "small_requests": {"value_bytes": 100, "settings": {"acks": "1", "linger.ms": "0", "batch.num.messages": "10"}},
    "fixed_requests": {"value_bytes": 100, "records_per_request": 10},
    "one_record_requests": {"value_bytes": 100, "records_per_request": 1},
}
IN_FLIGHT = 16
STATS_INTERVAL_MS = "500"  # librdkafka statistics, read for its count of Produce requests
COMMON = {"queue.buffering.max.kbytes": "65536", "message.timeout.ms": "300000"}
SIDES = ("on", "off")
SETTLE_S = 1.0  # interleaved: a pause after the set-up, before the first burst
# interleaved: both brokers on one CPU (only one is busy at a time) and the producer on another, so that
# neither broker gets a luckier place than the other for the whole bench (see the module doc)
BROKER_CPUS = {0}
PRODUCER_CPUS = {1}


def loop_cpu_s(pid: int) -> float:
    """CPU seconds of the process's main thread (the broker's event loop): the scheduler's run time of
    the thread, in nanoseconds (/proc/PID/task/PID/schedstat)."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as stat:
        return int(stat.read().split()[0]) / 1e9


def broker_cpu_s(pid: int) -> float:
    """CPU seconds the process has used, all its threads (those that ended too): the kernel's process CPU
    clock (Linux: clock id ``(~pid << 3) | 2``, CPUCLOCK_SCHED of the whole process, in nanoseconds), or
    psutil's user + system ticks where that clock cannot be read."""
    try:
        return time.clock_gettime_ns((~pid << 3) | 2) / 1e9
    except (OSError, OverflowError):
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system


def _scrape_every(interval_s: float, url: str, stop: multiprocessing.synchronize.Event,
                  count: multiprocessing.sharedctypes.Synchronized) -> None:
    while not stop.wait(interval_s):
        try:
            scrape(url)
            with count.get_lock():
                count.value += 1
        except ScrapeError as exc:
            print(f"scrape failed: {exc}", file=sys.stderr)


class Scraper:
    """GETs and parses a metrics URL every ``interval_s`` while a run is measured, as Prometheus would: in
    a process of its own, so that parsing does not hold the producing process's GIL."""

    def __init__(self, url: str, interval_s: float) -> None:
        self._stop = multiprocessing.Event()
        self._count = multiprocessing.Value("i", 0)
        self._process = multiprocessing.Process(target=_scrape_every, args=(interval_s, url, self._stop, self._count),
                                                daemon=True)

    @property
    def scrapes(self) -> int:
        return self._count.value

    def __enter__(self) -> Scraper:
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._process.join()


def produce(bootstrap_servers: str, broker_pid: int, topic: str, records: int, workload: dict[str, Any],
            start: multiprocessing.synchronize.Barrier) -> tuple[float, float, int]:
    """(records per second, broker CPU microseconds per record, Produce requests sent), producing once
    ``start`` lets every side go. The requests are librdkafka's own count (its statistics' ``req``)."""
    config = {"bootstrap.servers": bootstrap_servers}
    admin = AdminClient(config)  # kept: the future fails if the client is collected before it completes
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    statistics_seen: list[str] = []
    producer = Producer({**config, **COMMON, **workload["settings"], "statistics.interval.ms": STATS_INTERVAL_MS,
                         "stats_cb": statistics_seen.append})
    value = b"v" * workload["value_bytes"]
    start.wait(120)
    cpu = broker_cpu_s(broker_pid)
    started = time.perf_counter()
    produce_values(producer, topic, value, records)
    rate, cpu_us = records / (time.perf_counter() - started), (broker_cpu_s(broker_pid) - cpu) / records * 1e6
    seen = len(statistics_seen)
    deadline = time.monotonic() + 5 * int(STATS_INTERVAL_MS) / 1000
    while len(statistics_seen) == seen and time.monotonic() < deadline:  # statistics from after the last delivery
        producer.poll(0.05)
    if len(statistics_seen) == seen:
        raise RuntimeError("librdkafka gave no statistics after the run")
    brokers = json.loads(statistics_seen[-1])["brokers"].values()
    return rate, cpu_us, sum(broker.get("req", {}).get("Produce", 0) for broker in brokers)


def produce_fixed(bootstrap_servers: str, broker_pid: int, topic: str, requests: int, workload: dict[str, Any],
                  start: multiprocessing.synchronize.Barrier) -> tuple[float, float, int]:
    """(requests per second, broker CPU microseconds per request): the same Produce request (one batch of
    ``records_per_request`` records) ``requests`` times, acks=1, IN_FLIGHT at a time on one connection, so
    every request costs the broker the same whatever the client's speed."""
    config = {"bootstrap.servers": bootstrap_servers}
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    batch = build_batch([SimpleRecord(value=b"v" * workload["value_bytes"])
                         for _ in range(workload["records_per_request"])])
    host, port = bootstrap_servers.split(",")[0].rsplit(":", 1)

    async def run() -> tuple[float, float, int]:
        connection = BrokerConnection(host, int(port), request_timeout_s=120)
        await connection.connect()
        request = {"transactional_id": None, "acks": 1, "timeout": datetime.timedelta(seconds=60),
                   "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
        await connection.send(ApiKey.PRODUCE, request)  # the topic's leader is known
        await asyncio.to_thread(start.wait, 120)
        cpu = broker_cpu_s(broker_pid)
        started = time.perf_counter()
        for first in range(0, requests, IN_FLIGHT):
            answers = await asyncio.gather(*(connection.send(ApiKey.PRODUCE, request)
                                             for _ in range(min(IN_FLIGHT, requests - first))))
            if any(a.responses[0].partition_responses[0].error_code for a in answers):
                raise RuntimeError("a produce request failed")
        elapsed = time.perf_counter() - started
        used = broker_cpu_s(broker_pid) - cpu
        await connection.close()
        return requests / elapsed, used / requests * 1e6, requests

    return asyncio.run(run())


def _burst_order(bursts: int, first: str) -> list[str]:
    """first, other, other, first, first, other, ...: each side goes first as often as last, so a drift
    in the neighbours' load between two bursts weighs on both sides alike."""
    sides = (first, SIDES[1 - SIDES.index(first)])
    return [sides[(i + 1) // 2 % 2] for i in range(2 * bursts)]


class _Tally:
    """One side's share of an interleaved run: its requests, the time spent on its bursts and the CPU
    its broker used during them."""

    def __init__(self) -> None:
        self.records = self.requests = 0
        self.busy_s = self.cpu_s = self.loop_s = 0.0

    def figures(self) -> tuple[float, float, int, float]:
        return self.records / self.busy_s, self.cpu_s / self.records * 1e6, self.requests, self.loop_s / self.records * 1e6


def produce_interleaved(bootstraps: dict[str, str], pids: dict[str, int], topic: str, records: int,
                        workload: dict[str, Any], burst: int, first: str) -> dict[str, tuple[float, float, int]]:
    """Both sides from one process, in bursts of ``burst`` records (fixed workloads: requests) taken in
    turn (`_burst_order`), ``records`` in all per side. A side's throughput counts only its own bursts'
    time and its broker's CPU only what it used during them, so both sides are measured under the
    same load, a fraction of a second apart. A librdkafka burst ends with a flush (every record
    delivered), which both sides pay alike. ``first`` is the side that was set up first (its topic
    created, its producer connected) and takes the first burst; callers alternate it between runs,
    since whatever a broker still does after the set-up (e.g. the new topic's replica) lands in the
    first bursts. Per side: (records or requests per second, broker CPU
    microseconds per record or request, Produce requests)."""
    bursts = -(-records // burst)
    tallies = {side: _Tally() for side in SIDES}
    if workload.get("records_per_request"):
        batch = build_batch([SimpleRecord(value=b"v" * workload["value_bytes"])
                             for _ in range(workload["records_per_request"])])
        request = {"transactional_id": None, "acks": 1, "timeout": datetime.timedelta(seconds=60),
                   "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}

        async def run() -> None:
            connections = {}
            for side in _burst_order(1, first)[:2]:
                host, port = bootstraps[side].split(",")[0].rsplit(":", 1)
                connections[side] = BrokerConnection(host, int(port), request_timeout_s=120)
                await connections[side].connect()
                await connections[side].send(ApiKey.PRODUCE, request)  # the topic's leader is known
            await asyncio.sleep(SETTLE_S)
            for side in _burst_order(bursts, first):
                tally, connection = tallies[side], connections[side]
                count = min(burst, records - tally.requests)
                loop, cpu, started = loop_cpu_s(pids[side]), broker_cpu_s(pids[side]), time.perf_counter()
                for done in range(0, count, IN_FLIGHT):
                    answers = await asyncio.gather(*(connection.send(ApiKey.PRODUCE, request)
                                                     for _ in range(min(IN_FLIGHT, count - done))))
                    if any(a.responses[0].partition_responses[0].error_code for a in answers):
                        raise RuntimeError("a produce request failed")
                tally.busy_s += time.perf_counter() - started
                tally.cpu_s += broker_cpu_s(pids[side]) - cpu
                tally.loop_s += loop_cpu_s(pids[side]) - loop
                tally.records += count
                tally.requests += count
            for connection in connections.values():
                await connection.close()

        asyncio.run(run())
        return {side: tallies[side].figures() for side in SIDES}
    statistics_seen: dict[str, list[str]] = {side: [] for side in SIDES}
    producers = {side: Producer({"bootstrap.servers": bootstraps[side], **COMMON, **workload["settings"],
                                 "statistics.interval.ms": STATS_INTERVAL_MS,
                                 "stats_cb": statistics_seen[side].append}) for side in SIDES}
    value = b"v" * workload["value_bytes"]
    for side in _burst_order(1, first)[:2]:  # connected, the topic's leader known
        producers[side].produce(topic, value, partition=0)
        if producers[side].flush(60) != 0:
            raise RuntimeError("the producer did not deliver its first record")
    sent_before = {side: _produce_requests(producers[side], statistics_seen[side]) for side in SIDES}
    time.sleep(SETTLE_S)
    for side in _burst_order(bursts, first):
        tally, producer = tallies[side], producers[side]
        count = min(burst, records - tally.records)
        loop, cpu, started = loop_cpu_s(pids[side]), broker_cpu_s(pids[side]), time.perf_counter()
        produce_values(producer, topic, value, count)
        tally.busy_s += time.perf_counter() - started
        tally.cpu_s += broker_cpu_s(pids[side]) - cpu
        tally.loop_s += loop_cpu_s(pids[side]) - loop
        tally.records += count
    for side in SIDES:
        tallies[side].requests = _produce_requests(producers[side], statistics_seen[side]) - sent_before[side]
    return {side: tallies[side].figures() for side in SIDES}


def _produce_requests(producer: Producer, seen: list[str]) -> int:
    """The Produce requests ``producer`` has sent, from librdkafka statistics newer than any read so far."""
    count = len(seen)
    deadline = time.monotonic() + 5 * int(STATS_INTERVAL_MS) / 1000
    while len(seen) == count and time.monotonic() < deadline:
        producer.poll(0.05)
    if len(seen) == count:
        raise RuntimeError("librdkafka gave no statistics")
    return sum(broker.get("req", {}).get("Produce", 0) for broker in json.loads(seen[-1])["brokers"].values())


def pin(pid: int, cpus: set[int]) -> None:
    """Run every thread of process ``pid`` on ``cpus`` (threads it starts later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task.name), cpus)


def _interleaved_process(answers: multiprocessing.Queue, cpus: set[int] | None, *args: Any) -> None:
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    answers.put(produce_interleaved(*args))


def _producer_process(side: str, answers: multiprocessing.Queue, *args: Any) -> None:
    workload = args[4]
    answers.put((side, (produce_fixed if workload.get("records_per_request") else produce)(*args)))


def scrape_cost(stack: LocalStack, scrapes: int = 20) -> dict[str, float]:
    """The "on" broker's CPU per scrape (collecting on its loop, writing the text in a thread) and the
    size of its answer, scraped ``scrapes`` times back to back once the runs are over."""
    pid = stack.processes[1].pid
    url = stack.metrics_url(stack.processes[1])
    lines = len(scrape(url).samples)
    cpu = broker_cpu_s(pid)
    for _ in range(scrapes):
        scrape(url)
    return {"broker_cpu_ms_per_scrape": (broker_cpu_s(pid) - cpu) / scrapes * 1000, "samples": lines}


def _sides_in_turn(number: int, order: str) -> list[tuple[str, ...]]:
    """Which sides produce at once, group after group: both together, or one at a time (on first in
    even runs, off first in odd ones)."""
    if order == "interleaved":
        return []  # produce_interleaved
    if order == "together":
        return [SIDES]
    return [(side,) for side in (SIDES if number % 2 == 0 else SIDES[::-1])]


def one_run(number: int, stacks: dict[str, LocalStack], counts: dict[str, int], scrape_s: float,
            workloads: list[str], order: str, bursts: dict[str, int], pinned: bool) -> dict[str, Any]:
    """Each workload once on each side, each side from a producer process of its own (``order``: both
    at once or one after the other)."""
    result: dict[str, Any] = {}
    for name in workloads:
        workload = WORKLOADS[name]
        measured: dict[str, tuple[float, float, int]] = {}
        on_broker = stacks["on"].processes[1]
        scraping = (Scraper(stacks["on"].metrics_url(on_broker), scrape_s) if on_broker.metrics_port is not None
                    else contextlib.nullcontext())  # --control: no endpoint to scrape
        with scraping as scraper:
            if order == "interleaved":
                answers = multiprocessing.Queue()
                topic = f"{name}-{number}"
                first = SIDES[number % 2]
                for side in _burst_order(1, first)[:2]:
                    admin = AdminClient({"bootstrap.servers": stacks[side].bootstrap_servers})
                    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
                producer = multiprocessing.Process(target=_interleaved_process, args=(
                    answers, PRODUCER_CPUS if pinned else None, {side: stacks[side].bootstrap_servers for side in SIDES},
                    {side: stacks[side].processes[1].pid for side in SIDES}, topic, counts[name], workload,
                    bursts[name], first))
                producer.start()
                measured = answers.get(timeout=900)
                producer.join()
            for group in _sides_in_turn(number, order):
                start = multiprocessing.Barrier(len(group))
                answers: multiprocessing.Queue = multiprocessing.Queue()
                producers = [multiprocessing.Process(target=_producer_process, args=(
                    side, answers, stacks[side].bootstrap_servers, stacks[side].processes[1].pid, f"{name}-{number}",
                    counts[name], workload, start)) for side in group]
                for process in producers:
                    process.start()
                measured.update(answers.get(timeout=900) for _ in group)
                for process in producers:
                    process.join()
        rates = {side: measured[side][0] for side in SIDES}
        cpu = {side: measured[side][1] for side in SIDES}
        sent = {side: measured[side][2] for side in SIDES}
        loop = {side: measured[side][3] if len(measured[side]) > 3 else float("nan") for side in SIDES}
        result[f"{name}_scrapes"] = scraper.scrapes if scraper is not None else 0
        unit = "request" if workload.get("records_per_request") else "record"
        per_request = {side: counts[name] / sent[side] for side in SIDES}  # records (fixed: 1 request)
        result[name] = {"unit": unit, "records_per_s": rates, "ratio": rates["on"] / rates["off"],
                        "broker_cpu_us_per_record": cpu, "cpu_ratio": cpu["off"] / cpu["on"],
                        "loop_cpu_us_per_record": loop, "loop_cpu_ratio": loop["off"] / loop["on"],
                        "other_threads_cpu_us_per_record": {side: cpu[side] - loop[side] for side in SIDES},
                        "produce_requests": sent, f"{unit}s_per_request": per_request,
                        "broker_cpu_us_per_request": {side: cpu[side] * per_request[side] for side in SIDES}}
        print(f"run {number} {name}: on/off {result[name]['ratio']:.3f} ({rates['on']:,.0f} / {rates['off']:,.0f} "
              f"{unit}s/s), broker CPU us/{unit} on {cpu['on']:.1f} off {cpu['off']:.1f} (off/on "
              f"{result[name]['cpu_ratio']:.3f}), loop on {loop['on']:.1f} off {loop['off']:.1f} (off/on "
              f"{result[name]['loop_cpu_ratio']:.3f}), {unit}s/request on {per_request['on']:.2f} off "
              f"{per_request['off']:.2f}", flush=True)
    result["load_average"] = os.getloadavg()
    result["cpu_pressure_avg10"] = cpu_pressure()
    return result


def side_settings(side: str, control: bool) -> dict[str, str]:
    """A side's broker settings, of the same length on both sides: a process's argv and environment sit at
    the top of its stack, and their length moves its alignment (see the module doc); "00" is port 0."""
    return {"metrics.port": "00" if side == "on" and not control else "-1"}


def restart_brokers(stacks: dict[str, LocalStack], number: int, pinned: bool, control: bool) -> None:
    """Stop both brokers and start new processes for run ``number``, so that every run meets a new pair of
    processes: a broker process keeps a speed of its own for its whole life, a few per cent either
    way, and brokers kept for a whole bench carry that difference into every run of it. Every second
    run the two stacks also swap roles (the stack whose broker had metrics on gets one with metrics
    off, and the other way round), so that whatever differs between the stacks themselves (their
    moto servers, which was started first) weighs on both sides alike, and each stack takes the
    first burst (`one_run`: on's in even runs) as often as the other. Starts in turn: on's broker
    first in even runs."""
    if number % 2 == 0:
        stacks["on"], stacks["off"] = stacks["off"], stacks["on"]
    for side, stack in stacks.items():
        stack.overrides.update(side_settings(side, control))
    order = SIDES if number % 2 == 0 else SIDES[::-1]
    for side in order:
        stacks[side].kill_broker(1, signal.SIGTERM)
    for side in order:
        stacks[side].restart_broker(1)
        if pinned:
            pin(stacks[side].processes[1].pid, BROKER_CPUS)
    if stacks["off"].processes[1].metrics_port is not None:
        raise RuntimeError("the 'off' broker serves metrics")
    time.sleep(SETTLE_S)


def idle_cpu_ms_per_s(stacks: dict[str, LocalStack], seconds: float = 3.0) -> dict[str, float]:
    """Each broker's CPU while nothing is produced (its DynamoDB polling, heartbeats, timers)."""
    pids = {side: stacks[side].processes[1].pid for side in SIDES}
    before = {side: broker_cpu_s(pid) for side, pid in pids.items()}
    time.sleep(seconds)
    return {side: (broker_cpu_s(pid) - before[side]) / seconds * 1000 for side, pid in pids.items()}


def _spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return {"median": statistics.median(ordered), "q1": quartiles[0], "q3": quartiles[2], "min": ordered[0],
            "max": ordered[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--small-records", type=int, default=50_000)
    parser.add_argument("--fixed-requests", type=int, default=5_000,
                        help="requests of each fixed-request workload (10 records and 1 record per request)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--scrape-interval", type=float, default=15.0,
                        help="seconds between scrapes of the 'on' broker (Prometheus's usual 15 s)")
    parser.add_argument("--order", choices=("interleaved", "alternate", "together"), default="interleaved",
                        help="the two sides in short bursts taken in turn from one producer process, one whole "
                             "run at a time (on/off, then off/on), or both at once")
    parser.add_argument("--burst", type=float, default=0.05,
                        help="interleaved: records (fixed workloads: requests) per burst, as a share of a run's")
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="interleaved: leave the brokers and the producer wherever the scheduler puts them")
    parser.add_argument("--control", action="store_true",
                        help="both stacks with metrics off: the ratios the bench reads when nothing differs")
    parser.add_argument("--keep-brokers", dest="fresh_brokers", action="store_false",
                        help="keep one broker process per side for the whole bench (default: new ones for every run)")
    parser.add_argument("--output", default="metrics_overhead.json", help="file name under bench/results/")
    args = parser.parse_args()
    counts = {"batched": args.records, "small_requests": args.small_records, "fixed_requests": args.fixed_requests,
              "one_record_requests": args.fixed_requests}
    workloads = [name.strip() for name in args.workloads.split(",") if name.strip()]
    if unknown := [name for name in workloads if name not in WORKLOADS]:
        parser.error(f"unknown workloads {unknown}; choose from {list(WORKLOADS)}")
    with tempfile.TemporaryDirectory(prefix="floe-metrics-bench-") as directory:
        # directories of the same name length (their paths are in the brokers' argv)
        stacks = {side: LocalStack(directory=Path(directory) / f"stack-{index}", brokers=1,
                                   overrides=side_settings(side, args.control))
                  for index, side in enumerate(SIDES)}
        try:
            for stack in stacks.values():
                stack.start()
            if stacks["off"].processes[1].metrics_port is not None:
                raise RuntimeError("the 'off' broker serves metrics")
            idle = idle_cpu_ms_per_s(stacks)
            bursts = {name: max(1, int(counts[name] * args.burst)) for name in workloads}
            pinned = args.pin and args.order == "interleaved" and len(os.sched_getaffinity(0)) >= 2
            if pinned:
                for stack in stacks.values():
                    pin(stack.processes[1].pid, BROKER_CPUS)
            runs = []
            for number in range(args.runs):
                if number and args.fresh_brokers:
                    restart_brokers(stacks, number, pinned, args.control)
                runs.append(one_run(number, stacks, counts, args.scrape_interval, workloads, args.order, bursts,
                                    pinned))
                runs[-1]["broker_pids"] = {side: stacks[side].processes[1].pid for side in SIDES}
                runs[-1]["stacks"] = {side: stacks[side].directory.name for side in SIDES}
            scraping = scrape_cost(stacks["on"]) if not args.control else None
        finally:
            for stack in stacks.values():
                stack.stop(save_state=False)

    result = {
        **result_header("metrics_overhead"),
        "records": {name: counts[name] for name in workloads}, "runs_count": args.runs,
        "scrape_interval_s": args.scrape_interval, "order": args.order,
        "burst_share": args.burst if args.order == "interleaved" else None,
        "pinned": {"brokers": sorted(BROKER_CPUS), "producer": sorted(PRODUCER_CPUS)} if pinned else None,
        "fresh_brokers": args.fresh_brokers,
        "control": args.control,  # true: both sides had metrics off
        "idle_broker_cpu_ms_per_s": idle,
        "spread": {
            **{f"{name}_ratio_on_over_off": _spread([run[name]["ratio"] for run in runs]) for name in workloads},
            **{f"{name}_cpu_ratio_off_over_on": _spread([run[name]["cpu_ratio"] for run in runs]) for name in workloads},
            **{f"{name}_loop_cpu_ratio_off_over_on": _spread([run[name]["loop_cpu_ratio"] for run in runs])
               for name in workloads},
        },
        "median": {
            **{f"{name}_ratio_on_over_off": statistics.median(run[name]["ratio"] for run in runs) for name in workloads},
            **{f"{name}_records_per_s_{side}": statistics.median(run[name]["records_per_s"][side] for run in runs)
               for name in workloads for side in SIDES},
            **{f"{name}_broker_cpu_us_per_record_{side}": statistics.median(
                run[name]["broker_cpu_us_per_record"][side] for run in runs) for name in workloads for side in SIDES},
            **{f"{name}_cpu_ratio_off_over_on": statistics.median(run[name]["cpu_ratio"] for run in runs)
               for name in workloads},
            **{f"{name}_loop_cpu_ratio_off_over_on": statistics.median(run[name]["loop_cpu_ratio"] for run in runs)
               for name in workloads},
            **{f"{name}_broker_cpu_us_per_request_{side}": statistics.median(
                run[name]["broker_cpu_us_per_request"][side] for run in runs) for name in workloads for side in SIDES},
            **{f"{name}_produce_requests_{side}": statistics.median(run[name]["produce_requests"][side] for run in runs)
               for name in workloads for side in SIDES},
        },
        "scrape_cost": scraping,
        "goals": {"ratio_on_over_off": 0.97},
        "runs": runs,
    }
    write_result(REPO_ROOT / "bench" / "results" / args.output, result)
    print(result["median"])


if __name__ == "__main__":
    main()
