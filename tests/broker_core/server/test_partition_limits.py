"""Partition limits through both front doors: kafka-python's admin client (CreateTopics) and the HTTP topic API.

One broker with floe.max.partitions=10 and floe.max.replicas.per.broker=8, so the limits are reached
with a handful of partitions: each test leaves the cluster holding exactly the 6-partition topic
`held` (created once for the module), with room for 2 more replicas and 4 more partitions.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import PolicyViolationError

from broker_core.local_stack import LocalStack
from tests.functions.http_api import HttpApi
from tests.support.stack import running_stack

LIMITS = {"floe.max.partitions": "10", "floe.max.replicas.per.broker": "8"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(Path(tmp_path_factory.mktemp("limits")), overrides=LIMITS, http=True) as running:
        yield running


@pytest.fixture(scope="module")
def admin(stack: LocalStack) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers, client_id="limits-admin")
    result = client.create_topics([NewTopic("held", 6, 1)])
    assert [(t["name"], t["error_code"]) for t in result["topics"]] == [("held", 0)]
    yield client
    client.close()


@pytest.fixture(scope="module")
def api(stack: LocalStack) -> HttpApi:
    info = stack.describe()["http"]
    return HttpApi(info["url"], info["token"])


def refusal(admin: KafkaAdminClient, topic: NewTopic, *, validate_only: bool = False) -> dict:
    result = admin.create_topics([topic], validate_only=validate_only, raise_errors=False)
    (answer,) = result["topics"]
    return answer


def test_a_topic_past_the_replicas_per_broker_limit_gets_policy_violation(admin: KafkaAdminClient) -> None:
    answer = refusal(admin, NewTopic("three-more", 3, 1))
    assert answer["error_code"] == PolicyViolationError.errno
    assert "floe.max.replicas.per.broker is 8" in answer["error_message"]
    assert "three-more" not in admin.list_topics()


def test_validate_only_is_refused_the_same_way(admin: KafkaAdminClient) -> None:
    answer = refusal(admin, NewTopic("three-more", 3, 1), validate_only=True)
    assert answer["error_code"] == PolicyViolationError.errno
    assert "floe.max.replicas.per.broker" in answer["error_message"]
    assert refusal(admin, NewTopic("two-more", 2, 1), validate_only=True)["error_code"] == 0
    assert "two-more" not in admin.list_topics()


def test_a_million_partitions_are_refused_without_writing_anything(admin: KafkaAdminClient) -> None:
    answer = refusal(admin, NewTopic("huge", 1_000_000, 1))
    assert answer["error_code"] == PolicyViolationError.errno
    assert "floe.max.partitions is 10" in answer["error_message"]
    assert "huge" not in admin.list_topics()
    assert sorted(admin.list_topics()) == ["held"]


def test_the_http_topic_api_answers_400_naming_the_limit(admin: KafkaAdminClient, api: HttpApi) -> None:
    answer = api.post("/v1/topics", {"topic_name": "over-http", "partitions_count": 3, "replication_factor": 1})
    assert answer.status == 400
    assert answer.body["error_code"] == 400
    assert answer.body["kafka_error"] == "policy_violation"
    assert "floe.max.replicas.per.broker" in answer.body["message"]
    assert "over-http" not in admin.list_topics()
