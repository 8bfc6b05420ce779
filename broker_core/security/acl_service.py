"""The ACL service of a broker: creates the ACL table, and keeps the broker's `Authorizer` current.

The assembly builds one per broker around the broker's authorizer and lets the broker call `reload`
with every metadata refresh (CreateAcls and DeleteAcls bump the metadata version after each change,
see `acl_store`), in parallel with the snapshot read, so an ACL change holds on every broker within
one metadata poll at the cost of one Scan per metadata change. A reload that fails keeps the ACLs
the broker had and is logged; the next metadata change tries again.

With no authorizer configured the service does nothing at all: no table, no reads, the checks
answer True. Runs on the broker's event loop; DynamoDB calls go to worker threads.
"""

from __future__ import annotations

from broker_core.aws import AwsSettings
from broker_core.metadata.reloaded import ReloadedTable

from .acl_store import AclStore, AclStoreError
from .acls import AclBinding
from .authorizer import Authorizer


class AclService(ReloadedTable[list[AclBinding]]):
    """The broker's ACL store and the authorizer it feeds (see the module doc)."""

    what = "ACLs"

    def __init__(self, settings: AwsSettings, authorizer: Authorizer) -> None:
        super().__init__(AclStore(settings), AclStoreError)
        self.authorizer = authorizer

    def active(self) -> bool:
        return self.authorizer.enabled

    def apply(self, loaded: list[AclBinding]) -> None:
        self.authorizer.replace_acls(loaded)
