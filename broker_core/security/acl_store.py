"""AclStore: the cluster's ACLs in DynamoDB, one item per binding, in ``<prefix>acls``.

Layout: hash key ``acl``, the SHA-256 (hex) of the binding's seven fields in `AclBinding`'s order,
each percent-encoded (so none holds ``/``) and joined by ``/``: a fixed 64 characters however long
the names (a group id or an ARN may exceed DynamoDB's 2048-byte key limit); the fields themselves
as attributes (``resource_type``, ``resource_name``, ``pattern_type``, ``principal``, ``host``,
``operation``, ``permission``; the enums as Kafka's codes) for readers and operators. A binding
determines its key, so creating one twice stores it once (CreateAcls is idempotent, as Kafka's is)
and there is no read-modify-write to race.

Readers are brokers (`broker_core.security.acl_service` keeps their `Authorizer` current) and the
HTTP front end. Brokers do not poll this table: after a change the writer bumps the cluster's
metadata version (``MetadataStore.bump_metadata_version``), and every broker re-reads the ACLs (one
consistent Scan) when it applies the new metadata, so a change holds everywhere within one metadata
poll. A Lambda reads the table when it needs the ACLs (`load`).

Thread-safety: no mutable state; pynamodb is synchronous, so brokers call it from worker threads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from urllib.parse import quote

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import PynamoDBException
from pynamodb.models import Model

from broker_core.aws import AwsSettings
from broker_core.dynamodb_tables import (
    bind_model,
    condition_failed,
    ensure_tables,
    failures_as,
    share_connection,
)

from .acls import AclBinding, AclBindingFilter, AclOperation, AclPermission, PatternType, ResourceType

ACLS_TABLE = "acls"


class AclStoreError(Exception):
    """Base of the ACL store's errors."""


class AclStoreUnavailableError(AclStoreError):
    """DynamoDB could not be reached."""


_unavailable_on_error = failures_as(AclStoreUnavailableError, AclStoreError)


class AclItem(Model):
    acl = UnicodeAttribute(hash_key=True)
    resource_type = NumberAttribute()
    resource_name = UnicodeAttribute()
    pattern_type = NumberAttribute()
    principal = UnicodeAttribute()
    host = UnicodeAttribute()
    operation = NumberAttribute()
    permission = NumberAttribute()


def binding_key(binding: AclBinding) -> str:
    fields = (int(binding.resource_type), binding.resource_name, int(binding.pattern_type), binding.principal,
              binding.host, int(binding.operation), int(binding.permission))
    return hashlib.sha256("/".join(quote(str(value), safe="") for value in fields).encode()).hexdigest()


def _binding(item: AclItem) -> AclBinding:
    return AclBinding(ResourceType(int(item.resource_type)), item.resource_name, PatternType(int(item.pattern_type)),
                      item.principal, item.host, AclOperation(int(item.operation)),
                      AclPermission(int(item.permission)))


class AclStore:
    """The ACLs in one DynamoDB table (see the module doc)."""

    def __init__(self, settings: AwsSettings) -> None:
        self.model: type[AclItem] = bind_model(AclItem, settings, ACLS_TABLE)
        # one observed client: its calls count in the DynamoDB call metrics (broker_core.metrics.aws_calls)
        share_connection([self.model], settings)

    @_unavailable_on_error
    def ensure_table(self) -> None:
        """Create the table if missing and wait until it is ACTIVE; safe from several brokers at once."""
        ensure_tables([self.model], AclStoreUnavailableError)

    @_unavailable_on_error
    def load(self) -> list[AclBinding]:
        """Every stored ACL (a consistent Scan)."""
        return [_binding(item) for item in self.model.scan(consistent_read=True)]

    @_unavailable_on_error
    def create(self, binding: AclBinding) -> None:
        """Store one binding (callers validated it); storing it again changes nothing."""
        self.model(binding_key(binding), resource_type=int(binding.resource_type),
                   resource_name=binding.resource_name, pattern_type=int(binding.pattern_type),
                   principal=binding.principal, host=binding.host, operation=int(binding.operation),
                   permission=int(binding.permission)).save()

    @_unavailable_on_error
    def delete_matching(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Delete every stored binding any filter matches; for each filter, the bindings it matched that
        this call deleted (a binding two concurrent calls match is reported by the one that deleted it)."""
        filters = list(filters)
        stored = self.load()
        matched = [[b for b in stored if f.matches(b)] for f in filters]
        deleted: set[AclBinding] = set()
        for binding in dict.fromkeys(b for bindings in matched for b in bindings):
            try:
                self.model(binding_key(binding)).delete(condition=self.model.acl.exists())
                deleted.add(binding)
            except PynamoDBException as err:
                if not condition_failed(err):
                    raise
        return [[b for b in bindings if b in deleted] for bindings in matched]
