"""Fixtures for the front-end tests: one local stack with the HTTP adapter for the session, its API
as an `HttpApi`, fresh topics, and a way to read log-end offsets straight from the broker."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker_core.client import LATEST, FloeClient
from broker_core.local_stack import LocalStack
from tests.functions.http_api import HttpApi
from tests.support.stack import TEST_BROKER_OVERRIDES
from tests.support.waiting import wait_until

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


# Callers of the second adapter below, by name: each is an IAM user ARN with a bearer token of its own.
CALLERS = ("alice", "bob", "carol")


def caller_arn(name: str) -> str:
    return f"arn:aws:iam::111122223333:user/{name}"


@contextmanager
def extra_adapter(stack: LocalStack, directory: Path, **environment: str) -> Iterator[str]:
    """Another local adapter (two workers) on ``stack``, its environment changed by ``environment``; its URL."""
    ready = directory / "ready.json"
    settings = {
        "FLOE_BOOTSTRAP_SERVERS": stack.bootstrap_servers,
        "FLOE_AWS_ENDPOINT_URL": stack.aws.endpoint_url or "",
        "AWS_REGION": stack.region,
        "FLOE_BUCKET": stack.bucket,
        "FLOE_TABLE_PREFIX": stack.table_prefix,
        "FLOE_HTTP_TOKEN": secrets.token_urlsafe(16),
    }
    with open(directory / "adapter.log", "ab") as log_file:
        process = subprocess.Popen([sys.executable, "-m", "functions.local_adapter", "--port", "0", "--workers", "2",
                                    "--ready-file", str(ready)], stdout=log_file, stderr=subprocess.STDOUT,
                                   env={**os.environ, **settings, **environment}, start_new_session=True)
    try:
        wait_until(lambda: ready.exists() or process.poll() is not None, "the extra adapter is ready", 60.0)
        assert process.poll() is None, (directory / "adapter.log").read_text()
        yield json.loads(ready.read_text())["url"]
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture(scope="session")
def callers(http_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, HttpApi]]:
    """A second local adapter on the session's stack whose callers are several IAM identities (as API
    Gateway would report them); an `HttpApi` per caller name."""
    tokens = {name: secrets.token_urlsafe(16) for name in CALLERS}
    callers_env = json.dumps({token: caller_arn(name) for name, token in tokens.items()})
    with extra_adapter(http_stack, tmp_path_factory.mktemp("callers"), FLOE_HTTP_CALLERS=callers_env) as url:
        yield {name: HttpApi(url, token) for name, token in tokens.items()}
