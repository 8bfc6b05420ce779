"""Broker memory under a listener attack, against the goal and against what the attack declares.

The attack: C connections (default 100) each send the 4-byte size prefix of a 100 MB request (legal:
under socket.request.max.bytes) and nothing more, and hold the connection open. A broker that
allocated a request's declared size on reading its prefix would need C x 100 MB; Floe's decoder
allocates with the bytes that arrive. During the attack kcat produces N records to a fresh topic and
reads them all back; the run fails if it does not get every record.

Measured per run (a fresh one-broker `floe local` stack each run): the broker's RSS (psutil, sampled every 10 ms)
just before the attack and its peak while the attackers are connected and kcat runs; growth = peak -
before. The goal is growth < 64 MiB; the ratio printed is growth / declared bytes. Medians of the
runs; results go to bench/results/listener_attack.json.

    .venv/bin/python bench/listener_attack.py [--runs 3] [--connections 100] [--records 100000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import psutil  # noqa: E402

from bench.broker_bench import RssSampler, create_topic  # noqa: E402
from bench.machine import machine_info, result_header, write_result  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402

MiB = 1024 * 1024
DECLARED_BYTES = 100_000_000
GOAL_GROWTH_MIB = 64.0
HOLD_S = 3.0  # the attackers stay connected this long after kcat is done


def kcat(stack: LocalStack, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", "-b", stack.bootstrap_servers, *args], input=stdin, capture_output=True,
                          timeout=300, check=True)


def produce_and_consume(stack: LocalStack, topic: str, records: int) -> dict[str, float]:
    """kcat -P then kcat -C of ``records`` records; raises unless every record comes back in order."""
    create_topic(stack.bootstrap_servers, topic)
    lines = [f"{topic}-{i:08d}".encode() for i in range(records)]
    started = time.perf_counter()
    kcat(stack, "-P", "-t", topic, "-p", "0", "-X", "linger.ms=20", stdin=b"\n".join(lines) + b"\n")
    produced = time.perf_counter()
    out = kcat(stack, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(records), "-e", "-q").stdout
    consumed = time.perf_counter()
    if out.split(b"\n")[:records] != lines:
        raise RuntimeError(f"kcat read back {len(out.splitlines())} records of {topic}, not the {records} produced")
    return {"produce_s": produced - started, "consume_s": consumed - produced}


def one_run(number: int, stack: LocalStack, connections: int, records: int) -> dict[str, object]:
    broker = psutil.Process(stack.processes[1].pid)
    produce_and_consume(stack, f"warm-up-{number}", 1000)  # code paths and buffers of normal traffic in place
    time.sleep(1)
    before = broker.memory_info().rss
    attackers: list[socket.socket] = []
    try:
        with RssSampler(broker.pid) as rss:
            for _ in range(connections):
                sock = socket.create_connection((stack.host, stack.processes[1].port), timeout=30)
                sock.sendall(struct.pack(">i", DECLARED_BYTES))
                attackers.append(sock)
            timings = produce_and_consume(stack, f"during-attack-{number}", records)
            time.sleep(HOLD_S)
        still_open = sum(1 for sock in attackers if _open(sock))
    finally:
        for sock in attackers:
            sock.close()
    return {"rss_before_mib": before / MiB, "rss_peak_mib": rss.peak / MiB, "growth_mib": (rss.peak - before) / MiB,
            "attackers_still_connected": still_open, "kcat_records": records, **timings}


def _open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "results" / "listener_attack.json")
    args = parser.parse_args()
    if shutil.which("kcat") is None:
        sys.exit("kcat is not installed (make sysdeps)")
    runs = []
    for number in range(args.runs):
        # A fresh broker per run: memory an earlier attack made the broker take would hide the growth.
        with tempfile.TemporaryDirectory(prefix="listener-attack-") as scratch:
            stack = LocalStack(directory=Path(scratch) / "stack", brokers=1)
            stack.start()
            try:
                runs.append(one_run(number, stack, args.connections, args.records))
            finally:
                stack.stop(save_state=False)
        print(f"run {number + 1}/{args.runs}: RSS {runs[-1]['rss_before_mib']:.1f} -> peak "
              f"{runs[-1]['rss_peak_mib']:.1f} MiB (growth {runs[-1]['growth_mib']:.1f} MiB), "
              f"{runs[-1]['attackers_still_connected']}/{args.connections} attackers connected, "
              f"kcat {args.records} records produced and read back", flush=True)
    growth = statistics.median(run["growth_mib"] for run in runs)
    declared_mib = args.connections * DECLARED_BYTES / MiB
    result = {
        **result_header("listener_attack", {**machine_info(), "load_average_at_end": os.getloadavg()}),
        "settings": {"connections": args.connections, "declared_bytes_each": DECLARED_BYTES, "runs": args.runs,
                     "kcat_records": args.records, "hold_s": HOLD_S},
        "runs": runs,
        "median_growth_mib": growth,
        "max_growth_mib": max(run["growth_mib"] for run in runs),
        "declared_mib": declared_mib,
        "ratio_growth_to_declared": growth / declared_mib,
        "goal_growth_mib": GOAL_GROWTH_MIB,
        "goal_met": max(run["growth_mib"] for run in runs) < GOAL_GROWTH_MIB,
    }
    write_result(args.output, result)
    print(f"\nmedian of {args.runs} runs: broker RSS growth {growth:.1f} MiB under {args.connections} connections "
          f"declaring {declared_mib:,.0f} MiB in all (ratio {growth / declared_mib:.5f}); "
          f"goal < {GOAL_GROWTH_MIB:.0f} MiB: {'met' if result['goal_met'] else 'NOT met'} (max "
          f"{result['max_growth_mib']:.1f} MiB); kcat produce + consume succeeded in every run")


if __name__ == "__main__":
    main()
