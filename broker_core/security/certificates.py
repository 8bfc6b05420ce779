"""A small certificate authority for local stacks and tests: a CA, and certificates it issues.

`floe local up --security ssl|sasl_ssl` writes `ca.pem` (the CA certificate clients trust) and, per
broker, a PEM keystore (certificate chain then unencrypted key, mode 0600) for `ssl.keystore.location`.
Keys are ECDSA P-256; certificates are valid for a year from an hour ago (clock skew). Broker
certificates name their hosts as subject alternative names (IP addresses as IP entries), since
clients check the host name. Not for production: there, certificates come from ACM Private CA or
Secrets Manager (docs/security.md).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertificateAuthority:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def pem(self) -> bytes:
        return self.certificate.public_bytes(Encoding.PEM)


def _name(common_name: str, organization: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=365))


def create_ca(common_name: str = "Floe local CA", organization: str = "Floe") -> CertificateAuthority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name, organization)
    builder = _validity(x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                        .serial_number(x509.random_serial_number()))
    certificate = (builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                content_commitment=False, key_encipherment=False,
                                                data_encipherment=False, key_agreement=False, encipher_only=False,
                                                decipher_only=False), critical=True)
                   .sign(key, hashes.SHA256()))
    return CertificateAuthority(certificate, key)


def issue(ca: CertificateAuthority, common_name: str, hosts: tuple[str, ...] = (),
          organization: str = "Floe") -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate for `CN=<common_name>,O=<organization>`, for servers and clients, naming ``hosts``."""
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    builder = _validity(x509.CertificateBuilder().subject_name(_name(common_name, organization))
                        .issuer_name(ca.certificate.subject).public_key(key.public_key())
                        .serial_number(x509.random_serial_number()))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    builder = builder.add_extension(
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(ca.key, hashes.SHA256()), key


def keystore_pem(ca: CertificateAuthority, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bytes:
    """A PEM keystore: the certificate, the CA's, then the unencrypted key (PKCS#8)."""
    return (certificate.public_bytes(Encoding.PEM) + ca.pem
            + key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))


def write_private(path: Path, content: bytes) -> Path:
    """Write a file only its owner may read (keys), replacing it whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.unlink(missing_ok=True)
    tmp.touch(mode=0o600)
    tmp.write_bytes(content)
    tmp.rename(path)
    return path
