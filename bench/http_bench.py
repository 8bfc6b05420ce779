"""HTTP produce through the local adapter against the Kafka-protocol path, same records, same run.

One local stack (moto, one broker, the HTTP adapter with its default 4 worker processes). Each
request carries 500 keyed JSON records (the demo's orders, ~130 bytes each). The HTTP side POSTs
them as a Confluent-v3 body to ``/v1/topics/{topic}/records``; the Kafka side sends the very same
records with `FloeClient.produce_many` (one batch per partition, placed by murmur2 as the front end
places them, acks=all), which is also what the front end does after parsing and checking the body.
Both sides run ``--concurrency`` requests at a time and time every request; records/s is records
over wall time. Each run does both sides on fresh topics, alternating which goes first; the summary
takes medians over runs. The ratio HTTP/Kafka is the cost of the front end (HTTP, API Gateway
event, Powertools routing and validation, JSON decoding) on top of the produce it makes; each side's
p99/p50 shows its tail (goals: HTTP/Kafka records/s >= 0.25, HTTP p99 <= 3x its p50). Every run
records the load average before and after, since the machine it runs on is shared.

    .venv/bin/python bench/http_bench.py --runs 5 --requests 300 --concurrency 1
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import result_header, write_result  # noqa: E402
from broker_core.client import FloeClient  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.partitioner import partition_for_key  # noqa: E402
from broker_core.records import SimpleRecord  # noqa: E402
from functions.local_adapter import DEFAULT_WORKERS  # noqa: E402

RECORDS_PER_REQUEST = 500
PARTITIONS = 6
CUSTOMERS = 5_000
BROKER_OVERRIDES = {"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "1000"}


def order(order_id: int) -> tuple[str, dict[str, Any]]:
    customer = f"customer-{order_id % CUSTOMERS:04d}"
    return customer, {"order_id": order_id, "customer": customer, "amount_cents": (order_id * 7919) % 100_000 + 100,
                      "channel": "bench", "note": "two sugars, no milk"}


def http_body(first: int) -> bytes:
    records = []
    for order_id in range(first, first + RECORDS_PER_REQUEST):
        customer, value = order(order_id)
        records.append({"key": {"type": "STRING", "data": customer}, "value": {"type": "JSON", "data": value}})
    return json.dumps({"records": records}).encode()


def kafka_batches(first: int) -> dict[int, list[SimpleRecord]]:
    by_partition: dict[int, list[SimpleRecord]] = {}
    for order_id in range(first, first + RECORDS_PER_REQUEST):
        customer, value = order(order_id)
        key = customer.encode()
        encoded = json.dumps(value, separators=(",", ":")).encode()
        by_partition.setdefault(partition_for_key(key, PARTITIONS), []).append(SimpleRecord(key=key, value=encoded))
    return by_partition


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def summarize(latencies_s: list[float], records: int, seconds: float) -> dict[str, float]:
    return {
        "requests": len(latencies_s),
        "records": records,
        "seconds": round(seconds, 3),
        "records_per_s": round(records / seconds, 1),
        "p50_ms": round(percentile(latencies_s, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies_s, 0.99) * 1000, 2),
        "p99_over_p50": round(percentile(latencies_s, 0.99) / percentile(latencies_s, 0.50), 2),
    }


class HttpSide:
    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.local = threading.local()

    def post(self, path: str, body: bytes) -> None:
        connection = getattr(self.local, "connection", None)
        if connection is None:
            connection = self.local.connection = http.client.HTTPConnection(self.host, self.port, timeout=120)
        connection.request("POST", path, body=body, headers=self.headers)
        response = connection.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP produce answered {response.status}: {payload[:300]!r}")

    def run(self, topic: str, bodies: list[bytes], concurrency: int) -> dict[str, float]:
        latencies: list[float] = []

        def send(body: bytes) -> None:
            started = time.perf_counter()
            self.post(f"/v1/topics/{topic}/records", body)
            latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            for future in [pool.submit(send, body) for body in bodies]:
                future.result()
        return summarize(latencies, len(bodies) * RECORDS_PER_REQUEST, time.perf_counter() - started)


async def kafka_run(bootstrap: str, topic: str, batches: list[dict[int, list[SimpleRecord]]],
                    concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    queue: asyncio.Queue[dict[int, list[SimpleRecord]]] = asyncio.Queue()
    for batch in batches:
        queue.put_nowait(batch)
    async with FloeClient(bootstrap, client_id="http-bench") as client:
        await client.num_partitions(topic)

        async def worker() -> None:
            while not queue.empty():
                batch = queue.get_nowait()
                started = time.perf_counter()
                await client.produce_many(topic, batch, acks=-1)
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    return summarize(latencies, len(batches) * RECORDS_PER_REQUEST, seconds)


async def create_topics(bootstrap: str, names: list[str]) -> None:
    async with FloeClient(bootstrap) as client:
        for name in names:
            await client.create_topic(name, PARTITIONS, 1)


def cpu_pressure() -> str | None:
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return None


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300, help="requests of 500 records per side per run")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "http_produce.json")
    args = parser.parse_args()

    bodies = [http_body(n * RECORDS_PER_REQUEST) for n in range(args.requests)]
    batches = [kafka_batches(n * RECORDS_PER_REQUEST) for n in range(args.requests)]
    warmup = 4 * DEFAULT_WORKERS
    with tempfile.TemporaryDirectory(prefix="floe-http-bench-") as directory:
        stack = LocalStack(directory=Path(directory), brokers=1, overrides=BROKER_OVERRIDES, http=True)
        stack.start()
        try:
            info = stack.describe()["http"]
            http_side = HttpSide(info["url"], info["token"])
            runs = []
            for run in range(args.runs):
                http_topic, kafka_topic = f"bench-http-{run}", f"bench-kafka-{run}"
                asyncio.run(create_topics(stack.bootstrap_servers, [http_topic, kafka_topic]))
                # Every adapter worker (a "container") gets warm requests before the measured ones.
                http_side.run(http_topic, bodies[:warmup], DEFAULT_WORKERS)
                asyncio.run(kafka_run(stack.bootstrap_servers, kafka_topic, batches[:warmup], args.concurrency))
                sides = ["http", "kafka"] if run % 2 == 0 else ["kafka", "http"]
                result: dict[str, Any] = {"first": sides[0], "cpu_pressure_before": cpu_pressure(),
                                          "load_average_before": load_average()}
                for side in sides:
                    if side == "http":
                        result[side] = http_side.run(http_topic, bodies, args.concurrency)
                    else:
                        result[side] = asyncio.run(kafka_run(stack.bootstrap_servers, kafka_topic, batches,
                                                             args.concurrency))
                result["cpu_pressure_after"] = cpu_pressure()
                result["load_average_after"] = load_average()
                result["http_over_kafka_records_per_s"] = round(result["http"]["records_per_s"] /
                                                                result["kafka"]["records_per_s"], 3)
                runs.append(result)
                print(f"run {run + 1}: HTTP {result['http']['records_per_s']:,.0f} rec/s "
                      f"(p50 {result['http']['p50_ms']} ms, p99 {result['http']['p99_ms']} ms, "
                      f"p99/p50 {result['http']['p99_over_p50']}); "
                      f"Kafka {result['kafka']['records_per_s']:,.0f} rec/s "
                      f"(p50 {result['kafka']['p50_ms']} ms, p99 {result['kafka']['p99_ms']} ms); "
                      f"HTTP/Kafka {result['http_over_kafka_records_per_s']}; "
                      f"load average {result['load_average_after'][0]}", flush=True)
        finally:
            stack.stop(save_state=False)

    def median(side: str, key: str) -> float:
        return round(statistics.median(run[side][key] for run in runs), 2)

    summary: dict[str, Any] = {side: {key: median(side, key)
                                      for key in ("records_per_s", "p50_ms", "p99_ms", "p99_over_p50")}
                               for side in ("http", "kafka")}
    # The median of the runs' ratios: each ratio compares two sides measured minutes apart at most.
    summary["http_over_kafka_records_per_s"] = round(statistics.median(
        run["http_over_kafka_records_per_s"] for run in runs), 3)
    summary["load_average_1min"] = [run["load_average_after"][0] for run in runs]
    document = {
        **result_header("http_produce"),
        "setup": {"brokers": 1, "partitions": PARTITIONS, "replication_factor": 1, "acks": "all",
                  "records_per_request": RECORDS_PER_REQUEST, "record_value_bytes": len(json.dumps(order(0)[1], separators=(",", ":"))),
                  "http_adapter_workers": DEFAULT_WORKERS, "concurrency": args.concurrency},
        "runs": runs,
        "median": summary,
    }
    write_result(args.output, document)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
