"""ProducerIdAllocator: blocks of producer ids, each handed out once in the cluster's life.

One item (``PRODUCER_IDS_ITEM``) holds the next free producer id and a ``version``; a block is
reserved by a write conditional on the version read (or on the item not existing yet), and a lost
race reads again (bounded by ``broker_core.retry``).

Thread-safety: as ``broker_core.metadata.tables``: shareable, synchronous, called from worker threads.
"""

from __future__ import annotations

from pynamodb.exceptions import PynamoDBException
from pynamodb.expressions.condition import Condition

from broker_core.dynamodb_tables import condition_failed
from broker_core.metadata.errors import MetadataConflictError
from broker_core.metadata.models import PRODUCER_IDS_ITEM
from broker_core.metadata.state import ProducerIdBlock
from broker_core.metadata.tables import MetadataTables, metadata_failures
from broker_core.retry import LostRace, retry_lost_races

DEFAULT_PRODUCER_ID_BLOCK_SIZE = 1000


class ProducerIdAllocator(MetadataTables):
    """The producer-id allocator item of the metadata table."""

    @metadata_failures
    def allocate_producer_id_block(self, size: int = DEFAULT_PRODUCER_ID_BLOCK_SIZE) -> ProducerIdBlock:
        """Reserve ``size`` producer ids no other caller ever gets: ``range(block.start, block.end)``.

        Read-then-write conditional on the allocator item's ``version``; lost races retry (bounded).
        """
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"producer id block size must be a positive integer, got {size}")
        allocator = self.models.producer_id_block
        what = "allocate producer id block"

        def attempt() -> ProducerIdBlock:
            try:
                current = allocator.get(PRODUCER_IDS_ITEM, consistent_read=True)
                start, version = int(current.next_start), int(current.version)
                condition: Condition = allocator.version == version
            except allocator.DoesNotExist:
                start, version = 0, 0
                condition = allocator.item.does_not_exist()
            item = allocator(PRODUCER_IDS_ITEM, next_start=start + size, version=version + 1)
            try:
                item.save(condition=condition)
            except PynamoDBException as err:
                if not condition_failed(err):
                    raise
                raise LostRace(what) from err
            return ProducerIdBlock(start, start + size)

        return retry_lost_races(attempt, lambda attempts: MetadataConflictError(what, attempts))
