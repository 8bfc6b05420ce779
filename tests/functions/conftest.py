"""Fixtures for the front-end tests: one local stack with the HTTP adapter for the session, its API
as an `HttpApi`, fresh topics, and a way to read log-end offsets straight from the broker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator

import pytest

from broker_core.client import LATEST, FloeClient
from broker_core.local_stack import LocalStack
from tests.functions.http_api import HttpApi
from tests.support.stack import TEST_BROKER_OVERRIDES

# Tiering runs every 300 ms so tests that wait for uploads wait little.
HTTP_STACK_OVERRIDES = {**TEST_BROKER_OVERRIDES, "remote.log.manager.task.interval.ms": "300"}


@pytest.fixture(scope="session")
def http_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    stack = LocalStack(directory=tmp_path_factory.mktemp("http-stack"), brokers=1, overrides=HTTP_STACK_OVERRIDES,
                       http=True)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop(save_state=False)


@pytest.fixture(scope="session")
def api(http_stack: LocalStack) -> HttpApi:
    info = http_stack.describe()["http"]
    return HttpApi(info["url"], info["token"])


@pytest.fixture
def make_topic(api: HttpApi) -> Callable[..., str]:
    """Create a topic with a fresh name through the HTTP API; its name."""

    def create(partitions: int = 3, configs: dict[str, str] | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        answer = api.post("/v1/topics", {
            "topic_name": name, "partitions_count": partitions, "replication_factor": 1,
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
        })
        assert answer.status == 201, answer.body
        return name

    return create


@pytest.fixture
def log_end_offsets(http_stack: LocalStack) -> Callable[[str], dict[int, int]]:
    """The high watermark of every partition of a topic, asked of the broker over the Kafka protocol."""

    def read(topic: str) -> dict[int, int]:
        async def ask() -> dict[int, int]:
            async with FloeClient(http_stack.bootstrap_servers) as client:
                count = await client.num_partitions(topic)
                return {p: (await client.list_offsets(topic, p, LATEST))[0] for p in range(count)}

        return asyncio.run(ask())

    return read
