"""AlterClientQuotas entry checks and DescribeClientQuotas filters, with Kafka's semantics."""

from __future__ import annotations

import asyncio

import pytest

from broker_core.quotas.admin import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    QuotaFilter,
    describe,
    parse_alteration,
)
from broker_core.quotas.entities import DEFAULT, QuotaEntity, QuotaEntityError
from broker_core.quotas.loop_time import LoopTimed
from broker_core.quotas.store import entity_from_key, entity_key

STORED = {
    QuotaEntity("alice", None): {"producer_byte_rate": 1.0},
    QuotaEntity("alice", "app"): {"producer_byte_rate": 2.0},
    QuotaEntity(DEFAULT, None): {"producer_byte_rate": 3.0},
    QuotaEntity(None, "app"): {"consumer_byte_rate": 4.0},
    QuotaEntity(None, DEFAULT): {"consumer_byte_rate": 5.0},
}


def entities(components: list, strict: bool) -> list[QuotaEntity]:
    return [entity for entity, _ in describe(STORED, QuotaFilter.parse(components, strict))]


def test_no_components_and_not_strict_describes_everything() -> None:
    assert len(entities([], strict=False)) == len(STORED)


def test_an_exact_user_match_not_strict_includes_its_client_pairs() -> None:
    assert entities([("user", MATCH_EXACT, "alice")], strict=False) == [
        QuotaEntity("alice", None), QuotaEntity("alice", "app")]


def test_strict_excludes_entities_with_parts_the_filter_does_not_name() -> None:
    assert entities([("user", MATCH_EXACT, "alice")], strict=True) == [QuotaEntity("alice", None)]


def test_default_match_and_any_specified_match() -> None:
    assert entities([("client-id", MATCH_DEFAULT, None)], strict=True) == [QuotaEntity(None, DEFAULT)]
    assert entities([("client-id", MATCH_SPECIFIED, None)], strict=True) == [
        QuotaEntity(None, DEFAULT), QuotaEntity(None, "app")]


@pytest.mark.parametrize("components, message", [
    ([("ip", MATCH_EXACT, "1.2.3.4")], "unsupported quota entity type"),
    ([("user", MATCH_EXACT, None)], "needs a name"),
    ([("user", 7, None)], "unknown match type"),
    ([("user", MATCH_DEFAULT, None), ("user", MATCH_EXACT, "a")], "duplicate"),
])
def test_filters_kafka_refuses_are_refused(components: list, message: str) -> None:
    with pytest.raises(QuotaEntityError, match=message):
        QuotaFilter.parse(components, strict=False)


def test_an_alteration_sets_and_removes() -> None:
    alteration = parse_alteration([("user", "alice")], [("producer_byte_rate", 1024.0, False),
                                                         ("consumer_byte_rate", 0.0, True)])
    assert alteration.entity == QuotaEntity("alice", None)
    assert alteration.set_values == {"producer_byte_rate": 1024.0}
    assert alteration.remove == ("consumer_byte_rate",)


@pytest.mark.parametrize("ops, message", [
    ([("bogus_rate", 1.0, False)], "invalid quota key 'bogus_rate'"),
    ([("bogus_rate", 0.0, True)], "invalid quota key"),
    ([("producer_byte_rate", 1.0, False), ("producer_byte_rate", 0.0, True)], "more than once"),
    ([("producer_byte_rate", -1.0, False)], "greater than 0"),
])
def test_alterations_kafka_refuses_are_refused(ops: list, message: str) -> None:
    with pytest.raises(QuotaEntityError, match=message):
        parse_alteration([("client-id", "c")], ops)


@pytest.mark.parametrize("entity", [
    QuotaEntity("alice", None), QuotaEntity(None, DEFAULT), QuotaEntity(DEFAULT, "a/b=c"),
    QuotaEntity("<default>", "%41"), QuotaEntity("", "x"),
])
def test_stored_entity_keys_read_back_as_the_same_entity(entity: QuotaEntity) -> None:
    assert entity_from_key(entity_key(entity)) == entity


def test_a_user_named_default_is_not_the_default_user() -> None:
    assert entity_key(QuotaEntity("<default>", None)) != entity_key(QuotaEntity(DEFAULT, None))


def test_loop_time_counts_running_steps_not_waiting() -> None:
    async def handler() -> str:
        await asyncio.sleep(0.2)
        return "done"

    async def main() -> tuple[str, float]:
        timed = LoopTimed(handler())
        return await timed, timed.elapsed_s

    result, elapsed = asyncio.run(main())
    assert result == "done"
    assert elapsed < 0.1


def test_loop_time_passes_exceptions_through() -> None:
    async def handler() -> None:
        await asyncio.sleep(0)
        raise ValueError("bad request")

    async def main() -> None:
        await LoopTimed(handler())

    with pytest.raises(ValueError, match="bad request"):
        asyncio.run(main())
