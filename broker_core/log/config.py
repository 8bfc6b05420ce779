"""Per-partition log settings, named and defaulted as in Kafka's topic and broker configuration.

`LogConfig` is the only place the log reads tunables from. `LogConfig.from_kafka` maps Kafka's
string-valued configuration (topic-level names such as ``segment.bytes`` and broker-level names such as
``log.segment.bytes``) onto it, so topic configs stored as Kafka strings can be applied unchanged. The
names, units and defaults come from the settings registry (`broker_core.settings`); the range each
field must lie in is checked here, whichever name set it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from broker_core.settings import INT64_MAX, TOPIC_SETTINGS, Kind, Setting

INT32_MAX = 2**31 - 1
TIMESTAMP_TYPES = TOPIC_SETTINGS["message.timestamp.type"].choices
CLEANUP_POLICIES = TOPIC_SETTINGS["cleanup.policy"].choices
# Fields where Kafka's Long.MAX_VALUE default means "never".
_NEVER_AT_INT64_MAX = ("flush_messages", "flush_ms")
_LOG_SETTINGS = tuple(s for s in TOPIC_SETTINGS.values() if s.log_field is not None)


def _field_value(setting: Setting, value: Any) -> Any:
    if setting.log_field in _NEVER_AT_INT64_MAX and value == INT64_MAX:
        return None
    return value


def _parser(setting: Setting) -> Callable[[str], Any]:
    return {Kind.INT: int, Kind.DOUBLE: float}.get(setting.kind, str)


def _default(name: str) -> Any:
    setting = TOPIC_SETTINGS[name]
    return _field_value(setting, _parser(setting)(setting.default))


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log; every field is Kafka's default unless given.

    ``flush_messages`` / ``flush_ms`` of None mean "never force an fsync from the append path" (Kafka's
    Long.MAX_VALUE default): durability comes from replication and the page cache. ``retention_ms`` and
    ``retention_bytes`` of -1 mean unlimited.
    """

    segment_bytes: int = _default("segment.bytes")
    segment_ms: int = _default("segment.ms")
    index_interval_bytes: int = _default("index.interval.bytes")
    segment_index_bytes: int = _default("segment.index.bytes")
    retention_ms: int = _default("retention.ms")
    retention_bytes: int = _default("retention.bytes")
    flush_messages: int | None = _default("flush.messages")
    flush_ms: int | None = _default("flush.ms")
    message_timestamp_type: str = _default("message.timestamp.type")
    max_message_bytes: int = _default("max.message.bytes")
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    max_decompressed_bytes: int = _default("floe.message.max.decompressed.bytes")
    cleanup_policy: str = _default("cleanup.policy")
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    delete_retention_ms: int = _default("delete.retention.ms")

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            _FIELD_CHECKS[field.name](field.name, value)

    @property
    def uses_log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        """cleanup.policy names compact: the cleaner keeps the latest record of each key, and every record needs a key."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """cleanup.policy names delete: retention.ms and retention.bytes delete old segments."""
        return "delete" in self.cleanup_policy.split(",")

    @classmethod
    def from_kafka(cls, configs: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Build a config from Kafka-named string settings laid over ``base`` (or the defaults).

        Broker-level names (``log.*``, ``message.max.bytes``) are applied first and topic-level names
        second, so a topic override wins as it does in Kafka; among broker-level names the finer unit
        wins (``log.retention.ms`` over ``log.retention.minutes`` over ``log.retention.hours``).
        Unknown keys are ignored; a value that does not parse or is out of range raises ValueError
        naming the key.
        """
        changes: dict[str, Any] = {}
        for key, setting, parse in _KAFKA_KEYS:
            if key not in configs:
                continue
            raw = configs[key]
            field_name = setting.log_field
            try:
                value = _field_value(setting, parse(str(raw).strip()))
                _FIELD_CHECKS[field_name](field_name, value)
            except ValueError as error:
                raise ValueError(f"invalid value {raw!r} for {key}: {error}") from None
            changes[field_name] = value
        return replace(base or cls(), **changes)


def _check_positive_int32(name: str, value: object) -> None:
    if not isinstance(value, int) or not 0 < value <= INT32_MAX:
        raise ValueError(f"{name} must be an integer in [1, {INT32_MAX}], got {value!r}")


def _check_non_negative(name: str, value: object) -> None:
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def _check_positive(name: str, value: object) -> None:
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _check_retention(name: str, value: object) -> None:
    if not isinstance(value, int) or value < -1:
        raise ValueError(f"{name} must be -1 (unlimited) or a non-negative integer, got {value!r}")


def _check_optional_positive(name: str, value: object) -> None:
    if value is not None:
        _check_positive(name, value)


def _check_segment_bytes(name: str, value: Any) -> None:
    _check_positive_int32(name, value)
    if value < 14:
        raise ValueError(f"{name} must be at least 14 bytes, got {value!r}")


def _check_index_bytes(name: str, value: Any) -> None:
    _check_positive_int32(name, value)
    if value < 12:
        raise ValueError(f"{name} must hold at least one index entry (12 bytes), got {value!r}")


def _check_cleanup_policy(name: str, value: object) -> None:
    if value not in CLEANUP_POLICIES:
        raise ValueError(f"{name} must be one of {', '.join(CLEANUP_POLICIES)}, got {value!r}")


def _check_ratio(name: str, value: object) -> None:
    if not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")


def _check_timestamp_type(name: str, value: object) -> None:
    if value not in TIMESTAMP_TYPES:
        raise ValueError(f"{name} must be one of {', '.join(TIMESTAMP_TYPES)}, got {value!r}")


_FIELD_CHECKS: dict[str, Callable[[str, Any], None]] = {
    "segment_bytes": _check_segment_bytes,
    "segment_ms": _check_positive,
    "index_interval_bytes": _check_non_negative,
    "segment_index_bytes": _check_index_bytes,
    "retention_ms": _check_retention,
    "retention_bytes": _check_retention,
    "flush_messages": _check_optional_positive,
    "flush_ms": _check_optional_positive,
    "message_timestamp_type": _check_timestamp_type,
    "max_message_bytes": _check_positive_int32,
    "file_delete_delay_ms": _check_non_negative,
    "max_decompressed_bytes": _check_positive,
    "cleanup_policy": _check_cleanup_policy,
    "min_cleanable_dirty_ratio": _check_ratio,
    "min_compaction_lag_ms": _check_non_negative,
    "max_compaction_lag_ms": _check_positive,
    "delete_retention_ms": _check_non_negative,
}


# (Kafka key, setting, parser) in application order: every broker-level synonym from the coarsest unit
# to the finest, then the topic-level names, so a finer unit and then a topic's own config win.
_KAFKA_KEYS: tuple[tuple[str, Setting, Callable[[str], Any]], ...] = (
    *((synonym.name, s, synonym.parse if s.kind is Kind.INT else _parser(s))
      for s in _LOG_SETTINGS for synonym in reversed(s.synonyms)),
    *((s.name, s, _parser(s)) for s in _LOG_SETTINGS),
)
