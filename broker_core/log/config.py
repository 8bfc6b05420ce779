"""Per-partition log settings, named and defaulted as in Kafka's topic and broker configuration.

`LogConfig` is the only place the log reads tunables from. `LogConfig.from_kafka` maps Kafka's
string-valued configuration (topic-level names such as ``segment.bytes`` and broker-level names such as
``log.segment.bytes``) onto it, so topic configs stored as Kafka strings can be applied unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

GIB = 1024 * 1024 * 1024
MIB = 1024 * 1024
DAY_MS = 24 * 60 * 60 * 1000
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log; every field is Kafka's default unless given.

    ``flush_messages`` / ``flush_ms`` of None mean "never force an fsync from the append path" (Kafka's
    Long.MAX_VALUE default): durability comes from replication and the page cache. ``retention_ms`` and
    ``retention_bytes`` of -1 mean unlimited.
    """

    segment_bytes: int = GIB
    segment_ms: int = 7 * DAY_MS
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * MIB
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    flush_messages: int | None = None
    flush_ms: int | None = None
    message_timestamp_type: str = "CreateTime"
    max_message_bytes: int = 1048588
    file_delete_delay_ms: int = 60000

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            _FIELD_CHECKS[field.name](field.name, value)

    @property
    def uses_log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

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
        for key, field_name, parse in _KAFKA_KEYS:
            if key not in configs:
                continue
            raw = configs[key]
            try:
                value = parse(str(raw).strip())
                _FIELD_CHECKS[field_name](field_name, value)
            except ValueError as error:
                raise ValueError(f"invalid value {raw!r} for {key}: {error}") from None
            changes[field_name] = value
        return replace(base or cls(), **changes)


def _parse_int(text: str) -> int:
    return int(text)


def _parse_hours(text: str) -> int:
    hours = int(text)
    return hours if hours < 0 else hours * 60 * 60 * 1000


def _parse_minutes(text: str) -> int:
    minutes = int(text)
    return minutes if minutes < 0 else minutes * 60 * 1000


def _parse_flush(text: str) -> int | None:
    value = int(text)
    return None if value == INT64_MAX else value


def _parse_timestamp_type(text: str) -> str:
    return text


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
}

# (Kafka key, LogConfig field, parser) in application order: broker-level coarse to fine, then topic-level.
_KAFKA_KEYS: tuple[tuple[str, str, Callable[[str], Any]], ...] = (
    ("log.segment.bytes", "segment_bytes", _parse_int),
    ("log.roll.hours", "segment_ms", _parse_hours),
    ("log.roll.ms", "segment_ms", _parse_int),
    ("log.index.interval.bytes", "index_interval_bytes", _parse_int),
    ("log.index.size.max.bytes", "segment_index_bytes", _parse_int),
    ("log.retention.hours", "retention_ms", _parse_hours),
    ("log.retention.minutes", "retention_ms", _parse_minutes),
    ("log.retention.ms", "retention_ms", _parse_int),
    ("log.retention.bytes", "retention_bytes", _parse_int),
    ("log.flush.interval.messages", "flush_messages", _parse_flush),
    ("log.flush.interval.ms", "flush_ms", _parse_flush),
    ("log.message.timestamp.type", "message_timestamp_type", _parse_timestamp_type),
    ("message.max.bytes", "max_message_bytes", _parse_int),
    ("log.segment.delete.delay.ms", "file_delete_delay_ms", _parse_int),
    ("segment.bytes", "segment_bytes", _parse_int),
    ("segment.ms", "segment_ms", _parse_int),
    ("index.interval.bytes", "index_interval_bytes", _parse_int),
    ("segment.index.bytes", "segment_index_bytes", _parse_int),
    ("retention.ms", "retention_ms", _parse_int),
    ("retention.bytes", "retention_bytes", _parse_int),
    ("flush.messages", "flush_messages", _parse_flush),
    ("flush.ms", "flush_ms", _parse_flush),
    ("message.timestamp.type", "message_timestamp_type", _parse_timestamp_type),
    ("max.message.bytes", "max_message_bytes", _parse_int),
    ("file.delete.delay.ms", "file_delete_delay_ms", _parse_int),
)
