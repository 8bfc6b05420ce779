"""The settings registry: defaults that agree across scopes, and a reference page that is current."""

from __future__ import annotations

from pathlib import Path

from broker_core.settings import BROKER_SETTINGS, TOPIC_SETTINGS, markdown_reference

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_a_topic_setting_defaults_to_the_default_of_its_broker_synonym() -> None:
    for setting in TOPIC_SETTINGS.values():
        synonym = BROKER_SETTINGS.get(setting.broker_synonym or "")
        if synonym is not None:
            assert setting.default == synonym.default, setting.name


def test_the_configuration_reference_is_generated_from_the_registry() -> None:
    assert REFERENCE.read_text() == markdown_reference(), (
        "docs/configuration.md is stale: run `python -m broker_core.settings > docs/configuration.md`"
    )
