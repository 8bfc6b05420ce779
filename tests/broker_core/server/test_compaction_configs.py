"""The topic-config check of compaction settings (CreateTopics answers INVALID_CONFIG with its message)."""

from __future__ import annotations

import pytest

from broker_core.server.config import TopicConfigError, validate_topic_configs


@pytest.mark.parametrize("configs", [
    {"cleanup.policy": "compact"},
    {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.1", "delete.retention.ms": "0"},
    {"cleanup.policy": "delete,compact", "min.compaction.lag.ms": "1000", "max.compaction.lag.ms": "60000"},
    {"cleanup.policy": "delete", "remote.storage.enable": "true"},
])
def test_valid_compaction_configs_are_accepted(configs: dict[str, str]) -> None:
    validate_topic_configs(configs)


@pytest.mark.parametrize(("configs", "named"), [
    ({"cleanup.policy": "compact,snapshot"}, "cleanup.policy"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
    ({"min.cleanable.dirty.ratio": "half"}, "min.cleanable.dirty.ratio"),
    ({"delete.retention.ms": "-1"}, "delete.retention.ms"),
    ({"max.compaction.lag.ms": "0"}, "max.compaction.lag.ms"),
    ({"min.compaction.lag.ms": "2000", "max.compaction.lag.ms": "1000"}, "min.compaction.lag.ms"),
    ({"cleanup.policy": "compact", "remote.storage.enable": "true"}, "remote.storage.enable"),
    ({"cleanup.policy": "compact,delete", "remote.storage.enable": "true"}, "remote.storage.enable"),
])
def test_invalid_compaction_configs_are_refused_naming_the_setting(configs: dict[str, str], named: str) -> None:
    with pytest.raises(TopicConfigError, match=named.replace(".", r"\.")):
        validate_topic_configs(configs)


def test_a_broker_wide_compact_policy_refuses_a_tiered_topic_that_does_not_override_it() -> None:
    from types import SimpleNamespace

    broker = SimpleNamespace(overrides={"log.cleanup.policy": "compact"})
    validate_topic_configs({"remote.storage.enable": "true", "cleanup.policy": "delete"}, broker)
    with pytest.raises(TopicConfigError, match="cleanup.policy=compact"):
        validate_topic_configs({"remote.storage.enable": "true"}, broker)
