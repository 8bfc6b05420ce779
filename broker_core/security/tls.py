"""TLS contexts from Kafka's `ssl.*` settings, and the principal a certificate stands for.

Keystores: `ssl.keystore.type` PEM (`ssl.keystore.location`, one file holding the certificate chain
and the private key, or `ssl.keystore.certificate.chain` plus `ssl.keystore.key` inline; `ssl.key.password`
decrypts an encrypted key) or PKCS12 (`ssl.keystore.location`, `ssl.keystore.password`, read with
`cryptography`). Truststores: PEM only (`ssl.truststore.location` or `ssl.truststore.certificates`).
The standard library loads certificates and keys only from files, so inline PEM and PKCS12 contents are
written to a private temporary file (mode 0600) that is removed as soon as they are loaded.

A client certificate's principal is `User:` followed by its subject in RFC 2253 form, most specific
attribute first (`User:CN=client,O=Floe`), as Kafka's default principal builder prints it.
Every function here takes ``get``, the settings as they apply to one listener (or to the broker's side
of its inter-broker connections), and holds no state.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12

from broker_core.settings import ConfigError

Settings = Callable[[str], str]
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@contextmanager
def _private_file(content: bytes) -> Iterator[str]:
    descriptor, path = tempfile.mkstemp(prefix="floe-tls-", suffix=".pem")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)
        yield path
    finally:
        os.unlink(path)


def _keystore_pem(get: Settings) -> bytes | None:
    """The keystore as PEM (certificate chain, then key), or None when no keystore is configured."""
    kind = get("ssl.keystore.type").strip().upper()
    location = get("ssl.keystore.location").strip()
    if kind == "PEM":
        if location:
            try:
                return Path(location).read_bytes()
            except OSError as exc:
                raise ConfigError(f"ssl.keystore.location {location!r} cannot be read: {exc.strerror}") from None
        chain, key = get("ssl.keystore.certificate.chain").strip(), get("ssl.keystore.key").strip()
        if bool(chain) != bool(key):
            raise ConfigError("ssl.keystore.certificate.chain and ssl.keystore.key are set together")
        return (chain + "\n" + key + "\n").encode() if chain else None
    if kind == "PKCS12":
        if not location:
            raise ConfigError("ssl.keystore.type PKCS12 needs ssl.keystore.location")
        password = get("ssl.keystore.password").encode() or None
        try:
            key, certificate, extra = pkcs12.load_key_and_certificates(Path(location).read_bytes(), password)
        except OSError as exc:
            raise ConfigError(f"ssl.keystore.location {location!r} cannot be read: {exc.strerror}") from None
        except ValueError:
            raise ConfigError(f"ssl.keystore.location {location!r} is no PKCS12 keystore this password opens") from None
        if key is None or certificate is None:
            raise ConfigError(f"the PKCS12 keystore {location!r} holds no private key with its certificate")
        return b"".join([certificate.public_bytes(Encoding.PEM), *(c.public_bytes(Encoding.PEM) for c in extra or ()),
                         key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())])
    raise ConfigError(f"ssl.keystore.type {kind!r} is not supported (PEM or PKCS12)")


def _set_protocols(context: ssl.SSLContext, get: Settings) -> None:
    """Allow the TLS versions `ssl.enabled.protocols` names (Kafka's setting): TLSv1.2 and/or TLSv1.3."""
    names = [name.strip() for name in get("ssl.enabled.protocols").split(",") if name.strip()]
    unknown = [name for name in names if name not in PROTOCOLS]
    if not names or unknown:
        raise ConfigError(f"ssl.enabled.protocols must list TLSv1.2 and/or TLSv1.3, got {get('ssl.enabled.protocols')!r}")
    versions = [PROTOCOLS[name] for name in names]
    context.minimum_version, context.maximum_version = min(versions), max(versions)


def _load_keystore(context: ssl.SSLContext, get: Settings, pem: bytes) -> None:
    kind = get("ssl.keystore.type").strip().upper()
    password = get("ssl.key.password") if kind == "PEM" else ""
    with _private_file(pem) as path:
        try:
            context.load_cert_chain(path, password=password or None)
        except ssl.SSLError as exc:
            raise ConfigError(f"the keystore's certificate chain and key cannot be used: {exc.reason or exc}") from None


def _load_truststore(context: ssl.SSLContext, get: Settings) -> bool:
    """Trust the configured CA certificates; False when none are configured."""
    kind = get("ssl.truststore.type").strip().upper()
    if kind != "PEM":
        raise ConfigError(f"ssl.truststore.type {kind!r} is not supported (PEM)")
    location, inline = get("ssl.truststore.location").strip(), get("ssl.truststore.certificates").strip()
    try:
        if location:
            context.load_verify_locations(cafile=location)
        elif inline:
            context.load_verify_locations(cadata=inline)
        else:
            return False
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"the truststore cannot be loaded: {exc}") from None
    return True


def server_context(get: Settings) -> ssl.SSLContext:
    """The TLS context of a listener: its keystore, and client certificates as `ssl.client.auth` says."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_protocols(context, get)
    pem = _keystore_pem(get)
    if pem is None:
        raise ConfigError("a TLS listener needs a keystore: ssl.keystore.location, or ssl.keystore.certificate.chain "
                          "and ssl.keystore.key")
    _load_keystore(context, get, pem)
    client_auth = get("ssl.client.auth").strip().lower()
    if client_auth not in CLIENT_AUTH:
        raise ConfigError(f"ssl.client.auth must be one of {', '.join(CLIENT_AUTH)}, got {client_auth!r}")
    context.verify_mode = CLIENT_AUTH[client_auth]
    if not _load_truststore(context, get) and client_auth != "none":
        raise ConfigError(f"ssl.client.auth {client_auth} needs a truststore to check client certificates against")
    return context


def client_context(get: Settings) -> ssl.SSLContext:
    """The TLS context of this broker's connections to other brokers: it checks their certificates
    against its truststore (the system's CAs without one) and, unless `ssl.endpoint.identification.algorithm`
    is empty, that they name the host connected to; it shows its keystore's certificate, if any."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # checks the certificate and the host name
    _set_protocols(context, get)
    algorithm = get("ssl.endpoint.identification.algorithm").strip().lower()
    if algorithm not in ("https", ""):
        raise ConfigError(f"ssl.endpoint.identification.algorithm must be https or empty, got {algorithm!r}")
    context.check_hostname = algorithm == "https"
    if not _load_truststore(context, get):
        context.load_default_certs()
    pem = _keystore_pem(get)
    if pem is not None:
        _load_keystore(context, get, pem)
    return context


def certificate_principal(der: bytes) -> str:
    """`User:<subject in RFC 2253 form>` of a DER certificate."""
    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()


def keystore_principal(get: Settings) -> str | None:
    """The principal of the keystore's own (first) certificate, or None without a keystore."""
    pem = _keystore_pem(get)
    if pem is None:
        return None
    certificate = x509.load_pem_x509_certificate(pem)
    return "User:" + certificate.subject.rfc4514_string()
