"""IAM OAUTHBEARER tokens: signed by the client providers, checked and executed by IamTokenVerifier
against moto's STS in its own server process; refused when expired, for another audience, altered,
or naming another host (which is never contacted)."""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import threading
import time
from collections.abc import Iterator

import boto3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.oauth import SaslMechanismOAuth

from broker_core.local_moto import MotoServer, start_moto_server
from broker_core.security.errors import AuthenticationError
from broker_core.security.iam import (
    TOKEN_PREFIX,
    IamTokenProvider,
    IamTokenVerifier,
    iam_oauth_cb,
    iam_token,
    iam_verifier_from_settings,
    parse_oauthbearer,
    principal_arn,
)

REGION = "us-east-1"
AUDIENCE = "cluster-a"
MOTO_CALLER = "User:arn:aws:sts::123456789012:user/moto"


@pytest.fixture(scope="module")
def sts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = start_moto_server(log_path=tmp_path_factory.mktemp("sts") / "sts.log", service="sts")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def session() -> boto3.Session:
    return boto3.Session(aws_access_key_id="AKIDTESTING", aws_secret_access_key="secret", region_name=REGION)


def verifier(sts: MotoServer, **kwargs) -> IamTokenVerifier:
    return IamTokenVerifier(AUDIENCE, sts.endpoint_url, REGION, **kwargs)


def verify(verifier: IamTokenVerifier, token: str) -> str:
    return asyncio.run(verifier.verify(token))


def token_document(token: str) -> dict:
    encoded = token[len(TOKEN_PREFIX):]
    return json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))


def token_of(document: dict) -> str:
    return TOKEN_PREFIX + base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")


def test_a_token_round_trips_through_moto_sts_to_the_callers_principal(sts: MotoServer, session) -> None:
    token, expires_at = iam_token(AUDIENCE, REGION, sts.endpoint_url, session)
    assert time.time() + 800 < expires_at <= time.time() + 900
    assert verify(verifier(sts), token) == MOTO_CALLER


def test_kafka_pythons_oauthbearer_message_with_the_provider_carries_a_verifiable_token(sts: MotoServer, session) -> None:
    provider = IamTokenProvider(AUDIENCE, REGION, sts.endpoint_url, session)
    message = SaslMechanismOAuth(sasl_oauth_token_provider=provider).auth_bytes()
    assert asyncio.run(verifier(sts).authenticate(message)) == MOTO_CALLER
    assert provider.token() == provider.token()  # reused, not signed anew on every connection


def test_the_provider_token_is_awaitable_for_aiokafka(sts: MotoServer, session) -> None:
    from aiokafka.abc import AbstractTokenProvider

    provider = IamTokenProvider(AUDIENCE, REGION, sts.endpoint_url, session)
    assert isinstance(provider, AbstractTokenProvider)

    async def aiokafka_style() -> str:
        return await provider.token()

    token = asyncio.run(aiokafka_style())
    assert type(token) is str
    assert verify(verifier(sts), token) == MOTO_CALLER


def test_confluent_kafkas_oauth_cb_reads_sasl_oauthbearer_config(
        sts: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDTESTING")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    token, expires_at = iam_oauth_cb(f"audience={AUDIENCE} region={REGION} sts_endpoint={sts.endpoint_url}")
    assert expires_at > time.time()
    assert verify(verifier(sts), token) == MOTO_CALLER
    with pytest.raises(ValueError):
        iam_oauth_cb("region=us-east-1")


def test_a_token_older_than_fifteen_minutes_is_refused(sts: MotoServer, session) -> None:
    token, _ = iam_token(AUDIENCE, REGION, sts.endpoint_url, session)
    later = time.time() + 15 * 60 + 5
    with pytest.raises(AuthenticationError, match="expired"):
        verify(verifier(sts, clock=lambda: later), token)
    with pytest.raises(AuthenticationError, match="future"):
        verify(verifier(sts, clock=lambda: time.time() - 600), token)
    # A broker configured for a shorter age refuses sooner.
    with pytest.raises(AuthenticationError, match="expired"):
        verify(verifier(sts, max_age_s=60, clock=lambda: time.time() + 120), token)


def test_a_token_for_another_audience_is_refused(sts: MotoServer, session) -> None:
    token, _ = iam_token("cluster-b", REGION, sts.endpoint_url, session)
    with pytest.raises(AuthenticationError, match="another audience"):
        verify(verifier(sts), token)


@pytest.mark.parametrize("tamper", [
    lambda doc: {**doc, "url": doc["url"].replace("X-Amz-SignedHeaders=host%3Bx-floe-audience",
                                                   "X-Amz-SignedHeaders=host")},
    lambda doc: {**doc, "url": doc["url"].replace("Action=GetCallerIdentity", "Action=AssumeRole")},
    lambda doc: {**doc, "url": doc["url"] + "&Action=GetCallerIdentity"},
    lambda doc: {**doc, "url": doc["url"] + "&RoleArn=x"},
    lambda doc: {**doc, "url": doc["url"].replace("X-Amz-Expires=900", "X-Amz-Expires=86400")},
    lambda doc: {**doc, "url": doc["url"].replace("%2Fsts%2Faws4_request", "%2Fs3%2Faws4_request")},
    lambda doc: {**doc, "url": doc["url"].replace("X-Amz-Date=", "X-Amz-Date=x")},
    lambda doc: {**doc, "extra": 1},
    lambda doc: {"url": doc["url"]},
    lambda doc: [doc["url"], doc["audience"]],
], ids=["audience-unsigned", "other-action", "duplicate-param", "extra-param", "long-expiry", "other-service",
        "bad-date", "extra-field", "no-audience", "not-an-object"])
def test_an_altered_token_is_refused(sts: MotoServer, session, tamper) -> None:
    token, _ = iam_token(AUDIENCE, REGION, sts.endpoint_url, session)
    with pytest.raises(AuthenticationError):
        verify(verifier(sts), token_of(tamper(token_document(token))))


@pytest.mark.parametrize("token", ["", "Bearer", TOKEN_PREFIX, TOKEN_PREFIX + "!!!", TOKEN_PREFIX + "e30",
                                   TOKEN_PREFIX + "x" * 9000, "k8s-aws-v1.aHR0cHM6Ly9zdHM"])
def test_a_malformed_token_is_refused(sts: MotoServer, token: str) -> None:
    with pytest.raises(AuthenticationError):
        verify(verifier(sts), token)


class RecordingServer(http.server.ThreadingHTTPServer):
    """An HTTP server on loopback that records every request it gets and answers ``status``."""

    def __init__(self, status: int, body: bytes = b"") -> None:
        self.requests: list[str] = []
        self.status, self.body = status, body
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                server.requests.append(self.path)
                self.send_response(server.status)
                self.end_headers()
                self.wfile.write(server.body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def recording() -> Iterator[RecordingServer]:
    server = RecordingServer(403, b"<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code></Error></ErrorResponse>")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_token_naming_another_host_is_refused_and_that_host_never_contacted(
        sts: MotoServer, session, recording: RecordingServer) -> None:
    token, _ = iam_token(AUDIENCE, REGION, recording.url, session)
    with pytest.raises(AuthenticationError, match="another STS endpoint"):
        verify(verifier(sts), token)
    http_token = token_of({**token_document(token), "url": token_document(token)["url"].replace(
        recording.url, sts.endpoint_url.replace("http://", "https://"))})
    with pytest.raises(AuthenticationError, match="another STS endpoint"):
        verify(verifier(sts), http_token)
    assert recording.requests == []


def test_a_token_sts_refuses_is_refused(session, recording: RecordingServer) -> None:
    token, _ = iam_token(AUDIENCE, REGION, recording.url, session)
    with pytest.raises(AuthenticationError, match="refused"):
        verify(IamTokenVerifier(AUDIENCE, recording.url, REGION), token)
    assert len(recording.requests) == 1 and recording.requests[0].startswith("/?Action=GetCallerIdentity")


def test_an_unreachable_sts_fails_the_login_without_naming_it(session) -> None:
    unreachable = "http://127.0.0.1:9"
    token, _ = iam_token(AUDIENCE, REGION, unreachable, session)
    with pytest.raises(AuthenticationError) as failure:
        verify(IamTokenVerifier(AUDIENCE, unreachable, REGION, timeout_s=2), token)
    assert "127.0.0.1" not in str(failure.value)


@pytest.mark.parametrize("arn, principal", [
    ("arn:aws:sts::123456789012:assumed-role/app-role/i-0abc", "arn:aws:iam::123456789012:role/app-role"),
    ("arn:aws-cn:sts::123456789012:assumed-role/r/s@x.com", "arn:aws-cn:iam::123456789012:role/r"),
    ("arn:aws:iam::123456789012:user/alice", "arn:aws:iam::123456789012:user/alice"),
    ("arn:aws:iam::123456789012:root", "arn:aws:iam::123456789012:root"),
])
def test_assumed_role_sessions_map_to_their_role_and_other_arns_stay(arn: str, principal: str) -> None:
    assert principal_arn(arn) == principal


@pytest.mark.parametrize("arn", ["", "not-an-arn", "arn:aws:iam::123:user/short-account", "arn:aws:s3:::bucket"])
def test_an_answer_that_is_not_an_iam_arn_is_refused(arn: str) -> None:
    with pytest.raises(AuthenticationError):
        principal_arn(arn)


def test_the_oauthbearer_client_message_parses_as_rfc_7628_writes_it() -> None:
    assert parse_oauthbearer(b"n,,\x01auth=Bearer abc.DEF-_9\x01\x01") == "abc.DEF-_9"
    assert parse_oauthbearer(b"n,a=user,\x01host=x\x01auth=bearer t\x01port=1\x01\x01") == "t"
    for bad in (b"", b"n,,", b"n,,\x01auth=Bearer t\x01", b"y,,\x01auth=Bearer t\x01\x01",
                b"n,,\x01auth=Basic t\x01\x01", b"n,,\x01auth=Bearer a b\x01\x01", b"n,,\x01\x01",
                b"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01", b"n,,\x01=x\x01\x01", "é".encode()):
        with pytest.raises(AuthenticationError):
            parse_oauthbearer(bad)


@settings(max_examples=300, deadline=None)
@given(message=st.binary(max_size=200))
def test_arbitrary_bytes_as_an_oauthbearer_message_raise_only_authentication_error(message: bytes) -> None:
    try:
        parse_oauthbearer(message)
    except AuthenticationError:
        pass


@settings(max_examples=300, deadline=None)
@given(token=st.text(max_size=300) | st.binary(max_size=300).map(
    lambda raw: TOKEN_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")))
def test_arbitrary_tokens_fail_the_local_checks_with_authentication_error_only(token: str) -> None:
    checker = IamTokenVerifier(AUDIENCE, "http://127.0.0.1:1", REGION)
    with pytest.raises(AuthenticationError):
        checker.checked_query(token)


def test_a_verifier_needs_an_audience_and_a_plain_endpoint() -> None:
    with pytest.raises(ValueError):
        IamTokenVerifier("", None, REGION)
    with pytest.raises(ValueError):
        IamTokenVerifier(AUDIENCE, "https://sts.example.com/path", REGION)
    assert IamTokenVerifier(AUDIENCE, None, "eu-west-1").endpoint_url == "https://sts.eu-west-1.amazonaws.com"


def test_a_broker_builds_its_verifier_from_its_settings(sts: MotoServer, session) -> None:
    from broker_core.settings import broker_setting

    overrides = {"floe.sasl.oauthbearer.iam.audience": AUDIENCE,
                 "floe.sasl.oauthbearer.iam.sts.endpoint": sts.endpoint_url}
    built = iam_verifier_from_settings(lambda name: broker_setting(overrides, name), REGION)
    token, _ = iam_token(AUDIENCE, REGION, sts.endpoint_url, session)
    assert verify(built, token) == MOTO_CALLER
    with pytest.raises(ValueError, match="audience"):
        iam_verifier_from_settings(lambda name: broker_setting({}, name), REGION)
