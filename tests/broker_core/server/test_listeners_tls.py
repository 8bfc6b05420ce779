"""Named listeners and TLS against real brokers: each listener advertises its own endpoints, real
clients produce and consume over TLS (fetch data through TLS, not sendfile), mutual TLS refuses a
client without a certificate, and garbage or silence in the handshake closes only that connection."""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography.hazmat.primitives.serialization import Encoding

from broker_core.security.certificates import create_ca, issue, keystore_pem, write_private
from broker_core.security.tls import certificate_principal, client_context
from broker_core.settings import ConfigError, broker_setting
from tests.support.sockets import closed_by_broker
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

# TLS stacks, about 45 s: in `make faults`, outside CI's 20-minute budget
pytestmark = pytest.mark.faults

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("pki")
    ca = create_ca()
    (directory / "ca.pem").write_bytes(ca.pem)
    broker_cert, broker_key = issue(ca, "broker", (HOST, "localhost"))
    client_cert, client_key = issue(ca, "client")
    write_private(directory / "broker.pem", keystore_pem(ca, broker_cert, broker_key))
    write_private(directory / "client.pem", keystore_pem(ca, client_cert, client_key))
    (directory / "client-cert.pem").write_bytes(client_cert.public_bytes(Encoding.PEM))
    write_private(directory / "client-key.pem", keystore_pem(ca, client_cert, client_key).split(ca.pem)[1])
    return {name: directory / f"{name}.pem" for name in ("ca", "broker", "client", "client-cert", "client-key")}


def tls_overrides(pki: dict[str, Path], **extra: str) -> dict[str, str]:
    return {
        "listeners": f"PLAINTEXT://{HOST}:0,SSL://{HOST}:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(pki["broker"]),
        "ssl.truststore.location": str(pki["ca"]),
        **extra,
    }


def ssl_config(stack, pki: dict[str, Path], **extra: str) -> dict[str, str]:
    return {"bootstrap.servers": ",".join(f"{HOST}:{b.listeners['SSL']}" for b in stack.processes.values()),
            "security.protocol": "SSL", "ssl.ca.location": str(pki["ca"]), **extra}


def produce_and_consume(config: dict[str, str], topic: str, values: list[bytes]) -> list[bytes]:
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(config)
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(received) < len(values) and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            received.append(message.value())
    consumer.close()
    return received


def test_each_listener_advertises_its_own_endpoints_and_tls_clients_read_back_what_they_wrote(tmp_path, pki):
    with running_stack(tmp_path, brokers=2, overrides=tls_overrides(pki)) as stack:
        config = ssl_config(stack, pki)
        ssl_ports = {b.broker_id: b.listeners["SSL"] for b in stack.processes.values()}
        plain_ports = {b.broker_id: b.listeners["PLAINTEXT"] for b in stack.processes.values()}
        assert set(ssl_ports.values()).isdisjoint(plain_ports.values())

        def brokers_seen(admin_config: dict[str, str]) -> dict[int, int]:
            metadata = AdminClient(admin_config).list_topics(timeout=30)
            return {b.id: b.port for b in metadata.brokers.values()}

        assert wait_until(lambda: brokers_seen(config) == ssl_ports, "SSL listener's ports in Metadata", 30)
        plain = {"bootstrap.servers": f"{HOST}:{plain_ports[1]}"}
        assert wait_until(lambda: brokers_seen(plain) == plain_ports, "PLAINTEXT ports in Metadata", 30)

        # 2 MiB of records: the fetch responses' file slices go through TLS.
        values = [i.to_bytes(4, "big") * 256 for i in range(2048)]
        assert produce_and_consume(config, "over-tls", values) == values


def test_garbage_or_silence_in_the_tls_handshake_closes_that_connection_only(tmp_path, pki):
    overrides = tls_overrides(pki, **{"ssl.handshake.timeout.ms": "1000"})
    with running_stack(tmp_path, brokers=1, overrides=overrides) as stack:
        port = stack.processes[1].listeners["SSL"]
        silent = socket.create_connection((HOST, port), timeout=10)
        garbage = socket.create_connection((HOST, port), timeout=10)
        garbage.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 10)
        assert closed_by_broker(garbage, 10)
        assert closed_by_broker(silent, 10)
        log = stack.processes[1].log_path.read_text()
        peer = garbage.getsockname()
        assert sum(f"{peer[1]}" in line and "TLS handshake failed" in line for line in log.splitlines()) == 1
        assert "TLS handshake not complete after 1 s" in log
        values = [b"still-served"]
        assert produce_and_consume(ssl_config(stack, pki), "after-garbage", values) == values


def test_mutual_tls_refuses_a_client_without_a_certificate_and_serves_one_with(tmp_path, pki):
    overrides = tls_overrides(pki, **{"ssl.client.auth": "required"})
    with running_stack(tmp_path, brokers=1, overrides=overrides) as stack:
        port = stack.processes[1].listeners["SSL"]
        context = ssl.create_default_context(cafile=str(pki["ca"]))
        with socket.create_connection((HOST, port), timeout=10) as raw:
            with pytest.raises(ssl.SSLError, match="CERTIFICATE_REQUIRED"):
                with context.wrap_socket(raw, server_hostname=HOST) as tls:
                    tls.sendall(b"\x00\x00\x00\x01")
                    tls.recv(1)  # TLS 1.3: the refusal arrives after the client's half of the handshake
        config = ssl_config(stack, pki, **{"ssl.certificate.location": str(pki["client-cert"]),
                                           "ssl.key.location": str(pki["client-key"])})
        assert produce_and_consume(config, "mtls", [b"a", b"b"]) == [b"a", b"b"]


def test_a_client_certificate_stands_for_its_subject_as_kafka_prints_it():
    ca = create_ca()
    certificate, _ = issue(ca, "client", organization="Floe")
    assert certificate_principal(certificate.public_bytes(Encoding.DER)) == "User:CN=client,O=Floe"


def test_an_ssl_stack_replicates_between_brokers_over_tls(tmp_path):
    with running_stack(tmp_path, brokers=2, security="ssl") as stack:
        config = {**stack.client_config, "acks": "all"}
        admin = AdminClient(stack.client_config)
        admin.create_topics([NewTopic("replicated", 1, 2)])["replicated"].result(30)
        producer = Producer(config)
        for i in range(100):
            producer.produce("replicated", str(i).encode())
        assert producer.flush(30) == 0  # acks=all: the follower fetched every record over TLS
        metadata = admin.list_topics(timeout=30).topics["replicated"].partitions[0]
        assert sorted(metadata.isrs) == [1, 2]
        assert stack.client_config["security.protocol"] == "SSL"
        assert all(set(b.listeners) == {"SSL"} for b in stack.processes.values())


def test_a_broker_checks_its_peers_host_names_unless_told_not_to(pki):
    def context(**settings: str):
        overrides = {"ssl.truststore.location": str(pki["ca"]), **settings}
        return client_context(lambda name: broker_setting(overrides, name))

    assert context().check_hostname
    assert not context(**{"ssl.endpoint.identification.algorithm": ""}).check_hostname
    with pytest.raises(ConfigError, match="ssl.endpoint.identification.algorithm"):
        context(**{"ssl.endpoint.identification.algorithm": "ldap"})
