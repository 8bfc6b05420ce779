"""Kafka's listener model: which sockets a broker listens on, how each is secured, which one brokers use.

`listeners` names each listener and its bind address (`PLAINTEXT://127.0.0.1:9092,SASL_SSL://:9093`,
or named ones such as `INTERNAL://10.0.0.5:9094` with `listener.security.protocol.map` saying how
`INTERNAL` is secured); `advertised.listeners` the address clients are told for each (by listener name;
a listener it omits is advertised as it is bound); `inter.broker.listener.name` (or, failing that, the
listener whose security protocol is `security.inter.broker.protocol`) the one other brokers reach this
broker on. A broker configured without `listeners` has one PLAINTEXT listener on its `--host`/`--port`,
advertised on `--advertised-host`: today's single-port configuration, unchanged.

Settings given as `listener.name.<name in lower case>.<setting>` apply to that listener only (Kafka's
per-listener prefix), for the TLS and SASL settings read per listener (`BrokerListeners.setting`).
This module parses and checks; it opens nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker_core.settings import ConfigError


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True)
class ListenerSpec:
    """One listener: its name, security protocol, bind address and the address clients are told."""

    name: str
    security_protocol: SecurityProtocol
    host: str
    port: int
    advertised_host: str
    advertised_port: int | None  # None: the port the listener is bound to (known once it listens)


def _parse_endpoints(text: str, setting: str) -> list[tuple[str, str, int]]:
    """`NAME://host:port,...` as (NAME, host, port); IPv6 hosts are written in brackets."""
    endpoints = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, sep, address = entry.partition("://")
        host, colon, port_text = address.rpartition(":")
        if not sep or not name or not colon:
            raise ConfigError(f"{setting} entry {entry!r} is not NAME://host:port")
        try:
            port = int(port_text)
        except ValueError:
            raise ConfigError(f"{setting} entry {entry!r}: port {port_text!r} is no integer") from None
        if not 0 <= port <= 65535:
            raise ConfigError(f"{setting} entry {entry!r}: port {port} is outside 0..65535")
        endpoints.append((name.upper(), host.strip("[]"), port))
    names = [name for name, _, _ in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"{setting} names a listener twice: {text!r}")
    return endpoints


def parse_protocol_map(text: str) -> dict[str, SecurityProtocol]:
    """`listener.security.protocol.map`: `NAME:PROTOCOL,...`."""
    mapping = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, sep, protocol = entry.partition(":")
        try:
            mapping[name.strip().upper()] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            raise ConfigError(f"listener.security.protocol.map entry {entry!r} is not NAME:"
                              f"{'|'.join(p.value for p in SecurityProtocol)}") from None
        if not sep:
            raise ConfigError(f"listener.security.protocol.map entry {entry!r} is not NAME:PROTOCOL")
    return mapping


@dataclass(frozen=True)
class BrokerListeners:
    """A broker's listeners, resolved from its settings and command line; see the module docstring."""

    specs: tuple[ListenerSpec, ...]
    inter_broker: str  # the name of the listener other brokers use
    overrides: Mapping[str, str]
    get: Callable[[str], str]

    @classmethod
    def resolve(cls, host: str, port: int, advertised_host: str, overrides: Mapping[str, str],
                get: Callable[[str], str]) -> BrokerListeners:
        listeners_text = get("listeners")
        if not listeners_text.strip():
            spec = ListenerSpec("PLAINTEXT", SecurityProtocol.PLAINTEXT, host, port, advertised_host, None)
            return cls((spec,), "PLAINTEXT", overrides, get)
        protocols = parse_protocol_map(get("listener.security.protocol.map"))
        bound = _parse_endpoints(listeners_text, "listeners")
        advertised = {name: (h, p) for name, h, p in _parse_endpoints(get("advertised.listeners"), "advertised.listeners")}
        for name in advertised:
            if name not in {n for n, _, _ in bound}:
                raise ConfigError(f"advertised.listeners names {name}, which listeners does not")
        specs = []
        for name, bind_host, bind_port in bound:
            protocol = protocols.get(name)
            if protocol is None:
                raise ConfigError(f"listener {name} has no security protocol: add it to listener.security.protocol.map")
            ad_host, ad_port = advertised.get(name, (bind_host, None))
            specs.append(ListenerSpec(name, protocol, bind_host or host, bind_port,
                                      ad_host or bind_host or advertised_host, ad_port or None))
        inter_broker = get("inter.broker.listener.name").strip().upper()
        if inter_broker:
            if inter_broker not in {s.name for s in specs}:
                raise ConfigError(f"inter.broker.listener.name {inter_broker} is not one of the listeners")
        else:
            try:
                wanted = SecurityProtocol(get("security.inter.broker.protocol").strip().upper())
            except ValueError:
                raise ConfigError("security.inter.broker.protocol must be one of "
                                  f"{', '.join(p.value for p in SecurityProtocol)}") from None
            matching = [s.name for s in specs if s.security_protocol is wanted]
            if not matching:
                raise ConfigError(f"no listener has security.inter.broker.protocol {wanted.value}: set "
                                  "inter.broker.listener.name")
            inter_broker = matching[0]
        return cls(tuple(specs), inter_broker, overrides, get)

    def spec(self, name: str) -> ListenerSpec:
        for spec in self.specs:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def inter_broker_spec(self) -> ListenerSpec:
        return self.spec(self.inter_broker)

    def setting(self, listener: str, name: str) -> str:
        """A setting as it applies to one listener: `listener.name.<listener>.<name>`, else the broker's."""
        prefixed = f"listener.name.{listener.lower()}.{name}"
        if prefixed in self.overrides:
            return self.overrides[prefixed]
        return self.get(name)
