"""CPU per request of the broker's RequestMetrics, metrics on against metrics off, in one run.

The listener (broker_core.server.listener.Connection) does this for each Produce request it times:
look up the request's bound RequestMetrics, make a `RequestClock`, read the clock when the handler
starts, when the appends are done, when the response is ready, when its write starts and when it
ends, then `BrokerMetrics.request_done`. This bench replays exactly those calls, without I/O or a
handler, ``--requests`` times with metrics on (``metrics.port`` set) and with metrics off (the peer:
the null path, one lookup that answers NULL_REQUEST), alternating the two ``--rounds`` times, and
reports the median CPU time (``time.process_time``) per request of each and their difference.

The replayed requests take microseconds, so their times all fall in the first bucket of every
histogram, which is the cheap case of counting pending values (broker_core.metrics.families). The
bench therefore also times the worst case of that counting on its own: the pending values of
FOLD_AFTER_EVENTS requests whose seven times all lie above the first bound, in random order, folded
into the histograms (per request). The worst-case cost per request is the difference plus that.

    .venv/bin/python bench/request_metrics_cost.py [--requests 200000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from array import array
from pathlib import Path
from time import perf_counter

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import cpu_pressure, result_header, write_result  # noqa: E402
from broker_core.metrics.broker import NULL_REQUEST, BrokerMetrics  # noqa: E402
from broker_core.metrics.families import FOLD_AFTER_EVENTS  # noqa: E402
from broker_core.metrics.requests import RequestClock  # noqa: E402
from broker_core.protocol.api_keys import ApiKey  # noqa: E402
from broker_core.protocol.framing import Request  # noqa: E402
from broker_core.protocol.messages import api_name  # noqa: E402


def replay_produce(metrics: BrokerMetrics, requests: int) -> float:
    """CPU microseconds per Produce request of the listener's metrics calls (Connection._process, _encode, _send)."""
    header = Request(ApiKey.PRODUCE, 9, 1, "bench", None, 0)
    started = time.process_time()
    for _ in range(requests):
        received = perf_counter()  # once per batch of frames read, as the listener does
        bound = metrics.request(ApiKey.PRODUCE, 9, api_name, False)
        clock = None if bound is NULL_REQUEST else RequestClock(received, bound, header)
        if clock is not None:
            clock.started = perf_counter()
        if clock is not None:
            clock.local_done = perf_counter()
        if clock is not None:
            clock.ready = perf_counter()
        if clock is not None:
            clock.send_started = perf_counter()
        if clock is not None:
            clock.sent = perf_counter()
            metrics.request_done(clock, 0.0, "PLAINTEXT")
    return (time.process_time() - started) / requests * 1e6


def worst_case_fold_us(rounds: int) -> float:
    """CPU microseconds per request of counting FOLD_AFTER_EVENTS requests' pending times, every one of
    them above the first bucket bound (0.5 ms) and in random order: the most the counting costs."""
    metrics = BrokerMetrics()
    bound = metrics.request(ApiKey.PRODUCE, 9, api_name, False)
    rng = random.Random(1)
    values = [rng.uniform(0.0006, 0.2) for _ in range(FOLD_AFTER_EVENTS * len(bound.times.children))]
    timings = []
    for _ in range(rounds):
        bound.times.values[:] = array("d", values)
        bound.times.used = len(values)
        started = time.process_time()
        bound.times.fold()
        timings.append((time.process_time() - started) / FOLD_AFTER_EVENTS * 1e6)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--output", default="request_metrics_cost.json", help="file name under bench/results/")
    args = parser.parse_args()
    load_before = os.getloadavg()
    on_metrics, off_metrics = BrokerMetrics(), BrokerMetrics(enabled=False)
    rounds = []
    for number in range(args.rounds):
        sides = [("on", on_metrics), ("off", off_metrics)]
        if number % 2:
            sides.reverse()
        measured = {side: replay_produce(metrics, args.requests) for side, metrics in sides}
        rounds.append({**measured, "overhead_us": measured["on"] - measured["off"]})
        print(f"round {number}: on {measured['on']:.3f} us, off {measured['off']:.3f} us per request, "
              f"overhead {measured['on'] - measured['off']:.3f} us", flush=True)
    fold = worst_case_fold_us(args.rounds * 3)
    median = {key: statistics.median(r[key] for r in rounds) for key in ("on", "off", "overhead_us")}
    result = {
        **result_header("request_metrics_cost"),
        "requests": args.requests, "rounds_count": args.rounds,
        "median_us_per_request": {**median, "worst_case_fold_us": fold,
                                  "worst_case_overhead_us": median["overhead_us"] + fold},
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "cpu_pressure_avg10": cpu_pressure(),
        "rounds": rounds,
    }
    write_result(REPO_ROOT / "bench" / "results" / args.output, result)
    print(result["median_us_per_request"], "load average", result["load_average_after"])


if __name__ == "__main__":
    main()
