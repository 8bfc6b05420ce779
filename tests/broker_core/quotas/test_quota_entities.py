"""Which quota a client gets: Kafka's eight precedence levels and who shares the budget."""

from __future__ import annotations

import pytest

from broker_core.quotas.entities import (
    DEFAULT,
    PRODUCER_BYTE_RATE,
    ClientQuotas,
    QuotaEntity,
    QuotaEntityError,
    client_identity,
    validate_quota,
)

ALICE_APP = client_identity("app", "User:alice")

# Kafka's order, most specific first; each row's entity beats every row below it.
LEVELS = [
    (QuotaEntity("alice", "app"), ("alice", "app")),
    (QuotaEntity("alice", DEFAULT), ("alice", "app")),
    (QuotaEntity("alice", None), ("alice", "")),
    (QuotaEntity(DEFAULT, "app"), ("alice", "app")),
    (QuotaEntity(DEFAULT, DEFAULT), ("alice", "app")),
    (QuotaEntity(DEFAULT, None), ("alice", "")),
    (QuotaEntity(None, "app"), ("", "app")),
    (QuotaEntity(None, DEFAULT), ("", "app")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_configured_entity_gives_the_quota(level: int) -> None:
    configured = {entity: {PRODUCER_BYTE_RATE: 1000.0 + i} for i, (entity, _) in enumerate(LEVELS) if i >= level}
    match = ClientQuotas(configured).resolve(ALICE_APP, PRODUCER_BYTE_RATE)
    assert match is not None
    assert match.entity == LEVELS[level][0]
    assert match.limit == 1000.0 + level
    assert match.group == LEVELS[level][1]


def test_a_quota_on_another_user_or_client_does_not_apply() -> None:
    quotas = ClientQuotas({QuotaEntity("bob", None): {PRODUCER_BYTE_RATE: 1.0},
                           QuotaEntity(None, "other"): {PRODUCER_BYTE_RATE: 1.0}})
    assert quotas.resolve(ALICE_APP, PRODUCER_BYTE_RATE) is None


def test_a_level_without_the_key_is_skipped_for_a_less_specific_one() -> None:
    quotas = ClientQuotas({QuotaEntity("alice", "app"): {"consumer_byte_rate": 5.0},
                           QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 7.0}})
    match = quotas.resolve(ALICE_APP, PRODUCER_BYTE_RATE)
    assert match is not None and match.limit == 7.0


def test_requests_without_a_client_id_fall_under_the_client_id_default() -> None:
    quotas = ClientQuotas({QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 7.0}})
    match = quotas.resolve(client_identity(None), PRODUCER_BYTE_RATE)
    assert match is not None and match.group == ("", "")


def test_every_connection_is_the_anonymous_user_until_brokers_authenticate() -> None:
    quotas = ClientQuotas({QuotaEntity("ANONYMOUS", None): {PRODUCER_BYTE_RATE: 3.0}})
    match = quotas.resolve(client_identity("any"), PRODUCER_BYTE_RATE)
    assert match is not None and match.limit == 3.0


@pytest.mark.parametrize("parts, message", [
    ([], "names a user"),
    ([("ip", "10.0.0.1")], "unsupported quota entity type"),
    ([("user", "a"), ("user", "b")], "duplicate entity type"),
])
def test_entities_kafka_refuses_are_refused(parts: list, message: str) -> None:
    with pytest.raises(QuotaEntityError, match=message):
        QuotaEntity.from_parts(parts)


def test_a_null_name_is_the_default_entity() -> None:
    entity = QuotaEntity.from_parts([("client-id", None), ("user", "alice")])
    assert entity == QuotaEntity("alice", DEFAULT)
    assert entity.parts() == [("user", "alice"), ("client-id", None)]


@pytest.mark.parametrize("key, value, message", [
    ("producer_byte_rate", 0.0, "greater than 0"),
    ("producer_byte_rate", -5.0, "greater than 0"),
    ("consumer_byte_rate", 1.5, "whole number"),
    ("bytes_per_second", 10.0, "invalid quota key"),
    ("request_percentage", float("nan"), "greater than 0"),
])
def test_quota_values_kafka_refuses_are_refused(key: str, value: float, message: str) -> None:
    with pytest.raises(QuotaEntityError, match=message):
        validate_quota(key, value)


def test_fractional_request_percentage_and_mutation_rate_are_accepted() -> None:
    validate_quota("request_percentage", 12.5)
    validate_quota("controller_mutation_rate", 0.5)


def test_the_user_entity_is_the_principals_name() -> None:
    quotas = ClientQuotas({QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 10.0},
                           QuotaEntity("arn:aws:iam::123456789012:role/ingest", None): {PRODUCER_BYTE_RATE: 20.0}})
    assert quotas.resolve(client_identity("x", "User:alice"), PRODUCER_BYTE_RATE).limit == 10.0
    role = client_identity("x", "User:arn:aws:iam::123456789012:role/ingest")
    assert quotas.resolve(role, PRODUCER_BYTE_RATE).limit == 20.0
    assert quotas.resolve(client_identity("x", "User:bob"), PRODUCER_BYTE_RATE) is None


def test_an_unauthenticated_client_is_user_anonymous_and_gets_the_default_user_quota() -> None:
    quotas = ClientQuotas({QuotaEntity(DEFAULT, None): {PRODUCER_BYTE_RATE: 5.0},
                           QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 10.0}})
    match = quotas.resolve(client_identity("x"), PRODUCER_BYTE_RATE)
    assert match is not None and match.limit == 5.0 and match.group == ("ANONYMOUS", "")
