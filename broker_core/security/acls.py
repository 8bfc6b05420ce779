"""Kafka's ACL model: resources, patterns, operations, permissions, bindings and binding filters.

An `AclBinding` says "principal P from host H is allowed (or denied) operation O on resources of
type T whose names match pattern N". The enums carry Kafka's wire codes (``ResourceType``,
``PatternType``, ``AclOperation``, ``AclPermissionType`` of Kafka's ``org.apache.kafka.common``), so
CreateAcls/DescribeAcls/DeleteAcls values pass through unchanged. The ``ANY`` (and ``MATCH``) members
exist only for filters (`AclBindingFilter`): a binding holding one is invalid (`validate_binding`).

Pure data and checks, no I/O; immutable, so any thread may share them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .principal import KafkaPrincipal, PrincipalError

CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource's name, as Kafka names it
WILDCARD_RESOURCE = "*"  # a LITERAL pattern with this name matches every resource of its type
WILDCARD_PRINCIPAL = "User:*"  # matches every principal
WILDCARD_HOST = "*"  # matches every host


class ResourceType(enum.IntEnum):
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(enum.IntEnum):
    ANY = 1  # filters only: any pattern type, names compared exactly
    MATCH = 2  # filters only: every pattern that matches the filter's name (literal, wildcard, prefix)
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermission(enum.IntEnum):
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


class AclError(ValueError):
    """A binding or filter Kafka would refuse (INVALID_REQUEST); the message says why."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission


def _enum(kind: type[enum.IntEnum], code: int, what: str) -> enum.IntEnum:
    try:
        return kind(code)
    except ValueError:
        raise AclError(f"unknown {what} {code}") from None


def binding_from_codes(resource_type: int, resource_name: str, pattern_type: int, principal: str,
                       host: str, operation: int, permission: int) -> AclBinding:
    """A binding from wire values, checked as Kafka checks a CreateAcls creation (AclError if refused)."""
    binding = AclBinding(
        _enum(ResourceType, resource_type, "resource type"), resource_name,
        _enum(PatternType, pattern_type, "pattern type"), principal, host,
        _enum(AclOperation, operation, "operation"), _enum(AclPermission, permission, "permission"),
    )
    validate_binding(binding)
    return binding


def validate_binding(binding: AclBinding) -> None:
    """Refuse (AclError) what Kafka refuses in a binding to be stored."""
    if binding.resource_type is ResourceType.ANY:
        raise AclError("an ACL names a resource type, not ANY")
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError("an ACL's pattern type is LITERAL or PREFIXED")
    if binding.operation is AclOperation.ANY:
        raise AclError("an ACL names an operation, not ANY")
    if binding.permission is AclPermission.ANY:
        raise AclError("an ACL's permission is ALLOW or DENY")
    if not binding.resource_name:
        raise AclError("an ACL names a resource")
    if binding.pattern_type is PatternType.PREFIXED and binding.resource_name == WILDCARD_RESOURCE:
        raise AclError("a PREFIXED pattern may not be '*'; use a LITERAL '*' for every resource")
    if binding.resource_type is ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")
    if binding.resource_type is ResourceType.CLUSTER and binding.pattern_type is not PatternType.LITERAL:
        raise AclError("the cluster resource takes a LITERAL pattern")
    try:
        KafkaPrincipal.parse(binding.principal)
    except PrincipalError as exc:
        raise AclError(str(exc)) from None
    if not binding.host:
        raise AclError("an ACL names a host or '*'")


# Which operations mean something on each resource type (Kafka's AclEntry table): the CLI refuses the
# others, as kafka-acls does; the broker stores them, as Kafka's does, though no check asks for them.
VALID_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.ALL, AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE,
                                   AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.ALL, AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset({AclOperation.ALL, AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                                     AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                                     AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.ALL, AclOperation.DESCRIBE, AclOperation.WRITE}),
}


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls' and DeleteAcls' filter: None (a null on the wire) and the ANY codes match anything.

    ``pattern_type`` MATCH selects every binding that would apply to the resource ``resource_name``
    names: the literal one, the literal wildcard ``*`` and every prefix of the name.
    """

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermission

    @classmethod
    def from_codes(cls, resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
                   host: str | None, operation: int, permission: int) -> AclBindingFilter:
        """A filter from wire values; AclError where Kafka answers INVALID_REQUEST."""
        built = cls(_enum(ResourceType, resource_type, "resource type"), resource_name,
                    _enum(PatternType, pattern_type, "pattern type"), principal, host,
                    _enum(AclOperation, operation, "operation"), _enum(AclPermission, permission, "permission"))
        if built.principal is not None:
            try:
                KafkaPrincipal.parse(built.principal)
            except PrincipalError as exc:
                raise AclError(str(exc)) from None
        return built

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and binding.resource_type is not self.resource_type:
            return False
        if not self._matches_pattern(binding):
            return False
        if self.principal is not None and binding.principal != self.principal:
            return False
        if self.host is not None and binding.host != self.host:
            return False
        if self.operation is not AclOperation.ANY and binding.operation is not self.operation:
            return False
        return self.permission is AclPermission.ANY or binding.permission is self.permission

    def _matches_pattern(self, binding: AclBinding) -> bool:
        name = self.resource_name
        if self.pattern_type is PatternType.MATCH:
            if name is None:
                return True
            if binding.pattern_type is PatternType.LITERAL:
                return binding.resource_name in (name, WILDCARD_RESOURCE)
            return name.startswith(binding.resource_name)
        if self.pattern_type is not PatternType.ANY and binding.pattern_type is not self.pattern_type:
            return False
        return name is None or binding.resource_name == name


def operation_name(operation: AclOperation) -> str:
    """Kafka's display name: ``DESCRIBE_CONFIGS`` -> ``DescribeConfigs``."""
    return "".join(part.capitalize() for part in operation.name.split("_"))


def parse_operation(text: str) -> AclOperation:
    """``Read``, ``read``, ``DescribeConfigs`` or ``DESCRIBE_CONFIGS`` -> the operation (AclError if unknown)."""
    wanted = text.replace("_", "").replace("-", "").lower()
    for operation in AclOperation:
        if operation is not AclOperation.ANY and operation.name.replace("_", "").lower() == wanted:
            return operation
    raise AclError(f"unknown operation {text!r}")
