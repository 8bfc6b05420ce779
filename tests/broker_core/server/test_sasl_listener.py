"""SASL on a SASL_SSL listener against a real `--security sasl_ssl` stack: confluent-kafka, kafka-python,
aiokafka and kcat authenticate with SCRAM-SHA-512 (and PLAIN) unchanged; wrong passwords, garbage and
truncated SCRAM messages, requests and oversized frames before authentication each get a clear error or
a closed connection, logged once with the peer, while an authenticated connection beside them goes on."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer
from kio.schema.errors import ErrorCode

from broker_core.client import ClientSecurity, FloeClient, NoBrokersError
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import decode_response, encode_request
from broker_core.protocol.messages import build_entity, request_class
from broker_core.security.iam import iam_oauth_cb, iam_token
from broker_core.security.scram import ScramClient
from broker_core.server.listeners import ListenerSpec, SecurityProtocol
from broker_core.settings import ConfigError, broker_setting
from tests.support.sockets import closed_by_broker
from tests.support.stack import running_stack

# SASL stacks of every mode, about 160 s: in `make faults`, outside CI's 20-minute budget
pytestmark = pytest.mark.faults

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Any]:
    with running_stack(tmp_path_factory.mktemp("sasl"), brokers=1, security="sasl_ssl") as running:
        yield running


def bootstrap(stack) -> str:
    return stack.client_config["bootstrap.servers"]


def ca(stack) -> str:
    return stack.client_config["ssl.ca.location"]


class RawKafka:
    """A TLS connection that speaks the Kafka protocol one frame at a time, as a misbehaving client."""

    def __init__(self, stack) -> None:
        context = ssl.create_default_context(cafile=ca(stack))
        self.sock = context.wrap_socket(socket.create_connection((HOST, stack.processes[1].port), timeout=10),
                                        server_hostname=HOST)
        self.local_port = self.sock.getsockname()[1]
        self.correlation_id = 0

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> None:
        self.correlation_id += 1
        entity = build_entity(request_class(api_key, version), body)
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, "raw", entity))

    def receive_frame(self) -> bytes | None:
        """The next frame without its size prefix; None when the broker closed the connection."""
        try:
            header = self._exactly(4)
            return None if header is None else self._exactly(struct.unpack(">i", header)[0])
        except (ConnectionError, ssl.SSLError):
            return None

    def _exactly(self, count: int) -> bytes | None:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.send(api_key, version, body)
        frame = self.receive_frame()
        return None if frame is None else decode_response(api_key, version, frame)[1]

    def authenticate(self, token: bytes) -> Any:
        return self.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})

    def handshake(self, mechanism: str = "SCRAM-SHA-512", version: int = 1) -> Any:
        return self.call(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})

    def login(self, stack, user: str = "admin") -> Any:
        assert self.handshake().error_code == ErrorCode.none
        scram = ScramClient("SCRAM-SHA-512", user, stack.secrets[user])
        first = self.authenticate(scram.first())
        final = self.authenticate(scram.final(bytes(first.auth_bytes)))
        assert final.error_code == ErrorCode.none
        scram.verify(bytes(final.auth_bytes))
        return final

    def metadata(self) -> Any:
        return self.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})

    def closed(self, within_s: float = 10) -> bool:
        try:
            return closed_by_broker(self.sock, within_s)
        except ssl.SSLError:
            return True

    def close(self) -> None:
        self.sock.close()


def failures_logged_for(stack, port: int) -> int:
    log = stack.processes[1].log_path.read_text()
    return sum(f", {port})" in line and "SASL authentication" in line for line in log.splitlines())


def create_topic(config: dict[str, str], topic: str) -> None:
    admin = AdminClient(config)  # held until the result arrives: a collected client cancels its requests
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def consume(config: dict[str, str], topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(received) < count and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            received.append(message.value())
    consumer.close()
    return received


def test_confluent_kafka_with_the_stacks_client_config_produces_and_consumes(stack):
    config = stack.client_config
    create_topic(config, "confluent")
    producer = Producer({**config, "acks": "all"})
    values = [f"value-{i}".encode() for i in range(500)]
    for value in values:
        producer.produce("confluent", value)
    assert producer.flush(30) == 0
    assert consume(config, "confluent", len(values)) == values


def test_kcat_takes_the_client_config_as_is(stack):
    options = [arg for key, value in stack.client_config.items() if key != "bootstrap.servers"
               for arg in ("-X", f"{key}={value}")]
    create_topic(stack.client_config, "kcat")
    common = ["kcat", "-b", bootstrap(stack), *options, "-t", "kcat"]
    subprocess.run([*common, "-P"], input=b"one\ntwo\nthree\n", check=True, timeout=60)
    out = subprocess.run([*common, "-C", "-o", "beginning", "-e", "-q"], capture_output=True, check=True, timeout=60)
    assert out.stdout.split() == [b"one", b"two", b"three"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kafka_python_authenticates_with_scram_and_plain(stack, mechanism):
    topic = f"kafka-python-{mechanism.lower()}"
    create_topic(stack.client_config, topic)
    security = {"security_protocol": "SASL_SSL", "sasl_mechanism": mechanism, "sasl_plain_username": "admin",
                "sasl_plain_password": stack.secrets["admin"], "ssl_cafile": ca(stack)}
    producer = KafkaProducer(bootstrap_servers=bootstrap(stack), **security)
    for i in range(20):
        producer.send(topic, f"kp-{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap(stack), auto_offset_reset="earliest",
                             consumer_timeout_ms=10000, **security)
    assert [m.value for m in consumer][:20] == [f"kp-{i}".encode() for i in range(20)]
    consumer.close()


def test_aiokafka_authenticates_with_scram_sha_512(stack):
    create_topic(stack.client_config, "aiokafka")

    async def run() -> list[bytes]:
        security = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                    "sasl_plain_username": "admin", "sasl_plain_password": stack.secrets["admin"],
                    "ssl_context": create_ssl_context(cafile=ca(stack))}
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap(stack), **security)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait("aiokafka", f"ak-{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("aiokafka", bootstrap_servers=bootstrap(stack), auto_offset_reset="earliest",
                                    **security)
        await consumer.start()
        try:
            batches = await consumer.getmany(timeout_ms=10000)
            return [m.value for messages in batches.values() for m in messages]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"ak-{i}".encode() for i in range(20)]


def test_a_wrong_password_is_refused_with_a_short_message_and_a_closed_connection(stack):
    raw = RawKafka(stack)
    assert raw.handshake().error_code == ErrorCode.none
    scram = ScramClient("SCRAM-SHA-512", "admin", "not-the-password")
    first = raw.authenticate(scram.first())
    refused = raw.authenticate(scram.final(bytes(first.auth_bytes)))
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    assert refused.error_message == "Authentication failed: invalid username or password"
    assert raw.closed()
    assert failures_logged_for(stack, raw.local_port) == 1

    security = ClientSecurity.from_properties({**stack.client_config, "sasl.password": "wrong"})

    async def floe_client() -> None:
        async with FloeClient(bootstrap(stack), security=security, retries=0) as client:
            await client.list_topics()

    with pytest.raises(NoBrokersError, match="sasl_authentication_failed: Authentication failed: invalid username"):
        asyncio.run(floe_client())

    errors: list[str] = []
    admin = AdminClient({**stack.client_config, "sasl.password": "wrong", "error_cb": lambda e: errors.append(e.str())})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(1)  # serves the error callback
    assert any("Authentication failed: invalid username or password" in error for error in errors)


def test_requests_before_authentication_close_the_connection_unanswered(stack):
    authenticated = RawKafka(stack)
    authenticated.login(stack)
    raw = RawKafka(stack)
    assert raw.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "raw", "client_software_version": "1"})
    assert raw.metadata() is None
    assert raw.closed()
    log = stack.processes[1].log_path.read_text()
    assert f"{raw.local_port}) on listener SASL_SSL: metadata before authentication" in log
    assert len(authenticated.metadata().brokers) == 1


def test_an_oversized_frame_before_authentication_closes_the_connection(stack):
    raw = RawKafka(stack)
    raw.sock.sendall(struct.pack(">i", 600 * 1024) + b"\0" * 1024)
    assert raw.closed()
    authenticated = RawKafka(stack)
    authenticated.login(stack)
    # After authentication the cap is socket.request.max.bytes again: a 600 KiB request is read whole.
    authenticated.send(ApiKey.METADATA, 12, {"topics": [{"name": "x" * 200, "topic_id": None}] * 3000,
                                             "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False})
    assert authenticated.receive_frame() is not None


def test_a_truncated_scram_message_fails_and_closes(stack):
    raw = RawKafka(stack)
    raw.handshake()
    scram = ScramClient("SCRAM-SHA-512", "admin", stack.secrets["admin"])
    first = raw.authenticate(scram.first())
    final = scram.final(bytes(first.auth_bytes))
    refused = raw.authenticate(final[: len(final) // 2])
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    assert raw.closed()
    assert failures_logged_for(stack, raw.local_port) == 1


def test_sasl_authenticate_before_a_handshake_is_an_illegal_state(stack):
    raw = RawKafka(stack)
    refused = raw.authenticate(b"n,,n=admin,r=abc")
    assert refused.error_code == ErrorCode.illegal_sasl_state
    assert raw.closed()


def test_a_mechanism_not_enabled_is_answered_with_the_enabled_ones(stack):
    raw = RawKafka(stack)
    answer = raw.handshake("GSSAPI")
    assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
    assert set(answer.mechanisms) == {"SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"}
    assert raw.closed()


def test_a_handshake_v0_client_sends_bare_tokens(stack):
    raw = RawKafka(stack)
    assert raw.handshake("PLAIN", version=0).error_code == ErrorCode.none
    token = b"\0admin\0" + stack.secrets["admin"].encode()
    raw.sock.sendall(struct.pack(">i", len(token)) + token)
    assert raw.receive_frame() == b""
    assert len(raw.metadata().brokers) == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(token=st.binary(max_size=300), mechanism=st.sampled_from(["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]))
def test_arbitrary_sasl_authenticate_bytes_are_refused_and_leave_other_connections_alone(stack, token, mechanism):
    bystander = RawKafka(stack)
    bystander.login(stack)
    raw = RawKafka(stack)
    assert raw.handshake(mechanism).error_code == ErrorCode.none
    answer = raw.authenticate(token)
    if answer.error_code == ErrorCode.none:  # a well-formed client-first: the exchange goes on
        assert mechanism != "PLAIN" and bytes(answer.auth_bytes).startswith(b"r=")
    else:
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message.startswith("Authentication failed")
        assert raw.closed()
    raw.close()
    assert len(bystander.metadata().brokers) == 1
    bystander.close()


def test_without_re_authentication_a_session_ends_and_a_re_authenticating_client_goes_on(tmp_path):
    with running_stack(tmp_path, brokers=1, security="sasl_ssl",
                       overrides={"connections.max.reauth.ms": "1500"}) as stack:
        raw = RawKafka(stack)
        assert raw.login(stack).session_lifetime.total_seconds() == 1.5
        assert raw.metadata() is not None
        time.sleep(1.7)
        assert raw.metadata() is None
        assert raw.closed()

        async def floe_client() -> bool:
            security = ClientSecurity.from_properties(stack.client_config)
            async with FloeClient(bootstrap(stack), security=security) as client:
                await client.list_topics()
                first = next(iter(client._connections.values()), None) or client._bootstrap_connection
                await asyncio.sleep(3.5)  # two sessions' worth: re-authenticated at 85% of each
                await client.list_topics()
                return first is not None and first.connected

        assert asyncio.run(floe_client())


def test_an_oauthbearer_session_ends_when_its_token_expires_not_later(tmp_path):
    """KIP-368: re-authentication every hour, IAM tokens valid for two minutes here: a token login's
    session lifetime is what is left of its token; a password login's is the hour."""
    with running_stack(tmp_path, brokers=1, security="sasl_ssl",
                       overrides={"connections.max.reauth.ms": "3600000",
                                  "floe.sasl.oauthbearer.iam.token.max.age.ms": "120000"}) as stack:
        session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=stack.region)
        token, _ = iam_token(stack.iam_audience, stack.region, stack.sts.endpoint_url, session)
        raw = RawKafka(stack)
        assert raw.handshake("OAUTHBEARER").error_code == ErrorCode.none
        answer = raw.authenticate(f"n,,\x01auth=Bearer {token}\x01\x01".encode())
        assert answer.error_code == ErrorCode.none
        assert 60 < answer.session_lifetime.total_seconds() <= 120
        assert raw.metadata() is not None
        raw.close()
        password_login = RawKafka(stack)
        assert password_login.login(stack).session_lifetime.total_seconds() == 3600
        password_login.close()


def test_plain_is_refused_on_a_listener_without_tls():
    from broker_core.server.assembly import sasl_config

    spec = ListenerSpec("SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, HOST, 0, HOST, None)
    settings_of = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"}

    def setting(name: str) -> str:
        return settings_of.get(name) or broker_setting({}, name)

    async def nobody(username: str, mechanism: str) -> None:
        return None

    with pytest.raises(ConfigError, match="SASL_SSL listeners only"):
        sasl_config(spec, setting, nobody)
    settings_of["sasl.enabled.mechanisms"] = "GSSAPI"
    with pytest.raises(ConfigError, match="GSSAPI"):
        sasl_config(spec, setting, nobody)


def test_the_stack_file_holds_the_client_config(stack):
    info = Path(stack.directory / "stack.json").read_text()
    assert '"security.protocol": "SASL_SSL"' in info and '"sasl.mechanisms": "SCRAM-SHA-512"' in info


def test_describe_configs_never_sends_the_brokers_password(stack):
    admin = AdminClient(stack.client_config)
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(30)
    password = configs["floe.inter.broker.sasl.password"]
    assert password.is_sensitive and password.value is None
    assert configs["floe.inter.broker.sasl.username"].value == "broker-1"
    assert stack.secrets["broker-1"] not in repr({name: entry.value for name, entry in configs.items()})


def iam_config(stack, audience: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap(stack), "security.protocol": "SASL_SSL", "ssl.ca.location": ca(stack),
            "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": iam_oauth_cb,
            "sasl.oauthbearer.config": f"audience={audience} region={stack.region} sts_endpoint={stack.sts.endpoint_url}"}


def test_confluent_kafka_authenticates_with_an_iam_token_checked_against_motos_sts(stack):
    create_topic(stack.client_config, "iam")
    producer = Producer(iam_config(stack, stack.iam_audience))
    producer.produce("iam", b"signed by IAM")
    assert producer.flush(30) == 0
    log = stack.processes[1].log_path.read_text()
    assert "authenticated as User:arn:aws:" in log and "with OAUTHBEARER" in log
    assert consume(stack.client_config, "iam", 1) == [b"signed by IAM"]


def test_an_iam_token_for_another_audience_is_refused(stack):
    errors: list[str] = []
    admin = AdminClient({**iam_config(stack, "another-cluster"), "error_cb": lambda e: errors.append(e.str())})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(1)
    assert any("SASL authentication error" in error for error in errors)


def test_the_readme_commands_work_against_a_sasl_ssl_stack(stack):
    def floe(*args: str, stdin: bytes | None = None) -> str:
        result = subprocess.run([sys.executable, "-m", "broker_core.cli", *args, "--stack", str(stack.directory)],
                                input=stdin, capture_output=True, timeout=120)
        assert result.returncode == 0, result.stderr.decode()
        return result.stdout.decode()

    floe("topics", "create", "orders", "--partitions", "2", "--replication-factor", "1")
    floe("produce", "orders", "--key-separator", ":", stdin=b"k1:hello\nk2:world\n")
    consumed = floe("consume", "orders", "--from-beginning", "--timeout", "5")
    assert set(consumed.splitlines()) == {"k1\thello", "k2\tworld"}, consumed


def test_floe_commands_with_bootstrap_servers_take_a_command_config_or_x_properties(stack, tmp_path):
    security = {k: v for k, v in stack.client_config.items() if k != "bootstrap.servers"}
    properties = tmp_path / "client.properties"
    properties.write_text("# as Kafka's CLIs read it\n" + "".join(f"{k}={v}\n" for k, v in security.items()))

    def floe(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "broker_core.cli", *args, "--bootstrap-servers", bootstrap(stack),
                               "--request-timeout", "10"], input=stdin, capture_output=True, timeout=120)

    created = floe("topics", "create", "configured", "--command-config", str(properties))
    assert created.returncode == 0, created.stderr.decode()
    x_options = [part for k, v in security.items() for part in ("-X", f"{k}={v}")]
    assert floe("produce", "configured", *x_options, stdin=b"one\ntwo\n").returncode == 0
    consumed = floe("consume", "configured", "--from-beginning", "--timeout", "5", *x_options)
    assert consumed.stdout.decode().splitlines() == ["null\tone", "null\ttwo"], consumed.stderr.decode()
    wrong = floe("topics", "list", "--command-config", str(properties), "-X", "sasl.password=wrong")
    assert wrong.returncode != 0
    assert floe("topics", "list", "-X", "no-equals-sign").returncode == 2
    assert floe("topics", "list").returncode != 0  # PLAINTEXT to a SASL_SSL listener gets nowhere


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(min_size=8, max_size=400), api_key=st.sampled_from([ApiKey.SASL_HANDSHAKE,
                                                                          ApiKey.SASL_AUTHENTICATE,
                                                                          ApiKey.METADATA, ApiKey.PRODUCE]))
def test_arbitrary_frames_before_authentication_never_get_past_the_gate(stack, body, api_key):
    bystander = RawKafka(stack)
    bystander.login(stack)
    raw = RawKafka(stack)
    frame = struct.pack(">h", api_key) + body[2:]
    raw.sock.sendall(struct.pack(">i", len(frame)) + frame)
    answer = raw.receive_frame()
    if api_key in (ApiKey.METADATA, ApiKey.PRODUCE):
        assert answer is None  # closed unanswered, whatever the bytes
    if answer is not None:  # a SASL request that decoded: answered, and the connection is still gated
        assert raw.metadata() is None
    assert raw.closed()
    raw.close()
    assert len(bystander.metadata().brokers) == 1
    bystander.close()
