"""Test support: one moto server process per test session, reached over real HTTP.

Wraps ``broker_core.local_moto`` (the launcher ``floe local up`` uses) and sets dummy AWS
credentials so botocore never looks for real ones. Tests isolate themselves from each other by
table prefix, not by separate servers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker_core.local_moto import MotoServer, start_moto_server

TEST_REGION = "us-east-1"
DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": TEST_REGION,
    "AWS_REGION": TEST_REGION,
}


@contextmanager
def running_moto_server(log_path: Path | None = None) -> Iterator[MotoServer]:
    """A moto server on a free loopback port with dummy credentials in the environment."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in DUMMY_CREDENTIALS.items():
            env.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
            env.delenv(name, raising=False)
        server = start_moto_server(host="127.0.0.1", port=0, log_path=log_path)
        try:
            yield server
        finally:
            server.stop()
