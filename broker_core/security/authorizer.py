"""Authorizer: may principal P, from host H, perform operation O on resource R? Kafka's StandardAuthorizer rules.

The rules, in the order they decide:
1. A principal named in ``super.users`` may do anything; with ``floe.super.users.include.brokers``, so
   may the inter-broker principals of the registered brokers (`replace_broker_principals`, never
   ``User:ANONYMOUS``), so a broker added to a running cluster is trusted without restarting the others.
2. The ACLs that apply to R are the LITERAL ones naming R, the LITERAL ones naming ``*`` and the
   PREFIXED ones whose name is a prefix of R's; of those, the ones for P (or ``User:*``) and for H
   (or ``*``) count.
3. A counting DENY for O (or ALL) refuses, whatever else allows: deny wins.
4. A counting ALLOW for O (or ALL) permits; an ALLOW of READ, WRITE, DELETE or ALTER also permits
   DESCRIBE, and an ALLOW of ALTER_CONFIGS also permits DESCRIBE_CONFIGS (Kafka's implied operations;
   denials imply nothing).
5. Otherwise: refused if R has any ACL at all (for anyone), else ``allow.everyone.if.no.acl.found``.

Configured by ``authorizer.class.name``: empty (the default) means no authorization, and then
`enabled` is False and every call answers True at the cost of one attribute test; one of
`STANDARD_AUTHORIZER_NAMES` turns these rules on. The ACLs are a cache (`replace_acls`), replaced
whole by the broker's ACL service after every metadata change (see `acl_store`), and so are the
brokers' principals (by the broker, from each metadata image it applies); a check never touches DynamoDB. Used on the event loop; `replace_acls` and `replace_broker_principals` each swap one reference, so
a check sees either the old set or the new one, never a mixture.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from broker_core.settings import ConfigError, bool_setting, broker_setting

from .acls import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from .principal import ANONYMOUS

# Values of authorizer.class.name that turn authorization on: Kafka's own class names (KRaft's and
# ZooKeeper mode's, whose rules are the same), so a server.properties carries over unchanged.
STANDARD_AUTHORIZER_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)

# What an ALLOW of an operation also permits (Kafka's implied operations).
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}

# authorize_any's stand-in resource name, as Kafka's Authorizer.authorizeByResourceType: a super user,
# or a principal allowed because no ACL names this resource, is allowed on any resource of the type.
_ANY_RESOURCE_PROBE = "hardcode"


@dataclass(frozen=True)
class _AclIndex:
    """The ACLs by resource type, then by literal name, and by prefix."""

    literal: dict[ResourceType, dict[str, tuple[AclBinding, ...]]] = field(default_factory=dict)
    prefixed: dict[ResourceType, dict[str, tuple[AclBinding, ...]]] = field(default_factory=dict)
    bindings: tuple[AclBinding, ...] = ()

    @classmethod
    def build(cls, bindings: Iterable[AclBinding]) -> _AclIndex:
        literal: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        prefixed: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        unique = tuple(dict.fromkeys(bindings))
        for binding in unique:
            table = literal if binding.pattern_type is PatternType.LITERAL else prefixed
            table.setdefault(binding.resource_type, {}).setdefault(binding.resource_name, []).append(binding)
        freeze = lambda table: {t: {n: tuple(b) for n, b in names.items()} for t, names in table.items()}  # noqa: E731
        return cls(freeze(literal), freeze(prefixed), unique)

    def applying_to(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        found: list[AclBinding] = []
        literal = self.literal.get(resource_type)
        if literal:
            found.extend(literal.get(name, ()))
            if name != WILDCARD_RESOURCE:
                found.extend(literal.get(WILDCARD_RESOURCE, ()))
        prefixed = self.prefixed.get(resource_type)
        if prefixed:
            for end in range(1, len(name) + 1):
                found.extend(prefixed.get(name[:end], ()))
        return found


def _counts(binding: AclBinding, principal: str, host: str) -> bool:
    return binding.principal in (principal, WILDCARD_PRINCIPAL) and binding.host in (host, WILDCARD_HOST)


def _denies(binding: AclBinding, operation: AclOperation) -> bool:
    return binding.permission is AclPermission.DENY and binding.operation in (operation, AclOperation.ALL)


def _allows(binding: AclBinding, operation: AclOperation) -> bool:
    if binding.permission is not AclPermission.ALLOW:
        return False
    return binding.operation in (operation, AclOperation.ALL) or binding.operation in _IMPLIED_BY.get(operation, ())


class Authorizer:
    """Kafka's ACL decisions over a cached set of ACLs (see the module doc)."""

    def __init__(self, enabled: bool = False, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False, bindings: Iterable[AclBinding] = (), *,
                 brokers_are_super_users: bool = False) -> None:
        self.enabled = enabled
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.brokers_are_super_users = brokers_are_super_users
        # super.users and (brokers_are_super_users) the brokers' principals: one set for the check.
        self._unrestricted = self.super_users
        self._index = _AclIndex.build(bindings)
        # Counts changes of what decisions depend on, so callers may keep a decision until it moves.
        self.generation = 0

    @classmethod
    def disabled(cls) -> Authorizer:
        """No authorization: every call answers True (a broker without ``authorizer.class.name``)."""
        return cls()

    @classmethod
    def from_settings(cls, overrides: Mapping[str, str]) -> Authorizer:
        """From Kafka-named settings (``authorizer.class.name``, ``super.users``,
        ``allow.everyone.if.no.acl.found``); ConfigError for an authorizer class Floe does not have."""
        class_name = broker_setting(overrides, "authorizer.class.name").strip()
        if not class_name:
            return cls.disabled()
        if class_name not in STANDARD_AUTHORIZER_NAMES:
            raise ConfigError(f"authorizer.class.name must be empty or one of {', '.join(STANDARD_AUTHORIZER_NAMES)}, "
                              f"got {class_name!r}")
        super_users = [p.strip() for p in broker_setting(overrides, "super.users").split(";") if p.strip()]
        return cls(True, super_users, bool_setting(overrides, "allow.everyone.if.no.acl.found"),
                   brokers_are_super_users=bool_setting(overrides, "floe.super.users.include.brokers"))

    @property
    def acls(self) -> tuple[AclBinding, ...]:
        """The cached ACLs, each once."""
        return self._index.bindings

    def replace_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Decide by ``bindings`` from now on (the whole set, replacing the previous one)."""
        self._index = _AclIndex.build(bindings)
        self.generation += 1

    def replace_broker_principals(self, principals: Iterable[str]) -> None:
        """The registered brokers' inter-broker principals (the whole set, replacing the previous one):
        super users from now on if ``brokers_are_super_users``, else ignored. User:ANONYMOUS never
        counts: on a PLAINTEXT inter-broker listener it is everyone's principal."""
        if self.brokers_are_super_users:
            self._unrestricted = self.super_users | {p for p in principals if p != ANONYMOUS}
            self.generation += 1

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  resource_name: str) -> bool:
        if not self.enabled or principal in self._unrestricted:
            return True
        applying = self._index.applying_to(resource_type, resource_name)
        if not applying:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for binding in applying:
            if not _counts(binding, principal, host):
                continue
            if _denies(binding, operation):
                return False
            allowed = allowed or _allows(binding, operation)
        return allowed

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the principal may perform ``operation`` on at least one resource of the type that no DENY
        covers (Kafka's authorizeByResourceType, used for idempotent producers' "WRITE on any topic")."""
        if self.authorize(principal, host, operation, resource_type, _ANY_RESOURCE_PROBE):
            return True
        denied_literal: set[str] = set()
        denied_prefixes: set[str] = set()
        allowed_literal: set[str] = set()
        allowed_prefixes: set[str] = set()
        for binding in self._index.bindings:
            if binding.resource_type is not resource_type or not _counts(binding, principal, host):
                continue
            literal = binding.pattern_type is PatternType.LITERAL
            if _denies(binding, operation):
                (denied_literal if literal else denied_prefixes).add(binding.resource_name)
            elif _allows(binding, operation):
                (allowed_literal if literal else allowed_prefixes).add(binding.resource_name)
        if WILDCARD_RESOURCE in denied_literal:
            return False

        def denied(name: str, *, prefix: bool) -> bool:
            if any(name.startswith(p) for p in denied_prefixes):
                return True
            return not prefix and name in denied_literal

        if WILDCARD_RESOURCE in allowed_literal:
            return True
        return (any(not denied(name, prefix=False) for name in allowed_literal)
                or any(not denied(name, prefix=True) for name in allowed_prefixes))
