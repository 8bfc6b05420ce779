"""LogConfig: Kafka's defaults and Kafka's configuration names."""

from __future__ import annotations

import pytest

from broker_core.log import LogConfig


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1024**3
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.index_interval_bytes == 4096
    assert config.segment_index_bytes == 10 * 1024**2
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.flush_messages is None and config.flush_ms is None
    assert config.message_timestamp_type == "CreateTime"
    assert config.max_message_bytes == 1048588
    assert config.file_delete_delay_ms == 60000


def test_topic_level_names_are_applied() -> None:
    config = LogConfig.from_kafka(
        {
            "segment.bytes": "1048576",
            "segment.ms": "60000",
            "retention.ms": "-1",
            "retention.bytes": "5000000",
            "message.timestamp.type": "LogAppendTime",
            "max.message.bytes": "2000000",
            "flush.messages": "1",
            "index.interval.bytes": "1024",
        }
    )
    assert config.segment_bytes == 1048576 and config.segment_ms == 60000
    assert config.retention_ms == -1 and config.retention_bytes == 5000000
    assert config.uses_log_append_time and config.max_message_bytes == 2000000
    assert config.flush_messages == 1 and config.index_interval_bytes == 1024


def test_broker_level_names_are_applied_with_the_finest_unit_winning() -> None:
    config = LogConfig.from_kafka(
        {
            "log.segment.bytes": "2048",
            "log.roll.hours": "1",
            "log.retention.hours": "1",
            "log.retention.minutes": "2",
            "message.max.bytes": "100",
            "log.flush.interval.ms": "1000",
        }
    )
    assert config.segment_bytes == 2048
    assert config.segment_ms == 3600 * 1000
    assert config.retention_ms == 2 * 60 * 1000
    assert config.max_message_bytes == 100
    assert config.flush_ms == 1000
    assert LogConfig.from_kafka({"log.retention.minutes": "2", "log.retention.ms": "7"}).retention_ms == 7


def test_topic_overrides_win_over_broker_defaults_and_the_base() -> None:
    base = LogConfig(retention_ms=1)
    config = LogConfig.from_kafka({"log.retention.ms": "10", "retention.ms": "20"}, base)
    assert config.retention_ms == 20
    assert LogConfig.from_kafka({}, base).retention_ms == 1


def test_long_max_flush_settings_mean_never() -> None:
    config = LogConfig.from_kafka({"flush.messages": str(2**63 - 1), "log.flush.interval.ms": str(2**63 - 1)})
    assert config.flush_messages is None and config.flush_ms is None


def test_unknown_keys_are_ignored() -> None:
    assert LogConfig.from_kafka({"cleanup.policy": "delete", "foo": "bar"}) == LogConfig()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "abc"),
        ("segment.bytes", "0"),
        ("log.segment.bytes", str(2**31)),
        ("retention.ms", "-2"),
        ("message.timestamp.type", "WallClock"),
        ("flush.messages", "0"),
        ("max.message.bytes", "-5"),
    ],
)
def test_an_invalid_value_raises_value_error_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        LogConfig.from_kafka({key: value})


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ValueError, match="segment_bytes"):
        LogConfig(segment_bytes=0)
