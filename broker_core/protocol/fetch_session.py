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
    the broker holds is sent again. The fetcher says what it wants either whole, by passing every
    position to `build`, or by change, with `want` and `drop` for the partitions whose position or
    membership changed since its last request and `build` without positions: then building an
    incremental request costs the number of partitions that changed, not the number in the session
    (a follower of 1,000 quiet partitions builds an empty request without looking at any of them).
    Call `build` for each request, then exactly one of `handle_response` (with the response's
    top-level error code and session id) or `reset` (the request failed, was abandoned, or its
    answer was lost with the connection: the broker may have taken it and moved to the next epoch,
    so the next request starts over with a full fetch that closes the old session).
    """

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._session: dict[K, P] = {}  # the partitions and positions the broker holds for the session
        self._wanted: dict[K, P] = {}  # the partitions and positions the next request should leave it holding
        # Every partition whose wanted position may differ from the session's: outside it the two agree
        # while a session is open (at the initial epoch the next request is full and sends all of _wanted).
        self._changed: set[K] = set()
        # What the request out sent: its partitions and positions, the partitions it forgot, whether full.
        self._pending: tuple[dict[K, P], list[K], bool] | None = None

    def want(self, key: K, position: P) -> None:
        """The next request should fetch ``key`` from ``position``."""
        self._wanted[key] = position
        self._changed.add(key)

    def drop(self, key: K) -> None:
        """The next request should not fetch ``key`` (the session forgets it if it holds it)."""
        self._wanted.pop(key, None)
        self._changed.add(key)

    def build(self, positions: Mapping[K, P] | None = None) -> SessionRequest[K, P]:
        """The next request: full at the initial epoch, else only what changed. ``positions``, if
        given, replaces every wanted position (compared with the previous ones, so it costs their count)."""
        if positions is not None:
            wanted = dict(positions)
            previous = self._wanted
            self._changed.update(key for key, position in wanted.items() if previous.get(key) != position)
            self._changed.update(key for key in previous if key not in wanted)
            self._wanted = wanted
        if self.epoch == INITIAL_EPOCH:
            to_send = dict(self._wanted)
            self._changed.clear()
            self._pending = (to_send, [], True)
            return SessionRequest(self.session_id, INITIAL_EPOCH, to_send, [])
        session, wanted = self._session, self._wanted
        to_send = {}
        to_forget = []
        for key in self._changed:
            position = wanted.get(key)
            if position is None:
                if key in session:
                    to_forget.append(key)
            elif session.get(key) != position:
                to_send[key] = position
        self._changed.clear()
        self._pending = (to_send, to_forget, False)
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
        if self.session_id == INVALID_SESSION_ID:
            self._session = {}
            return True
        if pending is None:
            # No request was built for this answer: send every wanted partition again.
            self._session = {}
            self._changed.update(self._wanted)
            return True
        sent, forgotten, full = pending
        if full:
            self._session = dict(sent)  # its own copy: the request's to_send is the caller's
        else:
            self._session.update(sent)
            for key in forgotten:
                del self._session[key]
        return True

    def reset(self) -> None:
        """The last request's outcome is unknown: the next one is full and closes the session."""
        self._pending = None
        self.epoch = INITIAL_EPOCH
        self._session = {}
