"""Exceptions of the transaction coordinator, one per failure mode."""

from __future__ import annotations


class TransactionError(Exception):
    """Base class of the transaction coordinator's errors."""


class TransactionStoreUnavailableError(TransactionError):
    """DynamoDB could not be reached or refused a request for a reason other than a condition."""


class TransactionCoordinatorFencedError(TransactionError):
    """A write carried a coordinator epoch or version the item no longer has: another broker took
    the transactional id, or wrote it since this broker read it."""

    def __init__(self, transactional_id: str, coordinator_epoch: int, what: str) -> None:
        super().__init__(f"transactional id {transactional_id!r}: coordinator epoch {coordinator_epoch} "
                         f"was fenced ({what})")
        self.transactional_id = transactional_id
        self.coordinator_epoch = coordinator_epoch
