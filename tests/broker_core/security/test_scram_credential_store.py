"""ScramCredentialStore against moto server: what is stored (never a password), all-or-nothing changes
per user, and the brokers' cache: answers kept for the TTL, dropped on a metadata change."""

from __future__ import annotations

import asyncio

import boto3
import pytest

from broker_core.aws import AwsSettings
from broker_core.security.credentials import (
    SCRAM_TABLE,
    CredentialNotFoundError,
    ScramCredentialStore,
    UserChange,
)
from broker_core.security.scram import ScramClient, ScramServer, make_credential, verify_password


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(aws_settings: AwsSettings, clock: FakeClock) -> ScramCredentialStore:
    store = ScramCredentialStore(aws_settings, cache_ttl_s=60.0, clock=clock)
    store.ensure_table()
    return store


@pytest.fixture
def other_writer(aws_settings: AwsSettings) -> ScramCredentialStore:
    """Another process's store over the same table (a CLI, another broker)."""
    return ScramCredentialStore(aws_settings)


def test_a_stored_credential_authenticates_its_password_through_the_store(store: ScramCredentialStore) -> None:
    credential = make_credential("SCRAM-SHA-512", "alice-secret", iterations=8192)
    store.alter(UserChange("alice", (credential,), ()))
    assert store.read("alice", "SCRAM-SHA-512") == credential

    async def login(password: str) -> str | None:
        server = ScramServer("SCRAM-SHA-512", store.get)
        client = ScramClient("SCRAM-SHA-512", "alice", password)
        server_first = await server.step(client.first())
        client.verify(await server.step(client.final(server_first)))
        return server.username

    assert asyncio.run(login("alice-secret")) == "alice"


def test_the_table_holds_salt_keys_and_iterations_and_never_the_password(
        store: ScramCredentialStore, aws_settings: AwsSettings) -> None:
    store.alter(UserChange("bob", (make_credential("SCRAM-SHA-256", "hunter2-password"),), ()))
    dynamodb = boto3.client("dynamodb", endpoint_url=aws_settings.endpoint_url, region_name=aws_settings.region)
    items = dynamodb.scan(TableName=aws_settings.table_prefix + SCRAM_TABLE)["Items"]
    assert len(items) == 1
    assert set(items[0]) == {"user", "mechanism", "salt", "stored_key", "server_key", "iterations"}
    assert b"hunter2-password" not in repr(items).encode()


def test_describe_lists_each_user_with_mechanisms_and_iterations(store: ScramCredentialStore) -> None:
    store.alter(UserChange("alice", (make_credential("SCRAM-SHA-256", "a", 4096),
                                     make_credential("SCRAM-SHA-512", "a", 8192)), ()))
    store.alter(UserChange("bob", (make_credential("SCRAM-SHA-512", "b", 16384),), ()))
    assert store.describe(None) == {"alice": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)],
                                    "bob": [("SCRAM-SHA-512", 16384)]}
    assert store.describe(["bob", "nobody"]) == {"bob": [("SCRAM-SHA-512", 16384)]}


def test_a_change_with_a_missing_deletion_writes_nothing_of_that_user(store: ScramCredentialStore) -> None:
    store.alter(UserChange("carol", (make_credential("SCRAM-SHA-256", "old"),), ()))
    with pytest.raises(CredentialNotFoundError):
        store.alter(UserChange("carol", (make_credential("SCRAM-SHA-256", "new"),), ("SCRAM-SHA-512",)))
    stored = store.read("carol", "SCRAM-SHA-256")
    assert stored is not None
    assert verify_password(stored, "old")
    store.alter(UserChange("carol", (), ("SCRAM-SHA-256",)))
    assert store.describe(["carol"]) == {}


def test_the_cache_answers_for_its_ttl_and_a_metadata_change_empties_it(
        store: ScramCredentialStore, other_writer: ScramCredentialStore, clock: FakeClock) -> None:
    first = make_credential("SCRAM-SHA-512", "one")
    other_writer.alter(UserChange("dave", (first,), ()))
    assert asyncio.run(store.get("dave", "SCRAM-SHA-512")) == first
    other_writer.alter(UserChange("dave", (), ("SCRAM-SHA-512",)))
    # Within the TTL and without a metadata change, the broker still answers from its cache.
    clock.now += 30
    assert asyncio.run(store.get("dave", "SCRAM-SHA-512")) == first
    asyncio.run(store.reload())
    assert asyncio.run(store.get("dave", "SCRAM-SHA-512")) is None


def test_a_cached_answer_expires_after_the_ttl(
        store: ScramCredentialStore, other_writer: ScramCredentialStore, clock: FakeClock) -> None:
    assert asyncio.run(store.get("erin", "SCRAM-SHA-256")) is None
    credential = make_credential("SCRAM-SHA-256", "pw")
    other_writer.alter(UserChange("erin", (credential,), ()))
    assert asyncio.run(store.get("erin", "SCRAM-SHA-256")) is None  # the miss is cached too
    clock.now += 61
    assert asyncio.run(store.get("erin", "SCRAM-SHA-256")) == credential


def test_lookups_of_unknown_mechanisms_and_oversized_names_find_nothing(store: ScramCredentialStore) -> None:
    assert asyncio.run(store.get("alice", "SCRAM-SHA-1")) is None
    assert asyncio.run(store.get("x" * 5000, "SCRAM-SHA-256")) is None
    assert asyncio.run(store.get("", "SCRAM-SHA-256")) is None
