"""What the Fetch, ListOffsets and DeleteRecords handlers need of tiered storage, as a protocol.

The broker's request path reads history that lives only in S3 through this interface; the tiering
service (`tiered_storage.service`) provides the implementation and the broker's assembly hands it
to the handlers, so nothing under `broker_core` imports `tiered_storage`. All methods run on the
broker's event loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from broker_core.log.transaction_index import AbortedTxn

    from .partition import Partition


class RemoteStorageError(Exception):
    """Remote data could not be read (S3 or DynamoDB failed for good, or an object is corrupt)."""


class RemoteReads(Protocol):
    """Reads of a tiered partition below its local log start (KIP-405's RemoteLogManager reads)."""

    def is_tiered(self, topic: str) -> bool:
        """Whether ``topic`` has remote storage enabled; reads of other topics never go remote."""
        ...

    async def log_start_offset(self, partition: Partition) -> int:
        """The partition's log start counting the remote tier and the log start DeleteRecords set."""
        ...

    async def advance_log_start(self, partition: Partition, offset: int) -> int:
        """DeleteRecords: raise the log start every reader of the remote tier honours to ``offset``
        (never lower it); return that log start. RemoteStorageError if it could not be recorded."""
        ...

    async def read(self, partition: Partition, offset: int, max_bytes: int, *, min_one_batch: bool) -> bytes:
        """Whole batches from the remote batch holding ``offset`` (OffsetOutOfRangeError if none)."""
        ...

    async def aborted_transactions(
        self, partition: Partition, fetch_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions a read_committed read of [fetch_offset, upper_bound_offset) that
        starts in the remote tier must be told of."""
        ...

    async def list_offset(self, partition: Partition, timestamp: int) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) from the remote tier, None to keep the local answer."""
        ...
