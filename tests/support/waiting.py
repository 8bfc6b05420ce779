"""Waiting in tests for something that happens elsewhere (a broker process, a consumer thread, a timer).

A test that needs another process or task to reach a state polls a condition with `wait_until`
(blocking) or `wait_until_async` (inside a coroutine, without blocking the event loop) instead of
sleeping a fixed time: it goes on as soon as the condition holds and fails with an AssertionError
naming what it waited for when ``timeout_s`` passes first (``what`` may be a function, called
then, to describe the state the wait ended in). The condition's truthy value is returned, so a
test can wait for a thing and use it in one step. Time is measured on the monotonic clock; the
condition is always tried once more after the last sleep before the wait gives up.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
Description = str | Callable[[], str]


def _timed_out(what: Description, timeout_s: float) -> AssertionError:
    return AssertionError(f"{what if isinstance(what, str) else what()}: not within {timeout_s:g}s")


def wait_until(condition: Callable[[], T], what: Description, timeout_s: float, interval_s: float = 0.1) -> T:
    """Call ``condition`` every ``interval_s`` until it returns something truthy, and return that.

    Raises AssertionError("<what>: not within <timeout_s>s") once ``timeout_s`` has passed.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout_s)
        time.sleep(interval_s)


async def wait_until_async(
    condition: Callable[[], T | Awaitable[T]], what: Description, timeout_s: float, interval_s: float = 0.1
) -> T:
    """`wait_until` for coroutines: ``condition`` may be a plain or an async function; sleeps with asyncio."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout_s)
        await asyncio.sleep(interval_s)
