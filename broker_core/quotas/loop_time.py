"""Event-loop time of one coroutine: what ``request_percentage`` measures.

A broker handles requests on one event loop, so the time a request costs the other clients is the
time its handler runs on the loop, not the time it spends waiting (for replication, for a long-poll
fetch, for DynamoDB in a worker thread). `LoopTimed` wraps a coroutine and adds up the time of each
of its steps (from being resumed to its next suspension), as Kafka counts a request's time on its
request handler threads.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

_T = TypeVar("_T")


class LoopTimed(Generic[_T]):
    """Awaitable running ``coro`` while adding its on-loop time to ``elapsed_s``."""

    __slots__ = ("coro", "elapsed_s")

    def __init__(self, coro: Coroutine[Any, Any, _T]) -> None:
        self.coro = coro
        self.elapsed_s = 0.0

    def __await__(self) -> Generator[Any, Any, _T]:
        coro = self.coro
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                self.elapsed_s += time.perf_counter() - started
            value, error = None, None
            try:
                value = yield yielded
            except BaseException as exc:  # cancellation or an exception thrown in: pass it to the coroutine
                error = exc
