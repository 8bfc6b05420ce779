"""The ACL model: which bindings CreateAcls accepts, and what DescribeAcls/DeleteAcls filters match."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    binding_from_codes,
    operation_name,
    parse_operation,
)

READ_ORDERS = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                         AclPermission.ALLOW)
PREFIX_ORD = AclBinding(ResourceType.TOPIC, "ord", PatternType.PREFIXED, "User:bob", "10.0.0.1", AclOperation.WRITE,
                        AclPermission.DENY)
ANY_TOPIC = AclBinding(ResourceType.TOPIC, "*", PatternType.LITERAL, "User:*", "*", AclOperation.DESCRIBE,
                       AclPermission.ALLOW)
GROUP_G = AclBinding(ResourceType.GROUP, "orders", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                     AclPermission.ALLOW)
ALL = [READ_ORDERS, PREFIX_ORD, ANY_TOPIC, GROUP_G]


def test_wire_codes_are_kafkas() -> None:
    assert binding_from_codes(2, "orders", 3, "User:alice", "*", 3, 3) == READ_ORDERS
    assert binding_from_codes(4, "kafka-cluster", 3, "User:b", "*", 9, 2).operation is AclOperation.CLUSTER_ACTION
    assert binding_from_codes(5, "tx", 4, "User:b", "*", 12, 3).resource_type is ResourceType.TRANSACTIONAL_ID


@pytest.mark.parametrize(("codes", "message"), [
    ((1, "orders", 3, "User:a", "*", 3, 3), "resource type"),
    ((2, "orders", 1, "User:a", "*", 3, 3), "pattern type"),
    ((2, "orders", 2, "User:a", "*", 3, 3), "pattern type"),
    ((2, "orders", 3, "User:a", "*", 1, 3), "operation"),
    ((2, "orders", 3, "User:a", "*", 3, 1), "permission"),
    ((2, "orders", 3, "alice", "*", 3, 3), "Type:name"),
    ((2, "", 3, "User:a", "*", 3, 3), "names a resource"),
    ((2, "*", 4, "User:a", "*", 3, 3), "PREFIXED"),
    ((4, "my-cluster", 3, "User:a", "*", 9, 3), "kafka-cluster"),
    ((2, "orders", 3, "User:a", "", 3, 3), "host"),
    ((9, "orders", 3, "User:a", "*", 3, 3), "unknown resource type 9"),
    ((2, "orders", 3, "User:a", "*", 42, 3), "unknown operation 42"),
])
def test_bindings_kafka_refuses_are_refused(codes: tuple, message: str) -> None:
    with pytest.raises(AclError, match=message):
        binding_from_codes(*codes)


def _matching(flt: AclBindingFilter) -> list[AclBinding]:
    return [b for b in ALL if flt.matches(b)]


def test_a_filter_of_anys_and_nulls_matches_everything() -> None:
    assert _matching(AclBindingFilter.from_codes(1, None, 1, None, None, 1, 1)) == ALL


def test_a_filter_narrows_by_each_field() -> None:
    assert _matching(AclBindingFilter.from_codes(3, None, 1, None, None, 1, 1)) == [GROUP_G]
    assert _matching(AclBindingFilter.from_codes(2, "orders", 1, None, None, 1, 1)) == [READ_ORDERS]
    assert _matching(AclBindingFilter.from_codes(1, None, 4, None, None, 1, 1)) == [PREFIX_ORD]
    assert _matching(AclBindingFilter.from_codes(1, None, 1, "User:alice", None, 1, 1)) == [READ_ORDERS, GROUP_G]
    assert _matching(AclBindingFilter.from_codes(1, None, 1, None, "10.0.0.1", 1, 1)) == [PREFIX_ORD]
    assert _matching(AclBindingFilter.from_codes(1, None, 1, None, None, 8, 1)) == [ANY_TOPIC]
    assert _matching(AclBindingFilter.from_codes(1, None, 1, None, None, 1, 2)) == [PREFIX_ORD]


def test_a_match_filter_finds_every_binding_that_applies_to_the_named_resource() -> None:
    assert _matching(AclBindingFilter.from_codes(2, "orders", 2, None, None, 1, 1)) == [READ_ORDERS, PREFIX_ORD, ANY_TOPIC]
    assert _matching(AclBindingFilter.from_codes(2, "payments", 2, None, None, 1, 1)) == [ANY_TOPIC]


def test_a_filter_with_a_malformed_principal_is_refused() -> None:
    with pytest.raises(AclError):
        AclBindingFilter.from_codes(1, None, 1, "alice", None, 1, 1)


def test_operation_names_read_as_kafka_writes_them() -> None:
    assert operation_name(AclOperation.DESCRIBE_CONFIGS) == "DescribeConfigs"
    assert parse_operation("IdempotentWrite") is AclOperation.IDEMPOTENT_WRITE
    assert parse_operation("cluster_action") is AclOperation.CLUSTER_ACTION
    with pytest.raises(AclError):
        parse_operation("Any")


@given(st.integers(-128, 127), st.text(max_size=20), st.integers(-128, 127), st.text(max_size=20),
       st.text(max_size=10), st.integers(-128, 127), st.integers(-128, 127))
def test_any_wire_values_make_a_binding_or_an_acl_error(resource_type: int, name: str, pattern: int, principal: str,
                                                        host: str, operation: int, permission: int) -> None:
    try:
        binding = binding_from_codes(resource_type, name, pattern, principal, host, operation, permission)
    except AclError:
        return
    assert binding.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)
    assert AclBindingFilter.from_codes(resource_type, name, pattern, principal, host, operation,
                                       permission).matches(binding)
