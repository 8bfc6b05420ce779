"""CPU cost of a SCRAM login on the broker: ScramServer per handshake, against the client's side of it.

A broker stores (salt, StoredKey, ServerKey), so its side of SCRAM is a few HMACs and one hash: the
salting (PBKDF2 with ``iterations`` rounds) is paid by the client. The peer, in the same run on the
same thread, is that client side (ScramClient: PBKDF2 plus the same HMACs), which a login cannot
avoid; the ratio is server / client. Also measured: SASL/PLAIN's check of a password against the same
credential (`verify_password`), which salts on the broker and so costs the broker what SCRAM costs
the client. Times are the thread's CPU time (``time.thread_time``), so other load on a shared machine
changes them less than wall time; the lookup is an in-memory dict (the broker's credential cache), so
DynamoDB is not in the numbers. Medians of ``--runs`` runs of ``--handshakes`` handshakes each;
writes bench/results/scram_handshake.json.

    .venv/bin/python bench/scram_handshake.py [--runs 5] [--handshakes 200]

`handshake_cost` is the function the connection set-up bench can call for the same numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import cpu_pressure, result_header, write_result  # noqa: E402
from broker_core.security.scram import (  # noqa: E402
    SCRAM_MECHANISMS,
    ScramClient,
    ScramCredential,
    ScramServer,
    make_credential,
    verify_password,
)

USER, PASSWORD = "bench-user", "bench-password"
ITERATIONS = (4096, 8192)


def handshake_cost(mechanism: str, iterations: int, handshakes: int) -> dict[str, float]:
    """Mean CPU microseconds per handshake of the server side, the client side, and a PLAIN check."""
    credential = make_credential(mechanism, PASSWORD, iterations)

    async def lookup(username: str, wanted: str) -> ScramCredential | None:
        return credential if (username, wanted) == (USER, mechanism) else None

    async def run() -> tuple[float, float]:
        server_s = client_s = 0.0
        for _ in range(handshakes):
            started = time.thread_time()
            server = ScramServer(mechanism, lookup)
            client = ScramClient(mechanism, USER, PASSWORD)
            first = client.first()
            client_s += time.thread_time() - started
            started = time.thread_time()
            server_first = await server.step(first)
            server_s += time.thread_time() - started
            started = time.thread_time()
            client_final = client.final(server_first)
            client_s += time.thread_time() - started
            started = time.thread_time()
            server_final = await server.step(client_final)
            server_s += time.thread_time() - started
            started = time.thread_time()
            client.verify(server_final)
            client_s += time.thread_time() - started
            assert server.username == USER
        return server_s, client_s

    server_s, client_s = asyncio.run(run())
    started = time.thread_time()
    for _ in range(handshakes):
        assert verify_password(credential, PASSWORD)
    plain_s = time.thread_time() - started
    return {"server_us": server_s / handshakes * 1e6, "client_us": client_s / handshakes * 1e6,
            "plain_check_us": plain_s / handshakes * 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--handshakes", type=int, default=200)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench/results/scram_handshake.json")
    args = parser.parse_args()
    result = result_header("scram_handshake")
    result["cpu_pressure_avg10_before"] = cpu_pressure()
    result["runs"], result["handshakes_per_run"] = args.runs, args.handshakes
    cases = {}
    for mechanism in SCRAM_MECHANISMS:
        for iterations in ITERATIONS:
            samples = [handshake_cost(mechanism, iterations, args.handshakes) for _ in range(args.runs)]
            median = {key: statistics.median(sample[key] for sample in samples) for key in samples[0]}
            case = {**{key: round(value, 1) for key, value in median.items()},
                    "server_over_client": round(median["server_us"] / median["client_us"], 4),
                    "server_handshakes_per_cpu_second": round(1e6 / median["server_us"]),
                    "plain_checks_per_cpu_second": round(1e6 / median["plain_check_us"]),
                    "server_us_runs": [round(sample["server_us"], 1) for sample in samples]}
            cases[f"{mechanism}/{iterations}"] = case
            print(f"{mechanism} i={iterations}: server {case['server_us']} us, client {case['client_us']} us "
                  f"(server/client {case['server_over_client']}), PLAIN check {case['plain_check_us']} us",
                  flush=True)
    result["cases"] = cases
    result["cpu_pressure_avg10_after"] = cpu_pressure()
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
