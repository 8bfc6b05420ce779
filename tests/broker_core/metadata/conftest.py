"""Fixtures for metadata tests: a MetadataStore with its own tables on the session's moto server."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker_core.aws import AwsSettings
from broker_core.metadata.store import MetadataStore


@pytest.fixture
def store(aws_settings: AwsSettings) -> MetadataStore:
    metadata = MetadataStore(aws_settings)
    metadata.ensure_tables()
    return metadata


@pytest.fixture
def register_brokers(store: MetadataStore) -> Callable[[list[int]], dict[int, int]]:
    """Register brokers on distinct ports; the function returns broker id -> broker epoch."""

    def register(broker_ids: list[int]) -> dict[int, int]:
        return {b: store.register_broker(b, "127.0.0.1", 19092 + b) for b in broker_ids}

    return register
