"""Bisection aid (temporary): the request path's metrics on and off in ONE broker process, in turn.

`metrics_overhead.py` compares two broker processes, and a broker process keeps a speed of its own
for its life (its memory layout), a few per cent either way, which its controls show. Here one
broker (metrics on) serves bursts of Produce requests while the driver switches the request path's
metrics (the request clock and RequestMetrics histograms, and the topic counters) off with SIGUSR1
and on with SIGUSR2 between bursts (a temporary handler in broker_core.server.__main__), in the order
on, off, off, on, ...; each burst's event-loop CPU (the main thread's schedstat run time) and
process CPU per request or record are summed per mode. Both modes run in the same process with the
same endpoint, lag sampler and registry, so the difference is the per-request and per-append work.

    .venv/bin/python bench/metrics_toggle.py [--bursts 40] [--requests 400] [--records 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
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

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.kafka_load import produce_values  # noqa: E402
from bench.machine import result_header, write_result  # noqa: E402
from bench.metrics_overhead import (  # noqa: E402
    BROKER_CPUS,
    COMMON,
    PRODUCER_CPUS,
    WORKLOADS,
    broker_cpu_s,
    loop_cpu_s,
    pin,
)
from broker_core.client import BrokerConnection  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.protocol.api_keys import ApiKey  # noqa: E402
from broker_core.records import SimpleRecord, build_batch  # noqa: E402

MODES = ("on", "off")
SIGNALS = {"on": signal.SIGUSR2, "off": signal.SIGUSR1}


def _order(bursts: int) -> list[str]:
    return [MODES[(i + 1) // 2 % 2] for i in range(bursts)]


def _measure(pid: int, bursts: list[str], burst: Any) -> list[dict[str, Any]]:
    out = []
    for mode in bursts:
        os.kill(pid, SIGNALS[mode])
        time.sleep(0.05)
        loop, cpu, started = loop_cpu_s(pid), broker_cpu_s(pid), time.perf_counter()
        units = burst()
        out.append({"mode": mode, "units": units, "s": time.perf_counter() - started,
                    "loop_s": loop_cpu_s(pid) - loop, "cpu_s": broker_cpu_s(pid) - cpu})
    return out


def one_record(stack: LocalStack, pid: int, topic: str, bursts: int, requests: int) -> list[dict[str, Any]]:
    batch = build_batch([SimpleRecord(value=b"v" * 100)])
    request = {"transactional_id": None, "acks": 1, "timeout": datetime.timedelta(seconds=60),
               "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    host, port = stack.bootstrap_servers.split(",")[0].rsplit(":", 1)
    loop = asyncio.new_event_loop()
    connection = BrokerConnection(host, int(port), request_timeout_s=120)
    loop.run_until_complete(connection.connect())
    loop.run_until_complete(connection.send(ApiKey.PRODUCE, request))

    async def burst() -> int:
        for done in range(0, requests, 16):
            await asyncio.gather(*(connection.send(ApiKey.PRODUCE, request) for _ in range(min(16, requests - done))))
        return requests

    try:
        return _measure(pid, _order(bursts), lambda: loop.run_until_complete(burst()))
    finally:
        loop.run_until_complete(connection.close())
        loop.close()


def small_requests(stack: LocalStack, pid: int, topic: str, bursts: int, records: int) -> list[dict[str, Any]]:
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, **COMMON,
                         **WORKLOADS["small_requests"]["settings"]})
    value = b"v" * 100
    producer.produce(topic, value, partition=0)
    producer.flush(60)

    def burst() -> int:
        produce_values(producer, topic, value, records)
        return records

    return _measure(pid, _order(bursts), burst)


def summary(bursts: list[dict[str, Any]]) -> dict[str, Any]:
    per_mode = {mode: [b for b in bursts if b["mode"] == mode] for mode in MODES}
    totals = {mode: {key: sum(b[key] for b in per_mode[mode]) for key in ("units", "s", "loop_s", "cpu_s")}
              for mode in MODES}
    # paired: the k-th on burst with the k-th off burst (adjacent in the on, off, off, on order)
    pairs = list(zip(per_mode["on"], per_mode["off"], strict=False))
    loop_ratios = [(off["loop_s"] / off["units"]) / (on["loop_s"] / on["units"]) for on, off in pairs]
    rate_ratios = [(on["units"] / on["s"]) / (off["units"] / off["s"]) for on, off in pairs]
    return {
        "loop_us_per_unit": {m: totals[m]["loop_s"] / totals[m]["units"] * 1e6 for m in MODES},
        "cpu_us_per_unit": {m: totals[m]["cpu_s"] / totals[m]["units"] * 1e6 for m in MODES},
        "units_per_s": {m: totals[m]["units"] / totals[m]["s"] for m in MODES},
        "loop_ratio_off_over_on": {"total": (totals["off"]["loop_s"] / totals["off"]["units"])
                                   / (totals["on"]["loop_s"] / totals["on"]["units"]),
                                   "median_of_pairs": statistics.median(loop_ratios),
                                   "pairs_below_1": sum(r < 1 for r in loop_ratios), "pairs": len(loop_ratios)},
        "throughput_ratio_on_over_off": {"median_of_pairs": statistics.median(rate_ratios),
                                         "pairs_below_1": sum(r < 1 for r in rate_ratios)},
        "bursts": bursts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bursts", type=int, default=40)
    parser.add_argument("--requests", type=int, default=400, help="one-record requests per burst")
    parser.add_argument("--records", type=int, default=2000, help="librdkafka small-request records per burst")
    parser.add_argument("--workloads", default="one_record_requests,small_requests")
    parser.add_argument("--parts", default="RT",
                        help="the parts switched: R request times, T topic counters, E endpoint, L lag sampler")
    parser.add_argument("--output", default="metrics_toggle.json")
    args = parser.parse_args()
    os.environ["FLOE_BISECT_TOGGLE"] = args.parts  # read by the broker's temporary signal handler
    pinned = len(os.sched_getaffinity(0)) >= 2
    result: dict[str, Any] = {**result_header("metrics_toggle"), "bursts": args.bursts, "parts": args.parts,
                              "load_average_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="floe-metrics-toggle-") as directory:
        stack = LocalStack(directory=Path(directory) / "stack", brokers=1, overrides={"metrics.port": "00"})
        try:
            stack.start()
            pid = stack.processes[1].pid
            if pinned:
                pin(pid, BROKER_CPUS)
                os.sched_setaffinity(0, PRODUCER_CPUS)
            for name in args.workloads.split(","):
                topic = f"toggle-{name}"
                admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})  # kept until the future is done
                admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
                time.sleep(1.0)
                if name == "one_record_requests":
                    bursts = one_record(stack, pid, topic, args.bursts, args.requests)
                else:
                    bursts = small_requests(stack, pid, topic, args.bursts, args.records)
                result[name] = summary(bursts)
                s = result[name]
                print(f"{name}: loop us/unit on {s['loop_us_per_unit']['on']:.1f} off {s['loop_us_per_unit']['off']:.1f}"
                      f" (off/on total {s['loop_ratio_off_over_on']['total']:.3f}, median of pairs "
                      f"{s['loop_ratio_off_over_on']['median_of_pairs']:.3f}, {s['loop_ratio_off_over_on']['pairs_below_1']}"
                      f"/{s['loop_ratio_off_over_on']['pairs']} below 1); process us/unit on {s['cpu_us_per_unit']['on']:.1f}"
                      f" off {s['cpu_us_per_unit']['off']:.1f}; throughput on/off median of pairs "
                      f"{s['throughput_ratio_on_over_off']['median_of_pairs']:.3f}", flush=True)
        finally:
            stack.stop(save_state=False)
    result["load_average_after"] = os.getloadavg()
    write_result(REPO_ROOT / "bench" / "results" / args.output, result)


if __name__ == "__main__":
    main()
