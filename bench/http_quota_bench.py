"""HTTP quota accuracy: bytes the front end accepts per second under a byte-rate quota, over the quota.

One local stack (moto, one broker, the HTTP adapter with its 4 worker processes: four "Lambda
instances", each with its own container and quota cache, sharing one DynamoDB bucket per principal).
A user quota is set on the adapter's caller (its IAM ARN as the user entity). ``--clients`` threads
then call as fast as they are let, each request going to whichever worker accepts it, and wait out
a 429 for the ``retry_after_ms`` of its body (Retry-After itself is whole seconds). Producers POST a
request of ``--record-bytes`` values (``--records`` per request); consumers GET a pre-filled
partition from offset 0 again and again with max_bytes of 64 KiB. After ``--warmup`` seconds, the
accepted bytes (request bodies of 200 answers for produce; answer bodies for fetch, which is what
each quota counts) are summed over ``--measure`` seconds: the figure is that rate over the quota
(goal 0.9-1.1). Medians over ``--runs`` go to bench/results/http_quota_bench.json.

    .venv/bin/python bench/http_quota_bench.py --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import result_header, write_result  # noqa: E402
from broker_core.client import FloeClient  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from functions.local_adapter import LOCAL_CALLER_ARN  # noqa: E402
from functions.quotas import BURST_S, QUOTAS_TTL_S  # noqa: E402

KIB = 1024
QUOTAS = {"producer_byte_rate": (256 * KIB, 1024 * KIB), "consumer_byte_rate": (256 * KIB, 1024 * KIB)}
READ_TOPIC, WRITE_TOPIC = "http-quota-read", "http-quota-write"
FETCH_MAX_BYTES = 64 * KIB


class Api:
    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.token = parts.hostname or "127.0.0.1", parts.port or 80, token

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            connection.request(method, path, body=body, headers={"Authorization": f"Bearer {self.token}",
                                                                 "Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


def set_quota(servers: str, key: str, value: float | None) -> None:
    async def alter() -> None:
        async with FloeClient(servers, client_id="http-quota-bench") as client:
            if value is None:
                await client.alter_client_quotas([("user", LOCAL_CALLER_ARN)], {}, [key])
            else:
                await client.alter_client_quotas([("user", LOCAL_CALLER_ARN)], {key: value})

    asyncio.run(alter())
    time.sleep(QUOTAS_TTL_S + BURST_S + 0.5)  # every worker's container has re-read the quotas; buckets refilled


def drive(api: Api, key: str, body: bytes, warmup_s: float, measure_s: float, clients: int) -> dict[str, Any]:
    """Run ``clients`` threads for warmup + measure; accepted bytes per second over the measured part."""
    start = time.monotonic()
    begin, end = start + warmup_s, start + warmup_s + measure_s
    accepted, refused, errors = [0] * clients, [0] * clients, [0] * clients
    lock = threading.Lock()

    def client(number: int) -> None:
        while (now := time.monotonic()) < end:
            if key == "producer_byte_rate":
                status, answer = api.call("POST", f"/v1/topics/{WRITE_TOPIC}/records", body)
                counted = len(body)
            else:
                status, answer = api.call("GET", f"/v1/topics/{READ_TOPIC}/partitions/0/records?offset=0"
                                                 f"&max_bytes={FETCH_MAX_BYTES}")
                counted = len(answer)
            if status == 200:
                if begin <= now:
                    with lock:
                        accepted[number] += counted
            elif status == 429:
                refused[number] += 1
                time.sleep(json.loads(answer)["retry_after_ms"] / 1000)
            else:
                errors[number] += 1
                time.sleep(0.05)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"bytes_per_s": sum(accepted) / measure_s, "refused_429": sum(refused), "other_errors": sum(errors)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--records", type=int, default=8)
    parser.add_argument("--record-bytes", type=int, default=4000)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--measure", type=float, default=20.0)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "http_quota_bench.json")
    args = parser.parse_args()
    value = base64.b64encode(b"h" * args.record_bytes).decode()
    body = json.dumps({"records": [{"value": {"type": "BINARY", "data": value}}] * args.records}).encode()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="http-quota-bench-") as scratch:
        stack = LocalStack(directory=Path(scratch) / "stack", brokers=1, http=True,
                           overrides={"log.retention.check.interval.ms": "2000"})
        stack.start()
        try:
            servers = stack.bootstrap_servers
            info = stack.describe()["http"]
            api = Api(info["url"], info["token"])

            async def topics() -> None:
                async with FloeClient(servers) as client:
                    await client.create_topic(WRITE_TOPIC, 1, 1, {"retention.bytes": str(64 * 1024 * KIB)})
                    await client.create_topic(READ_TOPIC, 1, 1, {})

            asyncio.run(topics())
            for _ in range(40):  # about 1.3 MB to read back
                assert api.call("POST", f"/v1/topics/{READ_TOPIC}/records", body)[0] == 200
            for number in range(args.runs):
                run: dict[str, Any] = {}
                for key, quotas in QUOTAS.items():
                    for quota in quotas:
                        set_quota(servers, key, quota)
                        found = drive(api, key, body, args.warmup, args.measure, args.clients)
                        set_quota(servers, key, None)
                        found["rate_over_quota"] = found["bytes_per_s"] / quota
                        run[f"{key}_{quota // KIB}_kib_s"] = {"quota_bytes_per_s": quota, **found}
                        print(f"run {number + 1}: {key} {quota // KIB} KiB/s: {found['rate_over_quota']:.3f} "
                              f"({found['refused_429']} refused)", flush=True)
                runs.append(run)
        finally:
            stack.stop(save_state=False)
    median = {name: statistics.median(run[name]["rate_over_quota"] for run in runs) for name in runs[0]}
    result = {
        **result_header("http_quota_bench"),
        "settings": {"runs": args.runs, "clients": args.clients, "records_per_request": args.records,
                     "record_bytes": args.record_bytes, "request_body_bytes": len(body), "warmup_s": args.warmup,
                     "measure_s": args.measure, "fetch_max_bytes": FETCH_MAX_BYTES, "adapter_workers": 4,
                     "bucket_burst_s": BURST_S},
        "goals": {"rate_over_quota": [0.9, 1.1]},
        "median_rate_over_quota": median,
        "runs": runs,
    }
    write_result(args.output, result)
    for name, value in median.items():
        print(f"{name}: {value:.3f}")


if __name__ == "__main__":
    main()
