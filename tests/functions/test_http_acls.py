"""The HTTP API checks the same ACLs as the Kafka listener: each IAM caller's principal against the acls
table, through the local adapter with an authorizer configured, against moto server and a real broker."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator

import pytest

from broker_core.local_stack import LocalStack
from broker_core.security.acl_store import AclStore
from broker_core.security.acls import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from tests.functions.conftest import caller_arn, extra_adapter
from tests.functions.http_api import HttpApi

RUN = uuid.uuid4().hex[:8]
SHARED = f"acl-shared-{RUN}"  # alice writes and reads it; bob has no ACL on it; carol is denied WRITE
BOB_PREFIX = f"bob-{RUN}-"  # bob may create and delete topics with this prefix
GROUP = f"acl-group-{RUN}"
VALUE = {"value": {"type": "STRING", "data": "x"}}


def principal(name: str) -> str:
    return f"User:{caller_arn(name)}"


def acl(name: str, operation: AclOperation, resource_type: ResourceType, resource: str,
        pattern: PatternType = PatternType.LITERAL, permission: AclPermission = AclPermission.ALLOW) -> AclBinding:
    return AclBinding(resource_type, resource, pattern, principal(name), "*", operation, permission)


ACLS = [
    acl("alice", AclOperation.WRITE, ResourceType.TOPIC, SHARED),
    acl("alice", AclOperation.READ, ResourceType.TOPIC, SHARED),
    acl("alice", AclOperation.READ, ResourceType.GROUP, GROUP),
    acl("carol", AclOperation.ALL, ResourceType.TOPIC, SHARED),
    acl("carol", AclOperation.WRITE, ResourceType.TOPIC, SHARED, permission=AclPermission.DENY),
    acl("bob", AclOperation.CREATE, ResourceType.TOPIC, BOB_PREFIX, PatternType.PREFIXED),
    acl("bob", AclOperation.DELETE, ResourceType.TOPIC, BOB_PREFIX, PatternType.PREFIXED),
]


@pytest.fixture(scope="module")
def guarded(http_stack: LocalStack, api: HttpApi,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, HttpApi]]:
    """An adapter with the standard authorizer on, and the ACLs above stored; an `HttpApi` per caller."""
    assert api.post("/v1/topics", {"topic_name": SHARED, "partitions_count": 1, "replication_factor": 1}).status == 201
    store = AclStore(http_stack.aws)
    store.ensure_table()
    for binding in ACLS:
        store.create(binding)
    tokens = {name: uuid.uuid4().hex for name in ("alice", "bob", "carol")}
    with extra_adapter(http_stack, tmp_path_factory.mktemp("acls"),
                       FLOE_HTTP_CALLERS=json.dumps({t: caller_arn(n) for n, t in tokens.items()}),
                       FLOE_AUTHORIZER_CLASS_NAME="org.apache.kafka.metadata.authorizer.StandardAuthorizer") as url:
        yield {name: HttpApi(url, token) for name, token in tokens.items()}


def assert_refused(answer, kafka_error: str) -> None:
    assert answer.status == 403, answer.body
    assert answer.body["error_code"] == 403
    assert answer.body["kafka_error"] == kafka_error
    assert answer.body["errors"] == []


def test_produce_needs_write_on_the_topic_and_a_deny_wins(
        guarded: dict[str, HttpApi], log_end_offsets: Callable[[str], dict[int, int]]) -> None:
    before = log_end_offsets(SHARED)[0]
    assert guarded["alice"].post(f"/v1/topics/{SHARED}/records", VALUE).status == 200
    assert_refused(guarded["bob"].post(f"/v1/topics/{SHARED}/records", VALUE), "TOPIC_AUTHORIZATION_FAILED")
    assert_refused(guarded["carol"].post(f"/v1/topics/{SHARED}/records", VALUE), "TOPIC_AUTHORIZATION_FAILED")
    assert log_end_offsets(SHARED)[0] == before + 1


def test_fetch_needs_read_on_the_topic(guarded: dict[str, HttpApi]) -> None:
    path = f"/v1/topics/{SHARED}/partitions/0/records?offset=0"
    assert guarded["alice"].get(path).status == 200
    assert guarded["carol"].get(path).status == 200  # ALL allows READ; only WRITE is denied
    assert_refused(guarded["bob"].get(path), "TOPIC_AUTHORIZATION_FAILED")


def test_topic_admin_needs_create_delete_and_describe(guarded: dict[str, HttpApi], api: HttpApi) -> None:
    mine, other = f"{BOB_PREFIX}orders", f"acl-other-{RUN}"
    create = {"partitions_count": 1, "replication_factor": 1}
    assert_refused(guarded["bob"].post("/v1/topics", {"topic_name": other, **create}), "TOPIC_AUTHORIZATION_FAILED")
    assert api.get(f"/v1/topics/{other}").status == 404  # nothing was created
    assert guarded["bob"].post("/v1/topics", {"topic_name": mine, **create}).status == 201
    assert_refused(guarded["bob"].get(f"/v1/topics/{SHARED}"), "TOPIC_AUTHORIZATION_FAILED")
    assert guarded["alice"].get(f"/v1/topics/{SHARED}").status == 200  # WRITE implies DESCRIBE
    assert_refused(guarded["alice"].delete(f"/v1/topics/{mine}"), "TOPIC_AUTHORIZATION_FAILED")
    assert guarded["bob"].delete(f"/v1/topics/{mine}").status == 204


def test_the_topic_list_shows_only_what_the_caller_may_describe(guarded: dict[str, HttpApi]) -> None:
    alice_sees = {t["topic_name"] for t in guarded["alice"].get("/v1/topics").body["topics"]}
    bob_sees = {t["topic_name"] for t in guarded["bob"].get("/v1/topics").body["topics"]}
    assert alice_sees == {SHARED}
    assert SHARED not in bob_sees


def test_groups_need_read_on_the_group(guarded: dict[str, HttpApi]) -> None:
    joined = guarded["alice"].post(f"/v1/groups/{GROUP}/members", {"topics": [SHARED]})
    assert joined.status == 200, joined.body
    assert_refused(guarded["bob"].post(f"/v1/groups/{GROUP}/members", {"topics": [SHARED]}),
                   "GROUP_AUTHORIZATION_FAILED")
    assert_refused(guarded["bob"].get(f"/v1/groups/{GROUP}/offsets"), "GROUP_AUTHORIZATION_FAILED")
    assert guarded["alice"].get(f"/v1/groups/{GROUP}/offsets").status == 200  # READ implies DESCRIBE
