"""Authorizer: every StandardAuthorizer rule, decided over bindings a test holds (no I/O)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.security.acls import (
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from broker_core.security.authorizer import Authorizer
from broker_core.settings import ConfigError

TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermission.ALLOW, AclPermission.DENY
Op = AclOperation
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(name: str, operation: AclOperation, *, principal: str = ALICE, permission: AclPermission = ALLOW,
        resource_type: ResourceType = TOPIC, pattern: PatternType = LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def authorizer(*bindings: AclBinding, super_users: tuple[str, ...] = (), allow_if_none: bool = False) -> Authorizer:
    return Authorizer(True, super_users, allow_if_none, bindings)


def test_a_disabled_authorizer_allows_everything_even_against_a_deny() -> None:
    disabled = Authorizer(False, (), False, [acl("orders", Op.ALL, permission=DENY)])
    assert disabled.authorize(ALICE, HOST, Op.DELETE, TOPIC, "orders")
    assert Authorizer.disabled().authorize(BOB, HOST, Op.CLUSTER_ACTION, CLUSTER, "kafka-cluster")


def test_no_acl_at_all_denies_unless_allow_everyone_if_no_acl_found() -> None:
    assert not authorizer().authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert authorizer(allow_if_none=True).authorize(ALICE, HOST, Op.READ, TOPIC, "orders")


def test_an_acl_for_someone_else_closes_the_resource_even_with_allow_everyone_if_no_acl_found() -> None:
    auth = authorizer(acl("orders", Op.READ, principal=BOB), allow_if_none=True)
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "payments")


def test_a_literal_allow_permits_that_operation_on_that_resource_only() -> None:
    auth = authorizer(acl("orders", Op.READ))
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders2")
    assert not auth.authorize(ALICE, HOST, Op.READ, GROUP, "orders")
    assert not auth.authorize(BOB, HOST, Op.READ, TOPIC, "orders")


def test_the_literal_wildcard_name_matches_every_resource_of_its_type() -> None:
    auth = authorizer(acl("*", Op.WRITE))
    assert auth.authorize(ALICE, HOST, Op.WRITE, TOPIC, "anything")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, TXN, "anything")


def test_a_prefixed_pattern_matches_names_starting_with_it() -> None:
    auth = authorizer(acl("orders.", Op.READ, pattern=PREFIXED))
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders.eu")
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders.")
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "xorders.eu")


def test_a_literal_name_is_not_a_prefix() -> None:
    assert not authorizer(acl("orders", Op.READ)).authorize(ALICE, HOST, Op.READ, TOPIC, "orders.eu")


def test_deny_wins_over_allow_whichever_pattern_holds_it() -> None:
    auth = authorizer(acl("*", Op.ALL), acl("orders.secret", Op.READ, permission=DENY, pattern=PREFIXED))
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders.public")
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders.secret.v1")
    assert auth.authorize(ALICE, HOST, Op.WRITE, TOPIC, "orders.secret.v1")


def test_a_deny_of_all_denies_every_operation_and_super_users_pass_it() -> None:
    auth = authorizer(acl("orders", Op.READ), acl("orders", Op.ALL, permission=DENY), super_users=(ALICE,))
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    auth = authorizer(acl("orders", Op.READ), acl("orders", Op.ALL, permission=DENY))
    for operation in (Op.READ, Op.DESCRIBE, Op.WRITE, Op.ALTER_CONFIGS):
        assert not auth.authorize(ALICE, HOST, operation, TOPIC, "orders")


def test_super_users_may_do_anything_without_acls() -> None:
    auth = authorizer(super_users=("User:admin", "User:CN=broker-1"))
    assert auth.authorize("User:admin", HOST, Op.DELETE, TOPIC, "orders")
    assert auth.authorize("User:CN=broker-1", HOST, Op.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "orders")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_read_write_delete_and_alter_imply_describe(granted: AclOperation) -> None:
    auth = authorizer(acl("orders", granted))
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, TOPIC, "orders")


def test_alter_configs_implies_describe_configs_and_nothing_implies_more() -> None:
    auth = authorizer(acl("orders", Op.ALTER_CONFIGS), acl("orders", Op.DESCRIBE, principal=BOB))
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "orders")
    assert not auth.authorize(BOB, HOST, Op.READ, TOPIC, "orders")


def test_a_denied_read_does_not_deny_describe() -> None:
    auth = authorizer(acl("orders", Op.DESCRIBE), acl("orders", Op.READ, permission=DENY))
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")


def test_all_allows_every_operation() -> None:
    auth = authorizer(acl("kafka-cluster", Op.ALL, resource_type=CLUSTER))
    for operation in (Op.CLUSTER_ACTION, Op.CREATE, Op.IDEMPOTENT_WRITE, Op.DESCRIBE_CONFIGS, Op.ALTER):
        assert auth.authorize(ALICE, HOST, operation, CLUSTER, "kafka-cluster")


def test_the_wildcard_principal_matches_every_principal() -> None:
    auth = authorizer(acl("orders", Op.READ, principal="User:*"), acl("orders", Op.READ, principal=BOB, permission=DENY))
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert auth.authorize("User:ANONYMOUS", HOST, Op.READ, TOPIC, "orders")
    assert not auth.authorize(BOB, HOST, Op.READ, TOPIC, "orders")


def test_hosts_match_exactly_or_by_wildcard() -> None:
    auth = authorizer(acl("orders", Op.READ, host="10.0.0.1"))
    assert auth.authorize(ALICE, "10.0.0.1", Op.READ, TOPIC, "orders")
    assert not auth.authorize(ALICE, "10.0.0.2", Op.READ, TOPIC, "orders")
    auth = authorizer(acl("orders", Op.READ), acl("orders", Op.READ, host="10.0.0.9", permission=DENY))
    assert auth.authorize(ALICE, "10.0.0.1", Op.READ, TOPIC, "orders")
    assert not auth.authorize(ALICE, "10.0.0.9", Op.READ, TOPIC, "orders")


def test_replaced_acls_decide_from_then_on() -> None:
    auth = authorizer(acl("orders", Op.READ))
    auth.replace_acls([acl("payments", Op.READ)])
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "payments")
    assert auth.acls == (acl("payments", Op.READ),)


def test_authorize_any_finds_a_write_on_some_topic_that_no_deny_covers() -> None:
    assert authorizer(acl("orders", Op.WRITE)).authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    assert authorizer(acl("orders.", Op.WRITE, pattern=PREFIXED)).authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    assert not authorizer(acl("orders", Op.READ)).authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    assert not authorizer(acl("orders", Op.WRITE),
                          acl("ord", Op.WRITE, permission=DENY, pattern=PREFIXED)).authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    assert not authorizer(acl("orders", Op.WRITE),
                          acl("*", Op.WRITE, permission=DENY)).authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    assert authorizer(super_users=(ALICE,)).authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    assert authorizer(allow_if_none=True).authorize_any(ALICE, HOST, Op.WRITE, TOPIC)


def test_settings_turn_the_authorizer_on_with_kafkas_class_names() -> None:
    assert not Authorizer.from_settings({}).enabled
    assert Authorizer.from_settings({}).authorize(ALICE, HOST, Op.DELETE, TOPIC, "orders")
    auth = Authorizer.from_settings({
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin; User:CN=broker-1,O=Floe",
    })
    assert auth.enabled and not auth.allow_everyone_if_no_acl_found
    assert auth.super_users == {"User:admin", "User:CN=broker-1,O=Floe"}
    assert Authorizer.from_settings({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                     "allow.everyone.if.no.acl.found": "true"}).allow_everyone_if_no_acl_found
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        Authorizer.from_settings({"authorizer.class.name": "com.example.MyAuthorizer"})


def test_registered_brokers_are_super_users_only_when_the_setting_says_so() -> None:
    standard = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:admin"}
    broker_3 = "User:broker-3"
    static = Authorizer.from_settings(standard)
    static.replace_broker_principals([broker_3])
    assert not static.authorize(broker_3, HOST, Op.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    dynamic = Authorizer.from_settings({**standard, "floe.super.users.include.brokers": "true"})
    assert not dynamic.authorize(broker_3, HOST, Op.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    # On a PLAINTEXT inter-broker listener a broker registers as User:ANONYMOUS: that never makes everyone super.
    dynamic.replace_broker_principals([broker_3, "User:ANONYMOUS"])
    assert dynamic.authorize(broker_3, HOST, Op.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert dynamic.authorize(broker_3, HOST, Op.DELETE, TOPIC, "orders")
    assert not dynamic.authorize("User:ANONYMOUS", HOST, Op.DESCRIBE, TOPIC, "orders")
    assert dynamic.authorize("User:admin", HOST, Op.DELETE, TOPIC, "orders")
    dynamic.replace_broker_principals([])  # broker 3 is gone from the registry
    assert not dynamic.authorize(broker_3, HOST, Op.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert dynamic.authorize("User:admin", HOST, Op.DELETE, TOPIC, "orders")


NAMES = st.text("ab.", min_size=1, max_size=6)
OPERATIONS = st.sampled_from([o for o in AclOperation if o is not AclOperation.ANY])
BINDINGS = st.builds(
    AclBinding, st.sampled_from([TOPIC, GROUP]), NAMES | st.just("*"), st.sampled_from([LITERAL, PREFIXED]),
    st.sampled_from([ALICE, BOB, "User:*"]), st.sampled_from(["*", HOST, "10.0.0.2"]), OPERATIONS,
    st.sampled_from([ALLOW, DENY]),
)


def _reference(bindings: list[AclBinding], principal: str, host: str, operation: AclOperation,
               resource_type: ResourceType, name: str, allow_if_none: bool) -> bool:
    """The rules of the authorizer's module doc, written out the slow way."""
    def applies(b: AclBinding) -> bool:
        if b.resource_type is not resource_type:
            return False
        if b.pattern_type is LITERAL:
            return b.resource_name in (name, "*")
        return b.resource_name != "*" and name.startswith(b.resource_name)

    applying = [b for b in bindings if applies(b)]
    if not applying:
        return allow_if_none
    mine = [b for b in applying if b.principal in (principal, "User:*") and b.host in (host, "*")]
    if any(b.permission is DENY and b.operation in (operation, Op.ALL) for b in mine):
        return False
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}, Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}
    return any(b.permission is ALLOW and (b.operation in (operation, Op.ALL) or b.operation in implied.get(operation, ()))
               for b in mine)


@given(st.lists(BINDINGS, max_size=8), st.sampled_from([ALICE, BOB]), st.sampled_from([HOST, "10.0.0.2"]), OPERATIONS,
       st.sampled_from([TOPIC, GROUP]), NAMES, st.booleans())
def test_decisions_agree_with_the_rules_written_out(bindings: list[AclBinding], principal: str, host: str,
                                                    operation: AclOperation, resource_type: ResourceType, name: str,
                                                    allow_if_none: bool) -> None:
    bindings = [b for b in bindings if not (b.pattern_type is PREFIXED and b.resource_name == "*")]
    auth = authorizer(*bindings, allow_if_none=allow_if_none)
    assert auth.authorize(principal, host, operation, resource_type, name) == _reference(
        bindings, principal, host, operation, resource_type, name, allow_if_none)


@given(st.lists(BINDINGS, max_size=8), OPERATIONS, NAMES)
def test_adding_a_deny_never_allows_more(bindings: list[AclBinding], operation: AclOperation, name: str) -> None:
    before = authorizer(*bindings).authorize(ALICE, HOST, operation, TOPIC, name)
    after = authorizer(*bindings, acl(name, operation, permission=DENY)).authorize(ALICE, HOST, operation, TOPIC, name)
    assert not after
    assert after <= before


def test_the_scram_credential_apis_need_describe_or_alter_on_the_cluster() -> None:
    from broker_core.protocol.framing import Request
    from broker_core.server.authorization import scram_credentials_allowed

    def request(principal: str) -> Request:
        return Request(50, 0, 1, "c", None, 0, principal=principal, client_host=HOST)

    auth = authorizer(acl("kafka-cluster", Op.DESCRIBE, resource_type=CLUSTER),
                      acl("kafka-cluster", Op.ALTER, resource_type=CLUSTER, principal=BOB))
    assert scram_credentials_allowed(auth, request(ALICE), alter=False)
    assert not scram_credentials_allowed(auth, request(ALICE), alter=True)
    assert scram_credentials_allowed(auth, request(BOB), alter=True)
    assert scram_credentials_allowed(auth, request(BOB), alter=False)
    assert not scram_credentials_allowed(auth, request("User:carol"), alter=False)
    assert scram_credentials_allowed(Authorizer.disabled(), request("User:carol"), alter=True)
