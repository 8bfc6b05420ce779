"""`ssl.enabled.protocols`: the TLS versions a listener accepts, checked by in-memory handshakes (no sockets)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from broker_core.security.certificates import create_ca, issue, keystore_pem, write_private
from broker_core.security.tls import server_context
from broker_core.settings import ConfigError, broker_setting


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("tls-protocols")
    ca = create_ca()
    certificate, key = issue(ca, "broker-1", ("127.0.0.1",))
    return (write_private(directory / "broker.pem", keystore_pem(ca, certificate, key)),
            write_private(directory / "ca.pem", ca.pem))


def listener(keystore: Path, **overrides: str) -> ssl.SSLContext:
    settings = {"ssl.keystore.location": str(keystore), **overrides}
    return server_context(lambda name: broker_setting(settings, name))


def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> str:
    """The TLS version a client and a listener agree on, or SSLError when they agree on none."""
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    tls_server = server.wrap_bio(server_in, server_out, server_side=True)
    tls_client = client.wrap_bio(client_in, client_out, server_hostname="127.0.0.1")
    for _ in range(10):
        for side in (tls_client, tls_server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if tls_server.version() and tls_client.version():
            break
    return tls_server.version()


def client_for(ca: Path, version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    client = ssl.create_default_context(cafile=str(ca))
    if version is not None:
        client.minimum_version = client.maximum_version = version
    return client


def test_by_default_a_listener_speaks_tls_1_3_and_still_accepts_a_tls_1_2_client(pki) -> None:
    keystore, ca = pki
    assert handshake(listener(keystore), client_for(ca)) == "TLSv1.3"
    assert handshake(listener(keystore), client_for(ca, ssl.TLSVersion.TLSv1_2)) == "TLSv1.2"


def test_a_listener_limited_to_one_version_refuses_clients_of_the_other(pki) -> None:
    keystore, ca = pki
    only_12 = listener(keystore, **{"ssl.enabled.protocols": "TLSv1.2"})
    assert handshake(only_12, client_for(ca)) == "TLSv1.2"
    with pytest.raises(ssl.SSLError):
        handshake(only_12, client_for(ca, ssl.TLSVersion.TLSv1_3))
    only_13 = listener(keystore, **{"ssl.enabled.protocols": " TLSv1.3 "})
    with pytest.raises(ssl.SSLError):
        handshake(only_13, client_for(ca, ssl.TLSVersion.TLSv1_2))


@pytest.mark.parametrize("value", ["", "TLSv1.1", "TLSv1.2,TLSv1", "SSLv3", "tls1.3"])
def test_versions_other_than_tls_1_2_and_1_3_are_a_configuration_error(pki, value: str) -> None:
    keystore, _ = pki
    with pytest.raises(ConfigError, match="ssl.enabled.protocols"):
        listener(keystore, **{"ssl.enabled.protocols": value})
