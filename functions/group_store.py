"""The HTTP consumer groups' read-change-write cycle, on top of the one group store.

Storage (tables, items, conditional writes) is ``broker_core.groups.store.HttpGroupStore``; this
module joins it to the membership rules of `functions.group_state`: a group is read fresh, changed
by one request and written back conditionally on the version read, again on a lost race (bounded,
``broker_core.retry``), so any front-end container can serve any request. An offset commit whose
condition fails (the member's epoch moved, or members appeared) raises CommitFencedError, a
GroupStateError, so a fenced member's commit never lands whatever happened between its last read
and its write. DynamoDB failures surface as GroupStoreUnavailableError.

Thread-safety: plain functions over a shareable store; the front ends call them from the
invocation's thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from broker_core.groups.errors import GroupStoreUnavailableError
from broker_core.groups.store import HttpCommittedOffset, HttpGroupStore
from broker_core.retry import LostRace, retry_lost_races
from functions.group_state import Group, GroupStateError

_T = TypeVar("_T")


class CommitFencedError(GroupStateError):
    """The group changed under the commit: the member's epoch moved, or members appeared."""


def load(store: HttpGroupStore, group_id: str) -> Group | None:
    """The group as stored now, None if it is not stored."""
    stored = store.load(group_id)
    return Group.from_json(group_id, stored.state) if stored is not None else None


def update(store: HttpGroupStore, group_id: str, change: Callable[[Group], _T], *, create: bool = True) -> _T:
    """Apply ``change`` to the group read fresh and write it back conditionally, again on a lost race.

    ``change`` may raise GroupStateError to refuse (nothing is written). With ``create=False`` a
    group that is not stored raises LookupError. GroupStoreUnavailableError when every attempt lost.
    """

    def attempt() -> _T:
        stored = store.load(group_id)
        if stored is None and not create:
            raise LookupError(group_id)
        group = Group.from_json(group_id, stored.state) if stored is not None else Group(group_id)
        result = change(group)
        epochs = {m.member_id: m.member_epoch for m in group.members.values()}
        if not store.save(group_id, group.to_json(), epochs, stored.version if stored is not None else 0):
            raise LostRace(group_id)
        return result

    return retry_lost_races(attempt, lambda attempts: GroupStoreUnavailableError(
        f"group {group_id!r} changed under every one of {attempts} attempts"))


def commit(store: HttpGroupStore, group_id: str, member_id: str | None, member_epoch: int | None,
           offsets: Iterable[HttpCommittedOffset], now_ms: int) -> None:
    """Write offsets, each transaction conditional on the member's epoch (or on no members)."""
    if not store.commit(group_id, member_id, member_epoch, offsets, now_ms):
        raise CommitFencedError(f"group {group_id!r} changed under the commit (member {member_id!r}, "
                                f"epoch {member_epoch}): heartbeat and commit again")
