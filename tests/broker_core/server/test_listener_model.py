"""Kafka's listener settings as a broker reads them: today's single port, named listeners, advertised
addresses, the inter-broker listener, per-listener settings, and each malformed value refused by name."""

from __future__ import annotations

import pytest

from broker_core.server.listeners import BrokerListeners, SecurityProtocol
from broker_core.settings import ConfigError, broker_setting


def resolve(**settings: str) -> BrokerListeners:
    overrides = dict(settings)
    return BrokerListeners.resolve("10.0.0.5", 9092, "broker-1.example.com", overrides,
                                   lambda name: broker_setting(overrides, name))


def test_without_listeners_a_broker_has_one_plaintext_listener_on_its_port():
    listeners = resolve()
    (spec,) = listeners.specs
    assert (spec.name, spec.security_protocol, spec.host, spec.port) == ("PLAINTEXT", SecurityProtocol.PLAINTEXT,
                                                                        "10.0.0.5", 9092)
    assert (spec.advertised_host, spec.advertised_port) == ("broker-1.example.com", None)
    assert listeners.inter_broker == "PLAINTEXT"


def test_named_listeners_take_their_protocol_from_the_map_and_their_address_from_advertised_listeners():
    listeners = resolve(**{"listeners": "INTERNAL://10.0.0.5:9094,CLIENTS://0.0.0.0:9093",
                           "listener.security.protocol.map": "INTERNAL:SASL_SSL,CLIENTS:SSL",
                           "advertised.listeners": "CLIENTS://kafka.example.com:443",
                           "inter.broker.listener.name": "internal"})
    internal, clients = listeners.specs
    assert internal.security_protocol is SecurityProtocol.SASL_SSL and internal.advertised_host == "10.0.0.5"
    assert clients.security_protocol is SecurityProtocol.SSL
    assert (clients.advertised_host, clients.advertised_port) == ("kafka.example.com", 443)
    assert listeners.inter_broker == "INTERNAL"


def test_the_inter_broker_listener_defaults_to_the_first_with_the_inter_broker_protocol():
    listeners = resolve(**{"listeners": "PLAINTEXT://:9092,SSL://:9093", "security.inter.broker.protocol": "SSL"})
    assert listeners.inter_broker == "SSL"


def test_a_setting_given_for_one_listener_applies_to_that_listener_only():
    listeners = resolve(**{"listeners": "A://:1,B://:2", "listener.security.protocol.map": "A:SSL,B:SSL",
                           "security.inter.broker.protocol": "SSL",
                           "listener.name.a.ssl.client.auth": "required", "ssl.client.auth": "requested"})
    assert listeners.setting("A", "ssl.client.auth") == "required"
    assert listeners.setting("B", "ssl.client.auth") == "requested"


@pytest.mark.parametrize(("settings", "message"), [
    ({"listeners": "PLAINTEXT:9092"}, "is not NAME://host:port"),
    ({"listeners": "PLAINTEXT://host:port"}, "port 'port' is no integer"),
    ({"listeners": "PLAINTEXT://host:70000"}, "outside 0..65535"),
    ({"listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"}, "names a listener twice"),
    ({"listeners": "INTERNAL://a:1"}, "listener INTERNAL has no security protocol"),
    ({"listeners": "PLAINTEXT://a:1", "listener.security.protocol.map": "PLAINTEXT:TLS"}, "protocol.map entry"),
    ({"listeners": "PLAINTEXT://a:1", "advertised.listeners": "SSL://b:2"}, "advertised.listeners names SSL"),
    ({"listeners": "PLAINTEXT://a:1", "inter.broker.listener.name": "SSL"}, "is not one of the listeners"),
    ({"listeners": "PLAINTEXT://a:1", "security.inter.broker.protocol": "SSL"}, "no listener has"),
    ({"listeners": "PLAINTEXT://a:1", "security.inter.broker.protocol": "TLS"}, "must be one of"),
])
def test_malformed_listener_settings_are_refused_naming_the_setting(settings, message):
    with pytest.raises(ConfigError, match=message):
        resolve(**settings)
