"""The broker's configuration, and the check of a topic's configs before they are stored.

A broker process gets its identity (id, listener, data directory, AWS settings) from the command line
and everything else as Kafka-named overrides, so `floe local up --set key=value` and a production
task definition speak the same language as a Kafka `server.properties`. The names, defaults and
types of those settings, and of topic configs, are declared in `broker_core.settings`; this module
adds what needs the partition log's own checks (`LogConfig`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from broker_core.aws import AwsSettings
from broker_core.client.security import ClientSecurity
from broker_core.log.config import LogConfig
from broker_core.quotas.replication import (
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    ThrottledReplicasError,
    parse_throttled_replicas,
)
from broker_core.security.principal import ANONYMOUS, KafkaPrincipal
from broker_core.security.tls import client_context, keystore_principal
from broker_core.settings import (
    TOPIC_SETTINGS,
    BrokerOverrides,
    ConfigError,
    Kind,
    bool_setting,
    broker_setting,
    check_broker_overrides,
    effective,
    int_setting,
    live_broker_setting,
)

from .listeners import BrokerListeners
from .replica_selector import SELECTORS


class TopicConfigError(ValueError):
    """A topic config name is unknown or its value is invalid; the message names it."""


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int
    host: str
    port: int
    data_dir: Path
    aws: AwsSettings
    rack: str | None = None
    advertised_host: str | None = None
    overrides: Mapping[str, str] = field(default_factory=dict)

    def get(self, key: str) -> str:
        return broker_setting(self.overrides, key)

    def get_int(self, key: str) -> int:
        return int_setting(self.overrides, key)

    def get_bool(self, key: str) -> bool:
        return bool_setting(self.overrides, key)

    def live(self, key: str, dynamic: Mapping[str, Mapping[str, str]]) -> str:
        """A setting's value now: a dynamic setting's value from ``dynamic`` (the metadata image's
        ``broker_configs``) for this broker or the whole cluster, else as `get` reads it."""
        return live_broker_setting(key, self.broker_id, self.overrides, dynamic)

    @property
    def broker_rack(self) -> str | None:
        """The broker's rack: ``rack`` (the --rack option), else the `broker.rack` setting, else None."""
        return self.rack if self.rack is not None else (self.get("broker.rack") or None)

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host

    @cached_property
    def listeners(self) -> BrokerListeners:
        """The broker's listeners (`listeners`, `advertised.listeners`, ...; see broker_core.server.listeners)."""
        return BrokerListeners.resolve(self.host, self.port, self.advertised, self.overrides, self.get)

    @cached_property
    def inter_broker_security(self) -> ClientSecurity:
        """How this broker connects to its peers' inter-broker listener: TLS checked against its
        truststore and showing its keystore's certificate, SASL with `floe.inter.broker.sasl.*`."""
        spec = self.listeners.inter_broker_spec
        protocol = spec.security_protocol
        context = None
        if protocol.tls:
            context = client_context(lambda name: self.listeners.setting(spec.name, name))
        if not protocol.sasl:
            return ClientSecurity(protocol.value, context)
        return ClientSecurity(protocol.value, context, self.get("floe.inter.broker.sasl.mechanism"),
                              self.get("floe.inter.broker.sasl.username"), self.get("floe.inter.broker.sasl.password"))

    @cached_property
    def inter_broker_principal(self) -> str:
        """The principal this broker authenticates as to its peers on the inter-broker listener:
        its SASL user name, else (TLS with client certificates asked for) its certificate's subject,
        else User:ANONYMOUS."""
        listeners = self.listeners
        spec = listeners.inter_broker_spec
        if spec.security_protocol.sasl and (username := self.get("floe.inter.broker.sasl.username")):
            return str(KafkaPrincipal.user(username))
        if spec.security_protocol.tls and listeners.setting(spec.name, "ssl.client.auth").strip().lower() != "none":
            principal = keystore_principal(lambda name: listeners.setting(spec.name, name))
            if principal is not None:
                return principal
        return ANONYMOUS

    def log_config(self, topic_configs: Mapping[str, str] | None = None) -> LogConfig:
        """Broker-level `log.*` settings overlaid with a topic's own configs, as Kafka resolves them."""
        base = LogConfig.from_kafka(self.overrides)
        return LogConfig.from_kafka(topic_configs or {}, base=base)

    def validate(self) -> None:
        check_broker_overrides(self.overrides)
        if self.get("replica.selector.class") not in SELECTORS:
            raise ConfigError(f"replica.selector.class must be one of {[s for s in SELECTORS if s]} or empty, "
                              f"got {self.get('replica.selector.class')!r}")
        if self.get_int("num.replica.fetchers") < 1:
            raise ConfigError("num.replica.fetchers must be at least 1")
        LogConfig.from_kafka(self.overrides)
        self.listeners  # noqa: B018 - parsing the listener settings checks them
        self.inter_broker_security  # noqa: B018 - and so does building the inter-broker connections' security


def validate_topic_configs(configs: Mapping[str, str], broker: BrokerOverrides | None = None) -> None:
    """Refuse (TopicConfigError) a name that is not a public topic setting, or a value it cannot take.

    With ``broker``, settings the topic leaves to the broker (log.cleanup.policy) count too.
    """
    for name, value in configs.items():
        setting = TOPIC_SETTINGS.get(name)
        if setting is None or not setting.public:
            raise TopicConfigError(f"unknown topic config {name!r}")
        if value is None:
            raise TopicConfigError(f"topic config {name!r} has no value")
        if name in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
            try:
                parse_throttled_replicas(value)
            except ThrottledReplicasError as exc:
                raise TopicConfigError(f"{name}: {exc}") from None
        elif setting.allowed:
            if value not in setting.allowed:
                raise TopicConfigError(f"{name} must be one of {sorted(setting.allowed)}, got {value!r}")
        elif setting.kind is Kind.DOUBLE:
            try:
                float(value)
            except ValueError:
                raise TopicConfigError(f"{name} must be a number, got {value!r}") from None
        else:
            try:
                int(value)
            except ValueError:
                raise TopicConfigError(f"{name} must be an integer, got {value!r}") from None
    for name, value in configs.items():
        minimum = TOPIC_SETTINGS[name].minimum
        if minimum is not None and int(value) < minimum:
            raise TopicConfigError(f"{name} must be at least {minimum}")
    try:
        log_config = LogConfig.from_kafka(configs)
    except ValueError as exc:
        raise TopicConfigError(str(exc)) from None
    if log_config.min_compaction_lag_ms > log_config.max_compaction_lag_ms:
        raise TopicConfigError(
            f"min.compaction.lag.ms {log_config.min_compaction_lag_ms} is above max.compaction.lag.ms "
            f"{log_config.max_compaction_lag_ms}"
        )
    policy = log_config.cleanup_policy if broker is None else effective(configs, broker, "cleanup.policy")
    if "compact" in policy.split(",") and configs.get("remote.storage.enable") == "true":
        # Kafka's choice (KIP-405): tiered segments are never rewritten, so a compacted topic stays local.
        raise TopicConfigError(
            f"remote.storage.enable=true is not supported with cleanup.policy={policy}: "
            "tiered storage keeps only topics with cleanup.policy=delete"
        )
