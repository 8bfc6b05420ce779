"""How a Floe client secures its connections: TLS and SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with AWS
IAM tokens), librdkafka's names.

`ClientSecurity` is what `BrokerConnection` needs: the security protocol, a TLS context (which checks
the broker's certificate and host name) and the SASL mechanism and credentials. It is built from
librdkafka properties (`from_properties`: `security.protocol`, `ssl.ca.location`,
`ssl.certificate.location`, `ssl.key.location`, `sasl.mechanisms`, `sasl.username`, `sasl.password`,
and for OAUTHBEARER `sasl.oauthbearer.config`: ``audience=A region=R [sts_endpoint=URL]``, the IAM
token `broker_core.security.iam` signs with boto3's credential chain, so the process's own AWS
identity, a Lambda's execution role for instance, is the principal),
the `client_config` object a secured local stack writes to stack.json, so the `floe` commands and
confluent-kafka read the same settings, or from a Java properties file of them (`read_properties`, what
Kafka's CLIs take as `--command-config`). A broker builds the one for its inter-broker connections from
its own settings (`broker_core.server.config`). Immutable; share it between connections.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from broker_core.security.iam import parse_oauth_config
from broker_core.security.scram import SCRAM_MECHANISMS

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
OAUTHBEARER = "OAUTHBEARER"
CLIENT_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, OAUTHBEARER)


class ClientSecurityError(ValueError):
    """Client security properties that cannot be used; the message names the property."""


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str = ""
    password: str = ""
    oauthbearer_config: str = ""

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ClientSecurityError(f"security.protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if self.tls and self.ssl_context is None:
            raise ClientSecurityError(f"security.protocol {self.protocol} needs a TLS context")
        if self.sasl and self.sasl_mechanism not in CLIENT_MECHANISMS:
            raise ClientSecurityError(f"sasl.mechanisms must be one of {', '.join(CLIENT_MECHANISMS)}, "
                                      f"got {self.sasl_mechanism!r}")
        if self.sasl and self.sasl_mechanism == OAUTHBEARER:
            try:
                parse_oauth_config(self.oauthbearer_config)
            except ValueError as exc:
                raise ClientSecurityError(str(exc)) from None
        elif self.sasl and not self.username:
            raise ClientSecurityError("sasl.username is required with SASL")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ClientSecurity:
        """From librdkafka properties (others in ``properties`` are ignored)."""
        protocol = properties.get("security.protocol", "PLAINTEXT").upper()
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            try:
                if properties.get("ssl.ca.location"):
                    context.load_verify_locations(cafile=properties["ssl.ca.location"])
                else:
                    context.load_default_certs()
                if properties.get("ssl.certificate.location"):
                    context.load_cert_chain(properties["ssl.certificate.location"],
                                            properties.get("ssl.key.location") or None,
                                            properties.get("ssl.key.password") or None)
            except (OSError, ssl.SSLError) as exc:
                raise ClientSecurityError(f"TLS files cannot be loaded: {exc}") from None
            if properties.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
                context.check_hostname = False
        mechanism = properties.get("sasl.mechanisms") or properties.get("sasl.mechanism")
        return cls(protocol, context, mechanism, properties.get("sasl.username", ""),
                   properties.get("sasl.password", ""), properties.get("sasl.oauthbearer.config", ""))


PLAINTEXT = ClientSecurity()


def parse_properties(lines: Iterable[str]) -> dict[str, str]:
    """``key=value`` (or ``key: value``) lines, as in a Java properties file: blank lines and lines
    starting with ``#`` or ``!`` are skipped, spaces around key and value dropped; a later key wins.
    ClientSecurityError for a line that is neither (no line continuations or escapes: client security
    properties need none)."""
    properties: dict[str, str] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise ClientSecurityError(f"line {number} is not key=value: {line[:40]!r}")
        properties[line[:cut].strip()] = line[cut + 1:].strip()
    return properties


def read_properties(path: str | Path) -> dict[str, str]:
    """The properties of a file (see `parse_properties`); ClientSecurityError naming it if unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClientSecurityError(f"cannot read {path}: {exc}") from None
    try:
        return parse_properties(text.splitlines())
    except ClientSecurityError as exc:
        raise ClientSecurityError(f"{path}: {exc}") from None


def properties_text(properties: Mapping[str, str]) -> str:
    """``properties`` as a properties file that `read_properties` reads back (values without newlines)."""
    return "".join(f"{key}={value}\n" for key, value in properties.items())
