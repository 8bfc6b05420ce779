"""Topic administration over HTTP: create, list, describe, delete, and the brokers' refusals as 4xx."""

from __future__ import annotations

import uuid

from tests.functions.http_api import HttpApi


def fresh_name() -> str:
    return f"admin-{uuid.uuid4().hex[:10]}"


def test_a_created_topic_is_listed_described_and_deleted(api: HttpApi) -> None:
    name = fresh_name()
    created = api.post("/v1/topics", {"topic_name": name, "partitions_count": 3, "replication_factor": 1,
                                      "configs": [{"name": "retention.ms", "value": "3600000"}]})
    assert created.status == 201
    assert created.body["partitions_count"] == 3
    assert [p["partition_id"] for p in created.body["partitions"]] == [0, 1, 2]
    assert created.body["configs"]["retention.ms"] == "3600000"

    listed = api.get("/v1/topics").body["topics"]
    assert {"topic_name": name, "topic_id": created.body["topic_id"], "partitions_count": 3,
            "replication_factor": 1} in listed

    described = api.get(f"/v1/topics/{name}").body
    assert described["topic_id"] == created.body["topic_id"]
    assert all(p["leader"] == 1 and p["isr"] == [1] for p in described["partitions"])

    assert api.delete(f"/v1/topics/{name}").status == 204
    assert api.get(f"/v1/topics/{name}").status == 404
    assert name not in [t["topic_name"] for t in api.get("/v1/topics").body["topics"]]


def test_creating_a_topic_twice_gets_409(api: HttpApi) -> None:
    name = fresh_name()
    assert api.post("/v1/topics", {"topic_name": name}).status == 201
    again = api.post("/v1/topics", {"topic_name": name})
    assert again.status == 409
    assert again.body["kafka_error"] == "topic_already_exists"


def test_the_brokers_refusals_are_client_errors(api: HttpApi) -> None:
    unknown_config = api.post("/v1/topics", {"topic_name": fresh_name(),
                                             "configs": [{"name": "no.such.config", "value": "1"}]})
    assert unknown_config.status == 400
    too_many_replicas = api.post("/v1/topics", {"topic_name": fresh_name(), "replication_factor": 3})
    assert too_many_replicas.status == 400
    bad_name = api.post("/v1/topics", {"topic_name": "has space"})
    assert bad_name.status == 422
    assert bad_name.body["errors"][0]["field"] == "body.topic_name"


def test_unknown_topics_get_404(api: HttpApi) -> None:
    assert api.get("/v1/topics/missing-topic").status == 404
    assert api.delete("/v1/topics/missing-topic").status == 404
