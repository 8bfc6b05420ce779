"""Replication throttles: the throttled-replicas lists, the quota's measure, and where dynamic broker
configs come from."""

from __future__ import annotations

import pytest

from broker_core.quotas.rates import WindowConfig
from broker_core.quotas.replication import (
    ReplicationQuota,
    ThrottledReplicasError,
    lists_replica,
    parse_throttled_replicas,
)
from broker_core.settings import (
    INT64_MAX,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_STATIC_BROKER,
    ConfigError,
    check_dynamic_broker_config,
    live_broker_entry,
)


def test_a_list_names_partition_broker_pairs_or_every_replica() -> None:
    listed = parse_throttled_replicas("0:1, 0:2,3:1")
    assert listed.throttles(0, 2) and listed.throttles(3, 1) and not listed.throttles(1, 1)
    assert parse_throttled_replicas("*").throttles(7, 9)
    assert not parse_throttled_replicas("").throttles(0, 1)


@pytest.mark.parametrize("text", ["0-1", "0:", "a:1", "0:1,,", "-1:2"])
def test_a_malformed_list_is_refused_naming_the_entry(text: str) -> None:
    with pytest.raises(ThrottledReplicasError):
        parse_throttled_replicas(text)
    assert not lists_replica(text, 0, 1)


def test_the_quota_is_exceeded_once_the_recorded_rate_passes_the_rate_read_now() -> None:
    rate = [1000.0]
    quota = ReplicationQuota(WindowConfig(samples=2, window_s=1.0), lambda: rate[0], now_s=0.0)
    assert quota.limited() and not quota.exceeded(0.0)
    quota.record(900, 0.1)
    assert not quota.exceeded(0.2)
    quota.record(800, 0.3)
    assert quota.exceeded(0.4)  # 1700 bytes over 1.4 s (Kafka's Rate counts at least samples - 1 windows more)
    rate[0] = 2000.0  # a dynamic config change applies at the next check
    assert not quota.exceeded(0.5)
    rate[0] = float(INT64_MAX)
    assert not quota.limited() and not quota.exceeded(0.6)


def resolved(name: str, broker_id: int, overrides: dict[str, str], dynamic: dict[str, dict[str, str]]
             ) -> tuple[str | None, int]:
    entry = live_broker_entry(name, broker_id, overrides, dynamic)
    return entry.value, entry.source


def test_a_broker_value_wins_over_the_cluster_default_over_the_static_setting() -> None:
    name = "follower.replication.throttled.rate"
    dynamic = {"<default>": {name: "300"}, "2": {name: "200"}}
    assert resolved(name, 2, {name: "100"}, dynamic) == ("200", SOURCE_DYNAMIC_BROKER)
    assert resolved(name, 1, {name: "100"}, dynamic) == ("300", SOURCE_DYNAMIC_DEFAULT_BROKER)
    assert resolved(name, 1, {name: "100"}, {}) == ("100", SOURCE_STATIC_BROKER)
    assert resolved(name, 1, {}, {}) == (str(INT64_MAX), SOURCE_DEFAULT)
    # A static setting never takes a dynamic value, even one stored for it.
    assert live_broker_entry("num.partitions", 1, {}, {"1": {"num.partitions": "9"}}).value == "1"


@pytest.mark.parametrize(("name", "value"), [("num.partitions", "3"), ("no.such.config", "1"),
                                             ("log.cleaner.threads", "0"), ("log.cleaner.backoff.ms", "soon"),
                                             ("leader.replication.throttled.rate", "-1")])
def test_only_dynamic_settings_with_values_they_can_take_may_change_live(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        check_dynamic_broker_config(name, value)
