"""Broker configuration under Kafka's own names (`log.segment.bytes`, `min.insync.replicas`, ...).

A broker process gets its identity (id, listener, data directory, AWS settings) from the command line
and everything else as Kafka-named overrides, so `floe local up --set key=value` and a production
task definition speak the same language as a Kafka `server.properties`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.aws import AwsSettings
from broker_core.log.config import LogConfig

# Kafka's defaults for the broker settings Floe honours, except auto.create.topics.enable: Floe
# creates topics only when asked, so a typo'd topic name is an error rather than a new topic.
BROKER_DEFAULTS: dict[str, str] = {
    "broker.session.timeout.ms": "9000",
    "broker.heartbeat.interval.ms": "2000",
    "metadata.poll.interval.ms": "500",
    "min.insync.replicas": "1",
    "default.replication.factor": "1",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "message.max.bytes": "1048588",
    "socket.request.max.bytes": str(100 * 1024 * 1024),
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.high.watermark.checkpoint.interval.ms": "5000",
    "replica.fetch.max.bytes": str(1024 * 1024),
    "replica.fetch.response.max.bytes": str(10 * 1024 * 1024),
    "unclean.leader.election.enable": "false",
    "controlled.shutdown.enable": "true",
    "request.timeout.ms": "30000",
    "log.retention.check.interval.ms": "300000",
    "offsets.retention.minutes": "10080",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.max.session.timeout.ms": "1800000",
    "group.max.size": "2147483647",
    "offsets.retention.check.interval.ms": "600000",
    "offset.metadata.max.bytes": "4096",
}


class ConfigError(ValueError):
    """A configuration value is missing or malformed; the message names the key."""


def parse_overrides(pairs: list[str] | None) -> dict[str, str]:
    """`["key=value", ...]` (as given to --set) to a dict; raises ConfigError on a pair without '='."""
    result: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"expected key=value, got {pair!r}")
        result[key.strip()] = value.strip()
    return result


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
        if key in self.overrides:
            return self.overrides[key]
        if key in BROKER_DEFAULTS:
            return BROKER_DEFAULTS[key]
        raise ConfigError(f"unknown broker config {key!r}")

    def get_int(self, key: str) -> int:
        value = self.get(key)
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{key} must be an integer, got {value!r}") from None

    def get_bool(self, key: str) -> bool:
        value = self.get(key).lower()
        if value not in ("true", "false"):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        return value == "true"

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host

    def log_config(self, topic_configs: Mapping[str, str] | None = None) -> LogConfig:
        """Broker-level `log.*` settings overlaid with a topic's own configs, as Kafka resolves them."""
        base = LogConfig.from_kafka(self.overrides)
        return LogConfig.from_kafka(topic_configs or {}, base=base)

    def validate(self) -> None:
        for key in self.overrides:
            if key in BROKER_DEFAULTS:
                self.get_int(key) if BROKER_DEFAULTS[key].lstrip("-").isdigit() else self.get(key)
        LogConfig.from_kafka(self.overrides)
