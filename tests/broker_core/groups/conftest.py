"""Fixtures of the group protocol tests: a two-broker stack shared per module, a topic, raw members."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from broker_core.client import BlockingConnection
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from tests.broker_core.groups.raw_member import RawMember
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.retention.check.interval.ms": "300",
}


@pytest.fixture(scope="module")
def group_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("group-stack"), brokers=2, overrides=GROUP_OVERRIDES) as stack:
        yield stack


@pytest.fixture(scope="module")
def group_topic(group_stack: LocalStack) -> str:
    """A 4-partition topic that exists before any group test commits offsets for it."""
    name = "group-test-topic"
    MetadataStore(group_stack.aws).create_topic(name, 4, 1)
    connection = BlockingConnection("127.0.0.1", group_stack.processes[1].port)

    def known_with_four_partitions() -> bool:
        response = connection.request(ApiKey.METADATA, {"topics": [{"name": name}], "allow_auto_topic_creation": False,
                                                        "include_cluster_authorized_operations": False,
                                                        "include_topic_authorized_operations": False}, 9)
        return response.topics[0].error_code == 0 and len(response.topics[0].partitions) == 4

    try:
        wait_until(known_with_four_partitions, f"broker 1 knows {name} with 4 partitions", 20)
    finally:
        connection.close()
    return name


@pytest.fixture
def group_id() -> str:
    return f"group-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def members(group_stack: LocalStack, group_id: str) -> Iterator[Any]:
    """A factory of RawMembers of this test's group; every one is closed after the test."""
    made: list[RawMember] = []

    def make(**kwargs: Any) -> RawMember:
        member = RawMember(group_stack, kwargs.pop("group_id", group_id), **kwargs)
        made.append(member)
        return member

    yield make
    for member in made:
        member.close()


@pytest.fixture
def in_background() -> Iterator[Any]:
    """Run a blocking call (a JoinGroup) in a thread; returns its Future."""
    pool = ThreadPoolExecutor(max_workers=8)

    def submit(fn: Any, *args: Any, **kwargs: Any) -> Future:
        return pool.submit(fn, *args, **kwargs)

    yield submit
    pool.shutdown(wait=True, cancel_futures=True)
