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

import asyncio
import logging

from broker_core.aws import AwsSettings

from .acl_store import AclStore, AclStoreError
from .authorizer import Authorizer

log = logging.getLogger(__name__)


class AclService:
    """The broker's ACL store and the authorizer it feeds (see the module doc)."""

    def __init__(self, settings: AwsSettings, authorizer: Authorizer) -> None:
        self.store = AclStore(settings)
        self.authorizer = authorizer
        self._started = False

    async def start(self) -> None:
        if not self.authorizer.enabled:
            return
        await asyncio.to_thread(self.store.ensure_table)
        self._started = True
        await self.reload()

    async def stop(self) -> None:
        self._started = False

    async def reload(self) -> None:
        """Read the stored ACLs and decide by them; before `start` (or with no authorizer) nothing."""
        if not self._started:
            return
        try:
            bindings = await asyncio.to_thread(self.store.load)
        except AclStoreError as exc:
            log.warning("ACLs were not reloaded (the previous ones stay in force): %s", exc)
            return
        self.authorizer.replace_acls(bindings)
