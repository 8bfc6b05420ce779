"""QuotaStore against moto: quotas written per entity read back whole, removal, concurrent writers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from broker_core.aws import AwsSettings
from broker_core.quotas.entities import DEFAULT, QuotaEntity
from broker_core.quotas.store import QuotaStore


@pytest.fixture
def store(aws_settings: AwsSettings) -> QuotaStore:
    store = QuotaStore(aws_settings)
    store.ensure_table()
    return store


def test_quotas_of_every_entity_kind_read_back(store: QuotaStore) -> None:
    store.alter(QuotaEntity("alice", "app/1"), {"producer_byte_rate": 1024.0}, ())
    store.alter(QuotaEntity(DEFAULT, None), {"request_percentage": 12.5}, ())
    store.alter(QuotaEntity(None, DEFAULT), {"consumer_byte_rate": 2048.0, "controller_mutation_rate": 0.5}, ())
    assert store.load().by_entity == {
        QuotaEntity("alice", "app/1"): {"producer_byte_rate": 1024.0},
        QuotaEntity(DEFAULT, None): {"request_percentage": 12.5},
        QuotaEntity(None, DEFAULT): {"consumer_byte_rate": 2048.0, "controller_mutation_rate": 0.5},
    }


def test_an_alteration_merges_with_the_stored_quotas_and_removal_of_the_last_deletes(store: QuotaStore) -> None:
    entity = QuotaEntity(None, "c")
    store.alter(entity, {"producer_byte_rate": 1.0, "consumer_byte_rate": 2.0}, ())
    store.alter(entity, {"producer_byte_rate": 3.0}, ["consumer_byte_rate"])
    assert store.load().by_entity == {entity: {"producer_byte_rate": 3.0}}
    store.alter(entity, {}, ["producer_byte_rate"])
    assert store.load().by_entity == {}
    store.alter(entity, {}, ["producer_byte_rate"])  # removing what is not there changes nothing
    assert store.load().by_entity == {}


def test_concurrent_writers_of_one_entity_lose_no_key(store: QuotaStore) -> None:
    entity = QuotaEntity("shared", None)
    keys = ["producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"]
    with ThreadPoolExecutor(len(keys)) as pool:
        list(pool.map(lambda key: store.alter(entity, {key: 10.0}, ()), keys))
    assert store.load().by_entity == {entity: dict.fromkeys(keys, 10.0)}
