"""Producer ids for idempotent producers, handed out from blocks that DynamoDB reserves per broker.

A broker reserves a block of ids with one conditional write (`MetadataStore.allocate_producer_id_block`)
and hands them out one by one, so no two brokers ever give out the same id and InitProducerId costs a
DynamoDB write only once per block. Callers are tasks on the broker's event loop; the reservation runs
in a worker thread.
"""

from __future__ import annotations

import asyncio

from broker_core.metadata.state import ProducerIdBlock
from broker_core.metadata.store import MetadataStore
from broker_core.security.producer_ids import principal_producer_id


class ProducerIdAllocator:
    """Hands out the ids of this broker's current block, reserving the next block when it runs out."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._block: ProducerIdBlock | None = None
        self._lock = asyncio.Lock()

    async def next_id(self, principal: str | None = None) -> int:
        """A producer id no other broker hands out (raises MetadataError if DynamoDB cannot reserve one);
        with ``principal`` (an authorizer is on), one bound to that principal
        (`broker_core.security.producer_ids`)."""
        async with self._lock:
            if self._block is None or self._block.start >= self._block.end:
                self._block = await asyncio.to_thread(self._store.allocate_producer_id_block)
            serial = self._block.start
            self._block = self._block._replace(start=serial + 1)
        return serial if principal is None else principal_producer_id(serial, principal)
