"""What every benchmark records about the machine it ran on, so results from shared machines can be judged."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import sys
from collections.abc import Iterator
from pathlib import Path

_CONGESTION_CONTROL = "net/ipv4/tcp_congestion_control"


def machine_info() -> dict[str, object]:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu": model, "cpus": os.cpu_count(),
            # Loopback traffic between the local stack's processes pays for the congestion control:
            # BBR without the fq qdisc is paced in software (bench/loopback_tcp.py measures it).
            "tcp_congestion_control": tcp_congestion_control(),
            "default_qdisc": _proc_sys("net/core/default_qdisc")}


@contextlib.contextmanager
def system_tcp_congestion_control(name: str | None) -> Iterator[None]:
    """Make ``name`` the machine's TCP congestion control for new sockets while the block runs, then
    put the previous one back. Changes a system-wide setting, so it needs root; None changes nothing."""
    if name is None:
        yield
        return
    previous = tcp_congestion_control()
    setting = Path("/proc/sys", _CONGESTION_CONTROL)
    try:
        if previous is None:
            raise OSError(f"{setting} cannot be read")
        setting.write_text(name + "\n")
    except OSError as exc:
        raise SystemExit(f"cannot set the TCP congestion control to {name!r} ({exc}); it needs root and a "
                         f"name from {_proc_sys('net/ipv4/tcp_available_congestion_control')}") from exc
    try:
        yield
    finally:
        setting.write_text(f"{previous}\n")


def tcp_congestion_control() -> str | None:
    """The congestion control new TCP sockets get on this machine (None where it cannot be read)."""
    return _proc_sys(_CONGESTION_CONTROL)


def _proc_sys(name: str) -> str | None:
    try:
        return Path("/proc/sys", name).read_text().strip()
    except OSError:
        return None


def result_header(benchmark: str, machine: dict[str, object] | None = None) -> dict[str, object]:
    """The fields every result JSON opens with: the benchmark, the command that ran it, when, and on
    what machine (``machine`` when it was read earlier, e.g. under settings the run changed)."""
    return {"benchmark": benchmark,
            "command": f"python bench/{Path(sys.argv[0]).name} " + " ".join(sys.argv[1:]),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": machine_info() if machine is None else machine}


def write_result(path: Path, result: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


def cpu_pressure() -> float | None:
    """Linux PSI: share (percent, avg10) of the last 10 s in which some runnable task waited for a CPU."""
    try:
        for line in Path("/proc/pressure/cpu").read_text().splitlines():
            if line.startswith("some "):
                return float(line.split("avg10=")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return None
