"""The one retry policy: lost races are run again up to the budget, other errors pass at once."""

from __future__ import annotations

import asyncio

import pytest

from broker_core.retry import LOST_RACES, LostRace, RetryPolicy, retry_lost_races

FAST = RetryPolicy(attempts=3, base_s=0.0001, cap_s=0.001)


class Exhausted(Exception):
    pass


def test_a_lost_race_is_run_again_until_it_wins() -> None:
    calls = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise LostRace("moved")
        return "written"

    assert retry_lost_races(attempt, Exhausted) == "written"
    assert len(calls) == 3


def test_races_lost_on_every_attempt_raise_the_callers_error_with_the_attempt_count() -> None:
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise LostRace("moved")

    with pytest.raises(Exhausted) as raised:
        retry_lost_races(attempt, Exhausted)
    assert raised.value.args == (LOST_RACES.attempts,)
    assert len(calls) == LOST_RACES.attempts


def test_an_error_that_is_not_a_lost_race_passes_at_once() -> None:
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise KeyError("fenced")

    with pytest.raises(KeyError):
        retry_lost_races(attempt, Exhausted)
    assert len(calls) == 1


def test_the_async_variant_retries_what_the_predicate_allows_and_reports_each_retry() -> None:
    outcomes: list[Exception | str] = [TimeoutError("slow"), TimeoutError("slow"), "done"]
    retries: list[int] = []

    async def attempt() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    result = asyncio.run(FAST.call_async(attempt, lambda e: isinstance(e, TimeoutError),
                                         on_retry=lambda error, retry, delay: retries.append(retry)))
    assert result == "done"
    assert retries == [1, 2]


def test_the_async_variant_raises_the_last_error_when_the_attempts_run_out() -> None:
    async def attempt() -> str:
        raise TimeoutError("slow")

    with pytest.raises(TimeoutError):
        asyncio.run(FAST.call_async(attempt, lambda e: isinstance(e, TimeoutError)))
