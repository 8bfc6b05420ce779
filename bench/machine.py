"""What every benchmark records about the machine it ran on, so results from shared machines can be judged."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def machine_info() -> dict[str, object]:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu": model, "cpus": os.cpu_count()}


def cpu_pressure() -> float | None:
    """Linux PSI: share (percent, avg10) of the last 10 s in which some runnable task waited for a CPU."""
    try:
        for line in Path("/proc/pressure/cpu").read_text().splitlines():
            if line.startswith("some "):
                return float(line.split("avg10=")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return None
