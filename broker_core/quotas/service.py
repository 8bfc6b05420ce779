"""The quota service of a broker: creates the quota table, and keeps the broker's `QuotaManager` current.

The assembly builds one per broker, hands its `manager` to the request handlers, and lets the broker
call `reload` with every metadata refresh (AlterClientQuotas bumps the metadata version after each
change, see `store`), in parallel with the snapshot read, so a quota change holds on every broker
within one metadata poll at the cost of one Scan per metadata change. A reload that fails keeps the
quotas the broker had and is logged; the next metadata change tries again.

Runs on the broker's event loop; DynamoDB calls go to worker threads.
"""

from __future__ import annotations

import asyncio
import logging

from broker_core.aws import AwsSettings

from .manager import QuotaManager
from .rates import WindowConfig
from .store import QuotaStore, QuotaStoreError

log = logging.getLogger(__name__)


class QuotaService:
    """The broker's quota store and manager (see the module doc)."""

    def __init__(self, settings: AwsSettings, windows: WindowConfig, controller_windows: WindowConfig) -> None:
        self.store = QuotaStore(settings)
        self.manager = QuotaManager(windows, controller_windows)
        self._started = False

    async def start(self) -> None:
        await asyncio.to_thread(self.store.ensure_table)
        self._started = True
        await self.reload()

    async def stop(self) -> None:
        self._started = False

    async def reload(self) -> None:
        """Read the stored quotas and hold clients to them; before `start` (no table yet) nothing."""
        if not self._started:
            return
        try:
            quotas = await asyncio.to_thread(self.store.load)
        except QuotaStoreError as exc:
            log.warning("client quotas were not reloaded (the previous ones stay in force): %s", exc)
            return
        self.manager.apply(quotas)
