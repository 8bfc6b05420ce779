"""The quota service of a broker: creates the quota table, and keeps the broker's `QuotaManager` current.

The assembly builds one per broker, hands its `manager` to the request handlers, and lets the broker
call `reload` with every metadata refresh (AlterClientQuotas bumps the metadata version after each
change, see `store`), in parallel with the snapshot read, so a quota change holds on every broker
within one metadata poll at the cost of one Scan per metadata change. A reload that fails keeps the
quotas the broker had and is logged; the next metadata change tries again.

Runs on the broker's event loop; DynamoDB calls go to worker threads.
"""

from __future__ import annotations

from broker_core.aws import AwsSettings
from broker_core.metadata.reloaded import ReloadedTable

from .entities import ClientQuotas
from .manager import QuotaManager, QuotaObserver
from .rates import WindowConfig
from .store import QuotaStore, QuotaStoreError


class QuotaService(ReloadedTable[ClientQuotas]):
    """The broker's quota store and manager (see the module doc)."""

    what = "client quotas"

    def __init__(self, settings: AwsSettings, windows: WindowConfig, controller_windows: WindowConfig,
                 observer: QuotaObserver | None = None) -> None:
        super().__init__(QuotaStore(settings), QuotaStoreError)
        self.manager = QuotaManager(windows, controller_windows, observer=observer)

    def apply(self, loaded: ClientQuotas) -> None:
        self.manager.apply(loaded)
