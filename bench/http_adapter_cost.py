"""What the local HTTP adapter itself costs per produce request: the bench's HTTP side without the function.

`bench/http_bench.py` times HTTP produce through the local adapter, which stands in for API Gateway
and Lambda's invoke: it parses the HTTP request, builds the API Gateway event, and writes the answer
back, over a new loopback connection per request (every answer closes its connection, as the adapter
does so an idle client never holds a worker). In AWS that work is API Gateway's, not the function's.
This runs the same adapter (`functions.local_adapter.LocalApiServer`, one worker process, as each of
the bench's four) with a handler that does no work and answers what a 500-record produce answers,
and sends it the bench's very request bodies one at a time: the per-request time is the adapter's
and the client's share of each HTTP request in the bench.

    .venv/bin/python bench/http_adapter_cost.py --requests 200 --runs 5
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.http_bench import RECORDS_PER_REQUEST, HttpSide, http_body, percentile  # noqa: E402
from bench.machine import result_header, write_result  # noqa: E402
from functions.local_adapter import LocalApiServer  # noqa: E402

TOKEN = "adapter-cost-bench"
# A produce answer of 500 records, as the function writes it.
ANSWER = json.dumps({"results": [{"partition_id": n % 6, "offset": 1_000_000 + n, "timestamp": 1_795_807_200_391}
                                 for n in range(RECORDS_PER_REQUEST)]}, separators=(",", ":"))


def _noop_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": ANSWER,
            "isBase64Encoded": False, "cookies": []}


def _serve(listening: socket.socket) -> None:
    LocalApiServer(listening, TOKEN, _noop_handler).serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "http_adapter_cost.json")
    args = parser.parse_args()
    bodies = [http_body(n * RECORDS_PER_REQUEST) for n in range(args.requests)]
    listening = socket.create_server(("127.0.0.1", 0), backlog=64)
    worker = multiprocessing.get_context("fork").Process(target=_serve, args=(listening,), daemon=True)
    worker.start()
    try:
        side = HttpSide(f"http://127.0.0.1:{listening.getsockname()[1]}", TOKEN)
        side.run("bench", bodies[:20], 1)
        runs = []
        for _ in range(args.runs):
            latencies = []
            for body in bodies:
                started = time.perf_counter()
                side.post("/v1/topics/bench/records", body)
                latencies.append(time.perf_counter() - started)
            runs.append({"p50_ms": round(percentile(latencies, 0.5) * 1000, 3),
                         "p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
                         "load_average_1min": round(os.getloadavg()[0], 2)})
            print(f"adapter round trip, no-op handler: p50 {runs[-1]['p50_ms']} ms, p99 {runs[-1]['p99_ms']} ms; "
                  f"load average {os.getloadavg()[0]:.2f}", flush=True)
        summary = {"body_bytes": len(bodies[0]), "requests": args.requests,
                   "median_p50_ms": statistics.median(r["p50_ms"] for r in runs), "runs": runs}
        write_result(args.output, {**result_header("http_adapter_cost"), **summary})
        print(json.dumps(summary))
    finally:
        worker.terminate()
        worker.join()
        listening.close()


if __name__ == "__main__":
    main()
