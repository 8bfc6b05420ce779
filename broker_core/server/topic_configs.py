"""Topic-level configs: which names Floe accepts, how values are checked, and how they are described.

Kafka resolves a topic config from the topic's own setting, else the broker's `log.`-prefixed (or
other synonym) setting, else the built-in default; DescribeConfigs reports which source won.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker_core.log.config import LogConfig

from .config import BrokerConfig

# topic config -> (broker synonym or None, default)
TOPIC_CONFIGS: dict[str, tuple[str | None, str]] = {
    "cleanup.policy": ("log.cleanup.policy", "delete"),
    "compression.type": ("compression.type", "producer"),
    "flush.messages": ("log.flush.interval.messages", "9223372036854775807"),
    "flush.ms": ("log.flush.interval.ms", "9223372036854775807"),
    "index.interval.bytes": ("log.index.interval.bytes", "4096"),
    "local.retention.bytes": ("log.local.retention.bytes", "-2"),
    "local.retention.ms": ("log.local.retention.ms", "-2"),
    "max.message.bytes": ("message.max.bytes", "1048588"),
    "message.timestamp.type": ("log.message.timestamp.type", "CreateTime"),
    "min.insync.replicas": ("min.insync.replicas", "1"),
    "remote.storage.enable": (None, "false"),
    "retention.bytes": ("log.retention.bytes", "-1"),
    "retention.ms": ("log.retention.ms", "604800000"),
    "segment.bytes": ("log.segment.bytes", "1073741824"),
    "segment.index.bytes": ("log.index.size.max.bytes", "10485760"),
    "segment.ms": ("log.roll.ms", "604800000"),
    "unclean.leader.election.enable": ("unclean.leader.election.enable", "false"),
}
_ALLOWED_VALUES = {
    "cleanup.policy": {"delete"},
    "compression.type": {"producer", "uncompressed"},
    "message.timestamp.type": {"CreateTime", "LogAppendTime"},
    "remote.storage.enable": {"true", "false"},
    "unclean.leader.election.enable": {"true", "false"},
}

SOURCE_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


class TopicConfigError(ValueError):
    """A topic config name is unknown or its value is invalid; the message names it."""


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    source: int


def validate_topic_configs(configs: Mapping[str, str]) -> None:
    for name, value in configs.items():
        if name not in TOPIC_CONFIGS:
            raise TopicConfigError(f"unknown topic config {name!r}")
        if value is None:
            raise TopicConfigError(f"topic config {name!r} has no value")
        allowed = _ALLOWED_VALUES.get(name)
        if allowed is not None:
            if value not in allowed:
                raise TopicConfigError(f"{name} must be one of {sorted(allowed)}, got {value!r}")
        else:
            try:
                int(value)
            except ValueError:
                raise TopicConfigError(f"{name} must be an integer, got {value!r}") from None
    if "min.insync.replicas" in configs and int(configs["min.insync.replicas"]) < 1:
        raise TopicConfigError("min.insync.replicas must be at least 1")
    try:
        LogConfig.from_kafka(configs)
    except ValueError as exc:
        raise TopicConfigError(str(exc)) from None


def describe_topic_configs(
    configs: Mapping[str, str], broker: BrokerConfig, keys: set[str] | None
) -> list[ConfigEntry]:
    entries = []
    for name, (synonym, default) in sorted(TOPIC_CONFIGS.items()):
        if keys is not None and name not in keys:
            continue
        if name in configs:
            entries.append(ConfigEntry(name, configs[name], SOURCE_TOPIC))
        elif synonym is not None and synonym in broker.overrides:
            entries.append(ConfigEntry(name, broker.overrides[synonym], SOURCE_STATIC_BROKER))
        else:
            entries.append(ConfigEntry(name, default, SOURCE_DEFAULT))
    return entries


def effective(configs: Mapping[str, str], broker: BrokerConfig, name: str) -> str:
    synonym, default = TOPIC_CONFIGS[name]
    if name in configs:
        return configs[name]
    if synonym is not None and synonym in broker.overrides:
        return broker.overrides[synonym]
    return default
