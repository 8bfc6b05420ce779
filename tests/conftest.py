"""Fixtures shared by every test: the moto server and per-test AWS settings; the Hypothesis profile.

`make test` runs Hypothesis derandomized, so every run checks the same generated examples and a
red CI run means a change broke something, not that a search wandered into an old bug. `make fuzz`
runs the property and fuzz tests with fresh random examples (FLOE_HYPOTHESIS_PROFILE=explore) to
find new ones.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import settings

from broker_core.aws import AwsSettings
from broker_core.local_moto import MotoServer
from tests.support.moto_server import TEST_REGION, running_moto_server

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("FLOE_HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """moto in server mode, a separate process on a free loopback port, for the whole session."""
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    with running_moto_server(log_path=log_path) as server:
        yield server


@pytest.fixture
def table_prefix() -> str:
    """A table prefix no other test uses, so tests sharing the moto server never see each other."""
    return f"t{uuid.uuid4().hex[:8]}-"


@pytest.fixture
def aws_settings(moto_server: MotoServer, table_prefix: str) -> AwsSettings:
    return AwsSettings(
        endpoint_url=moto_server.endpoint_url,
        region=TEST_REGION,
        bucket=f"{table_prefix}data",
        table_prefix=table_prefix,
    )
