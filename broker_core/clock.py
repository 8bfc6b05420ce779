"""Wall-clock time in milliseconds since the Unix epoch: the unit of Kafka's record timestamps and of
every time Floe stores (registrations, commits, manifest rows, retention).

One function, so no module keeps its own copy; deadlines and timeouts use a monotonic clock instead.
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
