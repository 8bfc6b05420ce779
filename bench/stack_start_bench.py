"""How long a local stack takes to start: moto plus N broker processes until every broker serves.

Each run starts a fresh stack (`broker_core.local_stack.LocalStack`, what `floe local up` and the
integration tests' fixtures start) in a new directory and records:

- moto: from the start until moto answers and the metadata tables exist;
- ready: from launching the brokers until the last of them has written its ready file;
- each broker's own account of its start (its "started in" log line): until registered, reading the
  metadata and opening its replicas, starting its services.

The peer is the floor of a broker process on the same machine in the same run: the time to start a
Python interpreter that imports the broker (`broker_core.server.assembly`), N of them at once, as
the stack launches its brokers. A broker can be ready no sooner than that.

    .venv/bin/python bench/stack_start_bench.py [--brokers 3] [--runs 5] [--output bench/results/<file>.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import machine_info  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402

_STARTED = re.compile(r"broker (\d+) started in ([\d.]+) s: registered after ([\d.]+) s, metadata read and "
                      r"(\d+) replicas open after ([\d.]+) s more, services started in ([\d.]+) s")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def import_floor(brokers: int) -> float:
    """Seconds until ``brokers`` interpreters started at once have all imported the broker."""
    started = time.monotonic()
    processes = [subprocess.Popen([sys.executable, "-c", "import broker_core.server.assembly"], cwd=REPO_ROOT,
                                  env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
                 for _ in range(brokers)]
    for process in processes:
        if process.wait() != 0:
            raise RuntimeError("importing broker_core.server.assembly failed")
    return time.monotonic() - started


def one_run(brokers: int) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="floe-stack-start-"))
    stack = LocalStack(directory=directory, brokers=brokers)
    try:
        started = time.monotonic()
        stack.start()
        total = time.monotonic() - started
        phases = []
        for broker_id in sorted(stack.processes):
            text = stack.processes[broker_id].log_path.read_text(errors="replace")
            found = _STARTED.search(text)
            if found:
                phases.append({"broker": int(found[1]), "started_s": float(found[2]), "registered_s": float(found[3]),
                               "metadata_s": float(found[5]), "services_s": float(found[6])})
    finally:
        stack.stop(save_state=False)
        shutil.rmtree(directory, ignore_errors=True)
    return {"stack_start_s": round(total, 2), "brokers": phases, "load_average": load_average()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    runs = []
    for number in range(1, args.runs + 1):
        floor = import_floor(args.brokers)
        run = one_run(args.brokers)
        run["import_floor_s"] = round(floor, 2)
        run["ratio_to_floor"] = round(run["stack_start_s"] / floor, 2)
        runs.append(run)
        services = [b["services_s"] for b in run["brokers"]]
        print(f"run {number}: stack ready in {run['stack_start_s']:.1f} s, import floor {floor:.1f} s "
              f"(x{run['ratio_to_floor']}), services {services} s, load {run['load_average']}", flush=True)
    summary = {
        "median_stack_start_s": statistics.median(r["stack_start_s"] for r in runs),
        "median_import_floor_s": statistics.median(r["import_floor_s"] for r in runs),
        "median_ratio_to_floor": statistics.median(r["ratio_to_floor"] for r in runs),
        "median_services_s": statistics.median(b["services_s"] for r in runs for b in r["brokers"]),
    }
    print(json.dumps(summary))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({
            "bench": "stack_start", "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv), "machine": machine_info(), "brokers": args.brokers,
            "runs": runs, "summary": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
