"""Run a real local stack (moto server + broker processes on loopback) for integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker_core.local_stack import LocalStack

# Low timeouts so failure detection happens within a test's patience; everything else is Kafka's default.
TEST_BROKER_OVERRIDES = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "metadata.poll.interval.ms": "200",
}


@contextmanager
def running_stack(directory: Path, brokers: int = 1, overrides: dict[str, str] | None = None, *,
                  http: bool = False, security: str = "plaintext",
                  broker_overrides: dict[int, dict[str, str]] | None = None) -> Iterator[LocalStack]:
    settings = {**TEST_BROKER_OVERRIDES, **(overrides or {})}
    stack = LocalStack(directory=directory, brokers=brokers, overrides=settings, http=http, security=security,
                       broker_overrides=broker_overrides or {})
    stack.start()
    try:
        yield stack
    finally:
        stack.stop(save_state=False)
