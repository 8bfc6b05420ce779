"""A broker's copy of one small DynamoDB table that it re-reads whenever the cluster's metadata changes.

Client quotas and ACLs are kept this way: the API that changes them bumps the metadata version, and
every broker calls `reload` with each metadata refresh, so a change holds everywhere within one
metadata poll at the cost of one Scan per metadata change. A reload that fails keeps what the broker
had and is logged; the next metadata change tries again. Runs on the broker's event loop; DynamoDB
calls go to worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class LoadableStore(Protocol[T_co]):
    def ensure_table(self) -> None: ...

    def load(self) -> T_co: ...


class ReloadedTable(Generic[T]):
    """Holds what ``store`` loads: `start` creates the table and reads it, `reload` reads it again
    and hands it to `apply`; errors of type ``failure`` keep the previous contents."""

    what = "table contents"

    def __init__(self, store: LoadableStore[T], failure: type[Exception]) -> None:
        self.store = store
        self._failure = failure
        self._started = False

    def active(self) -> bool:
        """Whether this broker needs the table at all (if not, `start` and `reload` do nothing)."""
        return True

    def apply(self, loaded: T) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        if not self.active():
            return
        await asyncio.to_thread(self.store.ensure_table)
        self._started = True
        await self.reload()

    async def stop(self) -> None:
        self._started = False

    async def reload(self) -> None:
        """Read the stored contents and apply them; before `start` (or when not active) nothing."""
        if not self._started:
            return
        try:
            loaded = await asyncio.to_thread(self.store.load)
        except self._failure as exc:
            log.warning("%s were not reloaded (the previous ones stay in force): %s", self.what, exc)
            return
        self.apply(loaded)
