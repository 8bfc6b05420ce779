"""SCRAM-SHA-256/512: RFC 7677's exchange byte for byte, client/server round trips, and every way a client
can get an exchange wrong ending in AuthenticationError and nothing else."""

from __future__ import annotations

import asyncio
import base64

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core.security.errors import AuthenticationError
from broker_core.security.scram import (
    SCRAM_MECHANISMS,
    ScramClient,
    ScramCredential,
    ScramServer,
    credential_from_salted_password,
    escape_username,
    make_credential,
    salted_password,
    unescape_username,
    verify_password,
)

RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC7677_CLIENT_FINAL = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def lookup_of(credentials: dict[tuple[str, str], ScramCredential]):
    async def lookup(username: str, mechanism: str) -> ScramCredential | None:
        return credentials.get((username, mechanism))

    return lookup


def run(coro):
    return asyncio.run(coro)


def rfc7677_server() -> ScramServer:
    credential = make_credential("SCRAM-SHA-256", "pencil", 4096, RFC7677_SALT)
    return ScramServer("SCRAM-SHA-256", lookup_of({("user", "SCRAM-SHA-256"): credential}), nonce=lambda: RFC7677_SERVER_NONCE)


def test_the_server_answers_rfc7677_exchange_byte_for_byte():
    server = rfc7677_server()

    async def exchange():
        assert await server.step(RFC7677_CLIENT_FIRST) == RFC7677_SERVER_FIRST
        assert not server.complete and server.username is None
        assert await server.step(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL

    run(exchange())
    assert server.complete
    assert server.username == "user"


def test_the_client_sends_rfc7677_messages_and_accepts_its_server_final():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_CLIENT_NONCE)
    assert client.first() == RFC7677_CLIENT_FIRST
    assert client.final(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    client.verify(RFC7677_SERVER_FINAL)


def test_the_client_refuses_a_server_final_with_another_signature():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_CLIENT_NONCE)
    client.first()
    client.final(RFC7677_SERVER_FIRST)
    with pytest.raises(AuthenticationError):
        client.verify(b"v=" + base64.b64encode(bytes(32)))


def handshake(server: ScramServer, client: ScramClient) -> None:
    async def exchange():
        server_first = await server.step(client.first())
        server_final = await server.step(client.final(server_first))
        client.verify(server_final)

    run(exchange())


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
@pytest.mark.parametrize("username", ["alice", "a,b=c", "=2C", "ünï"])
def test_a_client_with_the_right_password_authenticates(mechanism, username):
    credential = make_credential(mechanism, "s3cret-pässword", iterations=4096)
    server = ScramServer(mechanism, lookup_of({(username, mechanism): credential}))
    handshake(server, ScramClient(mechanism, username, "s3cret-pässword"))
    assert server.complete
    assert server.username == username


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_a_wrong_password_and_an_unknown_user_fail_with_the_same_message(mechanism):
    credential = make_credential(mechanism, "right")
    lookup = lookup_of({("alice", mechanism): credential})
    messages = []
    for username, password in (("alice", "wrong"), ("mallory", "right")):
        server = ScramServer(mechanism, lookup)
        with pytest.raises(AuthenticationError) as failure:
            handshake(server, ScramClient(mechanism, username, password))
        assert not server.complete and server.username is None
        messages.append(str(failure.value))
    assert messages[0] == messages[1]
    assert "alice" not in messages[0] and "mallory" not in messages[0]


def test_an_unknown_user_gets_the_same_salt_each_time_like_a_real_user():
    async def salts():
        firsts = []
        for _ in range(2):
            server = ScramServer("SCRAM-SHA-512", lookup_of({}))
            firsts.append((await server.step(b"n,,n=ghost,r=abc")).split(b",")[1:])
        return firsts

    first, second = run(salts())
    assert first == second


def test_a_credential_for_the_other_mechanism_does_not_authenticate():
    credential = make_credential("SCRAM-SHA-256", "pw")
    server = ScramServer("SCRAM-SHA-512", lookup_of({("alice", "SCRAM-SHA-512"): credential}))
    with pytest.raises(AuthenticationError):
        handshake(server, ScramClient("SCRAM-SHA-512", "alice", "pw"))


def test_a_client_final_replayed_into_another_exchange_fails():
    credential = make_credential("SCRAM-SHA-256", "pencil")
    lookup = lookup_of({("user", "SCRAM-SHA-256"): credential})
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="fixed-client-nonce")

    async def replay():
        first_server = ScramServer("SCRAM-SHA-256", lookup)
        recorded_final = client.final(await first_server.step(client.first()))
        await first_server.step(recorded_final)
        second_server = ScramServer("SCRAM-SHA-256", lookup)
        await second_server.step(client.first())
        with pytest.raises(AuthenticationError):
            await second_server.step(recorded_final)
        assert not second_server.complete

    run(replay())


def test_an_altered_nonce_fails_even_with_a_proof_computed_for_it():
    credential = make_credential("SCRAM-SHA-256", "pencil")
    server = ScramServer("SCRAM-SHA-256", lookup_of({("user", "SCRAM-SHA-256"): credential}))
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="cnonce")

    async def alter():
        server_first = (await server.step(client.first())).decode()
        nonce = server_first.split(",")[0][2:]
        forged = server_first.replace(nonce, nonce + "x").encode()
        with pytest.raises(AuthenticationError):
            await server.step(client.final(forged))

    run(alter())


def test_nothing_is_accepted_after_a_failure_or_after_completion():
    server = rfc7677_server()

    async def steps():
        await server.step(RFC7677_CLIENT_FIRST)
        with pytest.raises(AuthenticationError):
            await server.step(RFC7677_CLIENT_FINAL.replace(b"p=dH", b"p=dX"))
        with pytest.raises(AuthenticationError):
            await server.step(RFC7677_CLIENT_FINAL)
        done = rfc7677_server()
        await done.step(RFC7677_CLIENT_FIRST)
        await done.step(RFC7677_CLIENT_FINAL)
        with pytest.raises(AuthenticationError):
            await done.step(RFC7677_CLIENT_FIRST)
        assert done.complete

    run(steps())
    assert not server.complete


@pytest.mark.parametrize(
    "client_first",
    [
        b"",
        b"n,,",
        b"n,,n=user",
        b"n,,r=abc,n=user",
        b"p=tls-unique,,n=user,r=abc",
        b"n,,n=,r=abc",
        b"n,,n=us=er,r=abc",
        b"n,,n=user,r=a\x7fb",
        b"n,,n=user,r=",
        b"n,,n=user,r=abc,m=mandatory",
        b"n,,n=user,r=abc,tokenauth=true",
        b"n,a=someone-else,n=user,r=abc",
        b"\xff\xfe,,n=user,r=abc",
        b"n,,n=user\x00,r=abc",
        b"n,,n=user,r=abc" + b"x" * 10000,
    ],
)
def test_a_malformed_client_first_fails(client_first):
    server = rfc7677_server()
    with pytest.raises(AuthenticationError):
        run(server.step(client_first))


@pytest.mark.parametrize(
    "client_final",
    [
        b"",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        RFC7677_CLIENT_FINAL[:-10],
        RFC7677_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),
        RFC7677_CLIENT_FINAL.replace(b"c=biws", b"c=b!ws"),
        RFC7677_CLIENT_FINAL.replace(b"p=dHzb", b"p=dHz"),
        RFC7677_CLIENT_FINAL.replace(b"r=rOpr", b"r=xOpr"),
        RFC7677_CLIENT_FINAL.replace(b"p=", b"q="),
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=" + base64.b64encode(bytes(31)),
    ],
)
def test_a_malformed_or_wrong_client_final_fails(client_final):
    server = rfc7677_server()

    async def steps():
        await server.step(RFC7677_CLIENT_FIRST)
        await server.step(client_final)

    with pytest.raises(AuthenticationError):
        run(steps())
    assert not server.complete


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.binary(max_size=300), final=st.binary(max_size=300))
def test_arbitrary_bytes_into_the_server_raise_only_authentication_error(first, final):
    server = rfc7677_server()

    async def steps():
        await server.step(first)
        await server.step(final)

    try:
        run(steps())
    except AuthenticationError:
        pass
    assert not server.complete


@settings(max_examples=200, deadline=None)
@given(final=st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=200))
def test_arbitrary_text_as_client_final_after_a_valid_first_raises_only_authentication_error(final):
    server = rfc7677_server()

    async def steps():
        await server.step(RFC7677_CLIENT_FIRST)
        await server.step(("c=biws,r=" + RFC7677_CLIENT_NONCE + RFC7677_SERVER_NONCE + "," + final).encode())

    with pytest.raises(AuthenticationError):
        run(steps())


@given(username=st.text(min_size=1, max_size=40).filter(lambda name: "\x00" not in name))
def test_escaping_a_username_round_trips(username):
    escaped = escape_username(username)
    assert "," not in escaped
    assert unescape_username(escaped) == username


def test_the_client_refuses_a_server_that_asks_for_too_few_iterations():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677_CLIENT_NONCE)
    client.first()
    with pytest.raises(AuthenticationError):
        client.final(RFC7677_SERVER_FIRST.replace(b"i=4096", b"i=1"))


def test_the_client_refuses_a_server_nonce_that_does_not_extend_its_own():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="mine")
    client.first()
    with pytest.raises(AuthenticationError):
        client.final(b"r=theirs,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_verify_password_accepts_the_password_and_nothing_else(mechanism):
    credential = make_credential(mechanism, "correct horse")
    assert verify_password(credential, "correct horse")
    assert not verify_password(credential, "correct horse ")
    assert not verify_password(credential, "")


def test_a_new_credential_has_a_random_salt_of_at_least_16_bytes_and_never_the_password():
    first = make_credential("SCRAM-SHA-512", "pw")
    second = make_credential("SCRAM-SHA-512", "pw")
    assert len(first.salt) >= 16
    assert first.salt != second.salt
    assert first.stored_key != second.stored_key
    assert b"pw" not in first.stored_key + first.server_key


@pytest.mark.parametrize("iterations", [1, 4095, 16385])
def test_iteration_counts_outside_kafkas_bounds_are_refused(iterations):
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-256", "pw", iterations=iterations)


def test_a_short_salt_and_an_unknown_mechanism_are_refused():
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-256", "pw", salt=b"short")
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-1", "pw")


def test_a_credential_from_a_client_salted_password_equals_one_made_from_the_password():
    salt = bytes(range(20))
    salted = salted_password("SCRAM-SHA-512", "pw", salt, 8192)
    assert credential_from_salted_password("SCRAM-SHA-512", salt, salted, 8192) == make_credential("SCRAM-SHA-512", "pw", 8192, salt)
    with pytest.raises(ValueError):
        credential_from_salted_password("SCRAM-SHA-512", salt, salted[:10], 8192)
