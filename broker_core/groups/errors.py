"""Exceptions of the consumer-group layer, one per failure mode, with the fields that identify it."""

from __future__ import annotations


class GroupError(Exception):
    """Base class of every consumer-group error."""


class GroupStoreUnavailableError(GroupError):
    """DynamoDB could not be reached or refused a request for a reason other than a condition."""


class CoordinatorFencedError(GroupError):
    """A write carried a coordinator epoch the group's lease no longer has: another broker took it.

    Also raised when the generation the write expected is no longer the stored one, which only
    happens if another coordinator wrote the group in between.
    """

    def __init__(self, group_id: str, coordinator_epoch: int, what: str) -> None:
        super().__init__(f"group {group_id!r}: coordinator epoch {coordinator_epoch} was fenced ({what})")
        self.group_id = group_id
        self.coordinator_epoch = coordinator_epoch
        self.what = what


class GroupAdminError(GroupError):
    """A group admin command (``floe groups``) could not get its answer; the message says why."""
