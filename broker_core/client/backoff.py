"""The pause between a client's attempts at a request: exponential backoff with a cap.

`FloeClient` sleeps ``backoff_s(attempt, retry_backoff_s)`` before each retry of a retriable error,
and `GroupAdmin` does the same while a group's coordinator moves or loads, so both back off alike:
the first retry comes fast, later ones no more often than once per ``cap_s``.
"""

from __future__ import annotations

RETRY_BACKOFF_S = 0.05  # the first pause, doubled per attempt
MAX_BACKOFF_S = 1.0


def backoff_s(attempt: int, base_s: float, cap_s: float = MAX_BACKOFF_S) -> float:
    """Seconds to wait before retry number ``attempt`` (0 for the first retry): ``base_s`` doubled
    per attempt, at most ``cap_s``."""
    return min(base_s * (2 ** attempt), cap_s)
