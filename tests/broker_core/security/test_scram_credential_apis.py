"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) on a real two-broker stack on
PLAINTEXT, driven by confluent-kafka's AdminClient (librdkafka salts the password itself) and by
`floe users`; a credential librdkafka wrote authenticates its password through Floe's SCRAM server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker_core.aws import AwsSettings
from broker_core.cli import main
from broker_core.client import FloeClient
from broker_core.local_stack import LocalStack
from broker_core.security.credentials import ScramCredentialStore
from broker_core.security.scram import ScramClient, ScramServer
from tests.support.stack import running_stack

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("scram-apis"), brokers=2) as stack:
        yield stack


def admin_of(server: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": server})


@pytest.fixture(scope="module")
def admin(stack: LocalStack) -> AdminClient:
    return admin_of(stack.bootstrap_servers)


def alter(admin: AdminClient, alterations: list) -> dict[str, KafkaError | None]:
    futures = admin.alter_user_scram_credentials(alterations, request_timeout=TIMEOUT_S)
    outcome: dict[str, KafkaError | None] = {}
    for user, future in futures.items():
        try:
            future.result(timeout=TIMEOUT_S)
            outcome[user] = None
        except KafkaException as exc:
            outcome[user] = exc.args[0]
    return outcome


def described(admin: AdminClient, users: list[str]) -> dict[str, object]:
    futures = admin.describe_user_scram_credentials(users, request_timeout=TIMEOUT_S)
    outcome: dict[str, object] = {}
    for user, future in futures.items():
        try:
            description = future.result(timeout=TIMEOUT_S)
            outcome[user] = sorted((info.mechanism, info.iterations) for info in description.scram_credential_infos)
        except KafkaException as exc:
            outcome[user] = exc.args[0].code()
    return outcome


def upsert(user: str, mechanism: ScramMechanism, password: str, iterations: int = 4096) -> UserScramCredentialUpsertion:
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password.encode())


def store_of(stack: LocalStack) -> ScramCredentialStore:
    return ScramCredentialStore(AwsSettings.from_dict(stack.describe()["aws"]))


def authenticates(stack: LocalStack, user: str, mechanism: str, password: str) -> bool:
    store = store_of(stack)

    async def login() -> bool:
        server = ScramServer(mechanism, store.get)
        client = ScramClient(mechanism, user, password)
        try:
            server_first = await server.step(client.first())
            client.verify(await server.step(client.final(server_first)))
        except Exception:
            return False
        return server.complete and server.username == user

    return asyncio.run(login())


def test_a_user_librdkafka_creates_is_described_and_its_password_authenticates(
        stack: LocalStack, admin: AdminClient) -> None:
    assert alter(admin, [upsert("alice", ScramMechanism.SCRAM_SHA_512, "alice-secret", 8192),
                         upsert("alice", ScramMechanism.SCRAM_SHA_256, "alice-secret")]) == {"alice": None}
    assert described(admin, ["alice"]) == {"alice": [(ScramMechanism.SCRAM_SHA_256, 4096),
                                                     (ScramMechanism.SCRAM_SHA_512, 8192)]}
    assert authenticates(stack, "alice", "SCRAM-SHA-512", "alice-secret")
    assert authenticates(stack, "alice", "SCRAM-SHA-256", "alice-secret")
    assert not authenticates(stack, "alice", "SCRAM-SHA-512", "wrong")


def test_a_change_through_one_broker_is_described_by_the_other(stack: LocalStack) -> None:
    first, second = stack.bootstrap_servers.split(",")
    assert alter(admin_of(first), [upsert("bob", ScramMechanism.SCRAM_SHA_256, "b")]) == {"bob": None}
    assert described(admin_of(second), ["bob"]) == {"bob": [(ScramMechanism.SCRAM_SHA_256, 4096)]}
    assert alter(admin_of(second), [UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)]) == {"bob": None}
    assert described(admin_of(first), ["bob"]) == {"bob": KafkaError.RESOURCE_NOT_FOUND}
    assert not authenticates(stack, "bob", "SCRAM-SHA-256", "b")


def test_kafkas_errors_per_user_and_other_users_of_the_request_unaffected(stack: LocalStack, admin: AdminClient) -> None:
    outcome = alter(admin, [
        upsert("few", ScramMechanism.SCRAM_SHA_256, "pw", iterations=4095),
        upsert("many", ScramMechanism.SCRAM_SHA_512, "pw", iterations=16385),
        UserScramCredentialDeletion("ghost", ScramMechanism.SCRAM_SHA_512),
        upsert("fine", ScramMechanism.SCRAM_SHA_256, "pw"),
    ])
    assert {user: error.code() if error else None for user, error in outcome.items()} == {
        "few": KafkaError.UNACCEPTABLE_CREDENTIAL,
        "many": KafkaError.UNACCEPTABLE_CREDENTIAL,
        "ghost": KafkaError.RESOURCE_NOT_FOUND,
        "fine": None,
    }
    assert described(admin, ["few", "many", "fine"]) == {
        "few": KafkaError.RESOURCE_NOT_FOUND, "many": KafkaError.RESOURCE_NOT_FOUND,
        "fine": [(ScramMechanism.SCRAM_SHA_256, 4096)]}


def test_a_user_whose_deletion_fails_gets_none_of_its_upsertions(stack: LocalStack, admin: AdminClient) -> None:
    outcome = alter(admin, [upsert("half", ScramMechanism.SCRAM_SHA_256, "pw"),
                            UserScramCredentialDeletion("half", ScramMechanism.SCRAM_SHA_512)])
    assert outcome["half"] is not None and outcome["half"].code() == KafkaError.RESOURCE_NOT_FOUND
    assert described(admin, ["half"]) == {"half": KafkaError.RESOURCE_NOT_FOUND}


def floe_alter(stack: LocalStack, upsertions=(), deletions=()) -> dict:
    async def go() -> dict:
        async with FloeClient(stack.bootstrap_servers, client_id="scram-tests") as client:
            return await client.alter_user_scram_credentials(upsertions, deletions)

    return asyncio.run(go())


def test_the_same_user_and_mechanism_twice_and_unknown_mechanisms_are_refused(stack: LocalStack) -> None:
    salt, salted = bytes(range(32)), bytes(32)
    outcome = floe_alter(stack, upsertions=[("twice", 1, 4096, salt, salted), ("odd", 3, 4096, salt, salted),
                                            ("short-salt", 1, 4096, b"x", salted), ("", 1, 4096, salt, salted),
                                            ("sha512-with-32-bytes", 2, 4096, salt, salted)],
                         deletions=[("twice", 1)])
    assert {user: code for user, (code, _) in outcome.items()} == {
        "twice": ErrorCode.duplicate_resource,
        "odd": ErrorCode.unsupported_sasl_mechanism,
        "short-salt": ErrorCode.unacceptable_credential,
        "sha512-with-32-bytes": ErrorCode.unacceptable_credential,
        "": ErrorCode.unacceptable_credential,
    }

    async def describe() -> dict:
        async with FloeClient(stack.bootstrap_servers, client_id="scram-tests") as client:
            return await client.describe_user_scram_credentials(["twice", "twice", "odd"])

    found = asyncio.run(describe())
    assert {user: code for user, (code, _, _) in found.items()} == {
        "twice": ErrorCode.duplicate_resource, "odd": ErrorCode.resource_not_found}


def test_floe_users_alter_and_describe_in_kafka_configs_style(
        stack: LocalStack, capsys: pytest.CaptureFixture[str]) -> None:
    where = ["--bootstrap-servers", stack.bootstrap_servers]
    assert main(["users", "alter", *where, "--user", "carol",
                 "--add-config", "SCRAM-SHA-512=[iterations=8192,password=carol-pw],SCRAM-SHA-256=[password=carol-pw]"]) == 0
    assert authenticates(stack, "carol", "SCRAM-SHA-512", "carol-pw")
    assert authenticates(stack, "carol", "SCRAM-SHA-256", "carol-pw")
    capsys.readouterr()
    assert main(["users", "describe", *where, "--user", "carol", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"user": "carol", "credentials": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 4096}, {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}]
    assert main(["users", "alter", *where, "--user", "carol", "--delete-config", "SCRAM-SHA-256"]) == 0
    assert not authenticates(stack, "carol", "SCRAM-SHA-256", "carol-pw")
    assert main(["users", "alter", *where, "--user", "carol", "--delete-config", "SCRAM-SHA-256"]) == 1
    assert "RESOURCE_NOT_FOUND" in capsys.readouterr().err
    assert main(["users", "alter", *where, "--user", "carol", "--add-config", "SCRAM-SHA-1=[password=x]"]) == 2
    assert main(["users", "describe", *where]) == 0
    assert "user-principal 'carol' are SCRAM-SHA-512=iterations=8192" in capsys.readouterr().out


names = st.sampled_from(["", "u1", "u2", "u=,3", "x" * 1100])
mechanisms = st.integers(-128, 127) | st.sampled_from([1, 2])
upsertions = st.tuples(names, mechanisms, st.integers(-(2**31), 2**31 - 1) | st.sampled_from([4096, 16384]),
                       st.binary(max_size=40), st.binary(max_size=80))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(upserts=st.lists(upsertions, max_size=4), deletes=st.lists(st.tuples(names, mechanisms), max_size=3))
def test_arbitrary_alterations_get_one_result_per_user_and_the_broker_keeps_answering(
        stack: LocalStack, upserts: list, deletes: list) -> None:
    outcome = floe_alter(stack, upsertions=upserts, deletions=deletes)
    assert set(outcome) == {user for user, *_ in upserts} | {user for user, _ in deletes}
    for user, (code, _) in outcome.items():
        if code == ErrorCode.none:
            assert 0 < len(user.encode()) <= 1024
            assert all(4096 <= iterations <= 16384 for name, _, iterations, _, _ in upserts if name == user)

    async def describe() -> dict:
        async with FloeClient(stack.bootstrap_servers, client_id="scram-tests") as client:
            return await client.describe_user_scram_credentials(None)

    asyncio.run(describe())
