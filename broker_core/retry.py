"""Floe's one retry policy for the DynamoDB and S3 calls that the application itself repeats.

Throttling and transient failures of a single DynamoDB request are botocore's to retry, in its
standard mode, configured once in ``broker_core.dynamodb_tables``. What is left is retried here, on
tenacity, with bounded attempts and capped exponential backoff with full jitter (sleep
``uniform(0, min(cap, base * 2**n))`` before retry n + 1, as AWS recommends): a write that lost a
race it may safely run again (a DynamoDB transaction cancelled by a conflicting one, a
read-merge-write whose conditional write found the item changed), and S3 requests, whose
retriable errors ``tiered_storage.object_store`` names. A failed condition that decides the
outcome (a fenced epoch, a taken lease) is never retried: it is the answer. ``retry_lost_races``
and ``RetryPolicy.call`` sleep in the calling thread, so, like the pynamodb calls they wrap, they
run in worker threads, never on the event loop; ``RetryPolicy.call_async`` is for coroutines and
sleeps with asyncio.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

_T = TypeVar("_T")


class LostRace(Exception):
    """Raised by an attempt that lost to a concurrent writer (a version condition, a transaction conflict).

    ``retry_lost_races`` runs such an attempt again.
    """


@dataclass(frozen=True)
class RetryPolicy:
    """How often to try and how long to wait between tries (capped exponential backoff, full jitter)."""

    attempts: int = 20
    base_s: float = 0.01
    cap_s: float = 0.5

    def _wait(self) -> wait_random_exponential:
        return wait_random_exponential(multiplier=self.base_s, max=self.cap_s)

    def call(self, attempt: Callable[[], _T], retriable: Callable[[BaseException], bool]) -> _T:
        """Run ``attempt`` until it returns, raises an error ``retriable`` refuses, or the attempts run out.

        The last error is raised as is.
        """
        retrying = Retrying(retry=retry_if_exception(retriable), stop=stop_after_attempt(self.attempts),
                            wait=self._wait(), reraise=True)
        return retrying(attempt)

    async def call_async(
        self,
        attempt: Callable[[], Awaitable[_T]],
        retriable: Callable[[BaseException], bool],
        on_retry: Callable[[BaseException, int, float], None] | None = None,
    ) -> _T:
        """The coroutine variant of `call`; ``on_retry(error, retry number, delay)`` runs before each sleep."""

        def before_sleep(state: RetryCallState) -> None:
            if on_retry is not None and state.outcome is not None and state.next_action is not None:
                on_retry(state.outcome.exception(), state.attempt_number, state.next_action.sleep)

        async def run() -> _T:  # tenacity awaits only what a coroutine function returns
            return await attempt()

        retrying = AsyncRetrying(retry=retry_if_exception(retriable), stop=stop_after_attempt(self.attempts),
                                 wait=self._wait(), reraise=True, before_sleep=before_sleep)
        return await retrying(run)


LOST_RACES = RetryPolicy()
"""The policy of every write that lost a race it may run again (DynamoDB transactions and read-merge-writes)."""


def retry_lost_races(attempt: Callable[[], _T], exhausted: Callable[[int], Exception]) -> _T:
    """Run ``attempt`` again while it raises LostRace (bounded, jittered backoff between tries).

    When every one of ``LOST_RACES.attempts`` lost, raises ``exhausted(attempts)`` (the caller's
    domain error, chained to the last LostRace).
    """
    try:
        return LOST_RACES.call(attempt, lambda error: isinstance(error, LostRace))
    except LostRace as err:
        raise exhausted(LOST_RACES.attempts) from err

