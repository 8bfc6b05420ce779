"""AclStore against moto: bindings read back whole, idempotent creation, filtered deletion, concurrent deleters."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from broker_core.aws import AwsSettings
from broker_core.security.acl_store import AclStore
from broker_core.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)


@pytest.fixture
def store(aws_settings: AwsSettings) -> AclStore:
    store = AclStore(aws_settings)
    store.ensure_table()
    return store


def binding(name: str, principal: str = "User:alice", **changes: object) -> AclBinding:
    fields = dict(resource_type=ResourceType.TOPIC, resource_name=name, pattern_type=PatternType.LITERAL,
                  principal=principal, host="*", operation=AclOperation.READ, permission=AclPermission.ALLOW)
    fields.update(changes)
    return AclBinding(**fields)  # type: ignore[arg-type]


def test_bindings_with_awkward_names_read_back_whole_and_creating_twice_stores_once(store: AclStore) -> None:
    stored = [
        binding("orders/eu%2F=x"),
        binding("arn", principal="User:arn:aws:iam::123456789012:role/app/x"),
        binding("g" * 5000, principal="User:" + "p" * 3000, resource_type=ResourceType.GROUP),
        binding("kafka-cluster", resource_type=ResourceType.CLUSTER, operation=AclOperation.CLUSTER_ACTION),
        binding("tx.", pattern_type=PatternType.PREFIXED, resource_type=ResourceType.TRANSACTIONAL_ID,
                operation=AclOperation.WRITE, permission=AclPermission.DENY, host="10.1.2.3"),
    ]
    for b in stored + stored[:2]:
        store.create(b)
    assert sorted(store.load(), key=repr) == sorted(stored, key=repr)


def test_deletion_removes_what_each_filter_matches_and_reports_it_per_filter(store: AclStore) -> None:
    for b in (binding("a"), binding("b"), binding("a", principal="User:bob")):
        store.create(b)
    by_alice = AclBindingFilter.from_codes(1, None, 1, "User:alice", None, 1, 1)
    nothing = AclBindingFilter.from_codes(3, None, 1, None, None, 1, 1)
    deleted_by_alice, deleted_by_nothing = store.delete_matching([by_alice, nothing])
    assert sorted(deleted_by_alice, key=repr) == [binding("a"), binding("b")]
    assert deleted_by_nothing == []
    assert store.load() == [binding("a", principal="User:bob")]


def test_concurrent_deleters_of_one_binding_report_it_once(store: AclStore) -> None:
    store.create(binding("a"))
    everything = AclBindingFilter.from_codes(1, None, 1, None, None, 1, 1)
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: store.delete_matching([everything]), range(4)))
    assert sorted(len(answer[0]) for answer in answers) == [0, 0, 0, 1]
    assert store.load() == []
