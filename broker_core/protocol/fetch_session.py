"""KIP-227 incremental fetch sessions: the protocol's constants and the fetching side's bookkeeping.

A Fetch request carries (session id, session epoch). Epoch 0 (INITIAL_EPOCH) asks for a full fetch
that opens a new session (closing the one named, if any); -1 (FINAL_EPOCH) is a full fetch without a
session (again closing the one named); an epoch above 0 is an incremental fetch in an existing
session and must be the epoch the broker expects next (it grows by one per request, wrapping from
2**31-1 to 1). An incremental request names only the partitions that joined the session or whose
fetch position changed, and lists in ``forgotten_topics_data`` those that left it; the broker's
answer names only the partitions with something new (records, a moved high watermark or log start
offset, an error), so a follower of 1,000 quiet partitions sends and receives a few bytes per round.

`FetchSessionHandler` is what a fetcher keeps per broker it fetches from, as Kafka's client-side
FetchSessionHandler does: it builds the next request from the positions the fetcher wants to fetch
and learns from each response (or failure) whether the session goes on. Sans-I/O; one fetcher task
owns each handler.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from kio.schema.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: +1, wrapping to 1 (never back to the initial or final epoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


K = TypeVar("K", bound=Hashable)
P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class SessionRequest(Generic[K, P]):
    """What the next Fetch request carries: the session fields, the partitions to name, the partitions
    to forget. ``full`` requests name every partition."""

    session_id: int
    epoch: int
    to_send: dict[K, P]
    to_forget: list[K]

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler(Generic[K, P]):
    """The fetching side of one broker's session (Kafka's FetchSessionHandler).

    ``K`` identifies a partition (topic, index); ``P`` is its fetch position (offset, log start,
    leader epoch, max bytes), compared with ``==``: a partition whose position differs from the one
    the broker holds is sent again. Call `build` for each request, then exactly one of
    `handle_response` (with the response's top-level error code and session id) or `reset` (the
    request failed, was abandoned, or its answer was lost with the connection: the broker may have
    taken it and moved to the next epoch, so the next request starts over with a full fetch that
    closes the old session).
    """

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._session: dict[K, P] = {}  # the partitions and positions the broker holds for the session
        self._pending: dict[K, P] | None = None

    def build(self, positions: Mapping[K, P]) -> SessionRequest[K, P]:
        wanted = dict(positions)
        self._pending = wanted
        if self.epoch == INITIAL_EPOCH:
            return SessionRequest(self.session_id, INITIAL_EPOCH, wanted, [])
        to_send = {key: position for key, position in wanted.items() if self._session.get(key) != position}
        to_forget = [key for key in self._session if key not in wanted]
        return SessionRequest(self.session_id, self.epoch, to_send, to_forget)

    def handle_response(self, error_code: int, session_id: int) -> bool:
        """Take a response's session fields; False if the session failed (the next fetch is full)."""
        pending, self._pending = self._pending, None
        if error_code != ErrorCode.none:
            # Kafka's client: an unknown session starts afresh; any other error closes the session
            # it names with the next full fetch.
            if error_code == ErrorCode.fetch_session_id_not_found:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            self._session = {}
            return False
        if self.epoch == INITIAL_EPOCH:
            # A full answer: the broker opened a session (id != 0) or had no room for one.
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH if session_id == INVALID_SESSION_ID else 1
        elif session_id != self.session_id:
            # Not the session we asked in: start again with a full fetch.
            self.session_id, self.epoch, self._session = INVALID_SESSION_ID, INITIAL_EPOCH, {}
            return False
        else:
            self.epoch = next_epoch(self.epoch)
        self._session = pending if pending is not None and self.session_id != INVALID_SESSION_ID else {}
        return True

    def reset(self) -> None:
        """The last request's outcome is unknown: the next one is full and closes the session."""
        self._pending = None
        self.epoch = INITIAL_EPOCH
        self._session = {}
