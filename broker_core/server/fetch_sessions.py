"""The broker's side of KIP-227 incremental fetch sessions: the session cache and each request's context.

A session remembers, per partition, what its fetcher last asked for (fetch offset, log start offset,
leader epoch, max bytes) and what it was last told (high watermark, log start offset), so that an
incremental request names only what changed and its answer only the partitions with something new
(records, a moved high watermark or log start offset, an error, a preferred read replica). A
partition named in an answer moves to the end of the session's order, so that under
``max_bytes`` every partition gets its turn. Protocol constants and the fetching side are in
`broker_core.protocol.fetch_session`.

Kafka reads every partition of a session in every incremental fetch; an idle follower session of a
leader of 333 partitions then costs 333 reads twice a second for nothing. A session here also knows
which of its partitions can have news: a partition whose last answer was quiet (no error, no
records, nothing readable beyond its fetch offset) is *settled* and is not read again until it is
*marked*: its replica marks every session that watches it on each append, high-watermark, log start
or LSO move, truncation and role change (`Partition.add_session`). An incremental fetch reads the marked partitions,
those not settled, and those its request names; every partition when the metadata image, the ACLs
or the shape of the request (principal, version, isolation, replica id, rack) changed since its
last read, and at its first read. Its long poll waits on one wake-up of the session instead of one
future per partition. A follower's settled partitions still count as fetched at every read of its
session (`Partition.park_follower`), so the ISR and the high watermark see what Kafka's would; a
follower that stops fetching stops its session's reads and falls out of the ISR as before.

`FetchSessionCache` holds at most ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's
default 1000) and evicts as Kafka's FetchSessionCache does: a session unused for 120 s
(MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS) goes first; otherwise a new session may take the slot
of the least valuable evictable one, valued by (privileged, partition count, id), where followers'
sessions are privileged and a session younger than 120 s may be evicted only by a privileged one,
and then only if it is not privileged itself. A full fetch that finds no slot is answered as a
sessionless one (session id 0), and its fetcher tries again with its next full fetch.

Thread-safety: the cache belongs to the broker's event loop; only request handlers on it call it, and the
replicas on it mark its sessions.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker_core.protocol.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session used within this long is protected
# from unprivileged newcomers, and one unused for longer is evicted first.
EVICTION_MS = 120_000

TopicKey = uuid.UUID | str  # sessions of Fetch v13+ name topics by id, older ones by name
PartitionKey = tuple[TopicKey, int]


@dataclass(slots=True)
class CachedPartition:
    """One partition in a fetch session (or of a sessionless request): what was asked, and what was told.

    ``topic`` is the topic's name, None for a topic id this broker does not know (answered
    UNKNOWN_TOPIC_ID); ``topic_id`` is the id the fetcher named (None before Fetch v13).
    """

    topic: str | None
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    told_high_watermark: int = -1
    told_log_start_offset: int = -1

    @property
    def key(self) -> PartitionKey:
        return (self.topic_id if self.topic_id is not None else self.topic or "", self.partition)

    def take_request(self, asked: CachedPartition) -> None:
        """A fetcher named this partition again: its new position."""
        self.fetch_offset = asked.fetch_offset
        self.partition_max_bytes = asked.partition_max_bytes
        self.log_start_offset = asked.log_start_offset
        self.current_leader_epoch = asked.current_leader_epoch
        self.last_fetched_epoch = asked.last_fetched_epoch
        if asked.topic is not None:
            self.topic = asked.topic

    def must_respond(self, answer: dict[str, Any], *, update: bool) -> bool:
        """Whether an incremental answer names this partition (Kafka's maybeUpdateResponseData);
        with ``update``, remember what it tells."""
        respond = False
        records = answer.get("records")
        if records is not None and len(records) > 0:
            respond = True
        if self.told_high_watermark != answer["high_watermark"]:
            respond = True
            if update:
                self.told_high_watermark = answer["high_watermark"]
        if self.told_log_start_offset != answer["log_start_offset"]:
            respond = True
            if update:
                self.told_log_start_offset = answer["log_start_offset"]
        if answer.get("preferred_read_replica", -1) >= 0:
            respond = True
        if answer["error_code"] != ErrorCode.none:
            # An error is always sent; once it is gone the partition must be sent again.
            respond = True
            if update:
                self.told_high_watermark = -1
        return respond


class WatchedReplica(Protocol):
    """What a session needs of a replica it watches (`broker_core.server.partition.Partition`)."""

    def add_session(self, session: FetchSession, key: PartitionKey) -> None: ...

    def remove_session(self, session: FetchSession) -> None: ...


class FetchSession:
    """One fetcher's session: its partitions in the order they are read, the epoch it expects next,
    and which partitions its next read must visit (see the module doc).

    ``unsettled``: partitions read each time until an answer that told them leaves them quiet;
    ``marked``: partitions whose replica changed since the session's last read began;
    ``read_stamp``: what the last read's answers depended on besides the partitions themselves.
    """

    __slots__ = ("session_id", "privileged", "uses_topic_ids", "partitions", "creation_ms", "last_used_ms",
                 "epoch", "unsettled", "marked", "read_stamp", "last_read_ms", "_wakeup", "_watching", "_closed")

    def __init__(self, session_id: int, *, privileged: bool, uses_topic_ids: bool,
                 partitions: dict[PartitionKey, CachedPartition], now_ms: float) -> None:
        self.session_id = session_id
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.partitions = partitions
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.unsettled: set[PartitionKey] = set()
        self.marked: set[PartitionKey] = set()
        self.read_stamp: tuple | None = None  # None: the next read visits every partition
        self.last_read_ms = now_ms
        self._wakeup: asyncio.Future | None = None
        self._watching: dict[PartitionKey, WatchedReplica] = {}
        self._closed = False

    def update(self, asked: Iterable[CachedPartition], forgotten: Iterable[PartitionKey]) -> None:
        """An incremental request: partitions named join or move (and are read), forgotten ones leave."""
        for partition in asked:
            cached = self.partitions.get(partition.key)
            if cached is None:
                self.partitions[partition.key] = partition
            else:
                cached.take_request(partition)
            self.unsettled.add(partition.key)
        for key in forgotten:
            self.partitions.pop(key, None)
            self.unsettled.discard(key)
            self.marked.discard(key)
            replica = self._watching.pop(key, None)
            if replica is not None:
                replica.remove_session(self)

    def begin_read(self, stamp: tuple, now_ms: float) -> list[CachedPartition]:
        """The partitions the next read of this session visits, in the session's order (see the module
        doc); they stay unsettled until `settle` after an answer was sent."""
        self.last_read_ms = now_ms
        marked, self.marked = self.marked, set()
        if stamp != self.read_stamp:
            self.read_stamp = stamp
            self.unsettled = set(self.partitions)
            return list(self.partitions.values())
        self.unsettled |= marked
        if not self.unsettled:
            return []
        unsettled = self.unsettled
        return [p for key, p in self.partitions.items() if key in unsettled]

    def watch(self, key: PartitionKey, replica: WatchedReplica) -> None:
        """Be marked when ``replica`` (read for ``key``) changes."""
        current = self._watching.get(key)
        if current is replica or self._closed:
            return
        if current is not None:
            current.remove_session(self)
        self._watching[key] = replica
        replica.add_session(self, key)

    def settle(self, key: PartitionKey) -> bool:
        """``key``'s last answer was sent and left it quiet: not read again until marked. False (and
        it stays unsettled) when it was marked since that read began."""
        if key in self.marked or key not in self.partitions:
            return False
        self.unsettled.discard(key)
        return True

    def mark(self, key: PartitionKey) -> None:
        """The replica read for ``key`` changed: the next read visits it, and a waiting long poll wakes."""
        self.marked.add(key)
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    def wakeup(self) -> asyncio.Future:
        """A future done at the next `mark` (at once if one came since the last read began)."""
        wakeup = self._wakeup
        if wakeup is None or wakeup.done():
            wakeup = self._wakeup = asyncio.get_running_loop().create_future()
        if self.marked:
            wakeup.set_result(None)
        return wakeup

    def close(self) -> None:
        """The session left the cache: its replicas stop marking it."""
        self._closed = True
        for replica in self._watching.values():
            replica.remove_session(self)
        self._watching.clear()
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    def eviction_key(self) -> tuple[bool, int, int]:
        return (self.privileged, len(self.partitions), self.session_id)


class FetchSessionCache:
    """At most ``max_entries`` sessions by id, evicted as Kafka evicts them (see the module doc)."""

    def __init__(self, max_entries: int, *, eviction_ms: float = EVICTION_MS, rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}  # least recently used first
        self.evictions = 0
        self._rng = rng or random.Random()

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def cached_partitions(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.close()
        return session

    def touch(self, session: FetchSession, now_ms: float) -> None:
        """``session`` was used now: it becomes the most recently used."""
        session.last_used_ms = now_ms
        if self.sessions.get(session.session_id) is session:
            del self.sessions[session.session_id]
            self.sessions[session.session_id] = session

    def maybe_create(self, now_ms: float, *, privileged: bool, uses_topic_ids: bool,
                     partitions: dict[PartitionKey, CachedPartition]) -> int:
        """A new session holding ``partitions`` and its id, or INVALID_SESSION_ID when no slot is free
        and none may be taken from another session."""
        if self.max_entries <= 0:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session_id = self._new_id()
        self.sessions[session_id] = FetchSession(session_id, privileged=privileged, uses_topic_ids=uses_topic_ids,
                                                 partitions=partitions, now_ms=now_ms)
        return session_id

    def _try_evict(self, privileged: bool, size: int, now_ms: float) -> bool:
        oldest = next(iter(self.sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest)
            return True
        candidates = [s for s in self.sessions.values()
                      if now_ms - s.creation_ms > self.eviction_ms or (privileged and not s.privileged)]
        if not candidates:
            return False
        least = min(candidates, key=FetchSession.eviction_key)
        # As Kafka: only a more valuable newcomer takes the slot (its id counts as 0, so a tie loses).
        if (privileged, size, 0) < least.eviction_key():
            return False
        self._evict(least)
        return True

    def _evict(self, session: FetchSession) -> None:
        del self.sessions[session.session_id]
        session.close()
        self.evictions += 1

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, 2**31 - 1)
            if session_id not in self.sessions:
                return session_id


@dataclass(slots=True)
class FetchContext:
    """How one Fetch request relates to a session (Kafka's FetchContext): the partitions to read, in
    order, and how the answer is formed.

    ``error`` set: the request is answered with that top-level error alone. ``session`` set: an
    incremental fetch in that session. Otherwise a full fetch, which opens a session when
    ``create`` is set.
    """

    partitions: list[CachedPartition]
    error: ErrorCode = ErrorCode.none
    session: FetchSession | None = None
    create: bool = False
    privileged: bool = False
    uses_topic_ids: bool = False

    def response_session_id(self) -> int:
        return self.session.session_id if self.session is not None else INVALID_SESSION_ID

    def begin_read(self, stamp: tuple, now_ms: float) -> list[CachedPartition]:
        """The partitions to read now: an incremental fetch's session chooses (`FetchSession.begin_read`,
        ``stamp`` naming what answers depend on besides the partitions); a full fetch reads them all."""
        if self.session is not None:
            return self.session.begin_read(stamp, now_ms)
        return self.partitions

    def select(self, cache: FetchSessionCache, answers: list[tuple[CachedPartition, dict[str, Any]]],
               now_ms: float) -> tuple[int, list[tuple[CachedPartition, dict[str, Any]]]]:
        """(session id, the answers to send) once the partitions were read: an incremental fetch sends
        the partitions with news (and moves them to the end of the session's order); a full fetch
        sends everything and, with ``create``, opens a session remembering what it told."""
        if self.session is not None:
            session = self.session
            chosen = []
            for partition, answer in answers:
                if partition.must_respond(answer, update=True):
                    chosen.append((partition, answer))
                    cached = session.partitions.pop(partition.key, None)
                    if cached is not None:
                        session.partitions[partition.key] = cached
            return session.session_id, chosen
        if not self.create:
            return INVALID_SESSION_ID, answers
        held: dict[PartitionKey, CachedPartition] = {}
        for partition, answer in answers:
            partition.must_respond(answer, update=True)
            held[partition.key] = partition
        session_id = cache.maybe_create(now_ms, privileged=self.privileged, uses_topic_ids=self.uses_topic_ids,
                                        partitions=held)
        return session_id, answers


def new_context(cache: FetchSessionCache, *, session_id: int, epoch: int, asked: list[CachedPartition],
                forgotten: list[PartitionKey], uses_topic_ids: bool, privileged: bool,
                now_ms: float) -> FetchContext:
    """The context of a Fetch request with these session fields (Kafka's FetchManager.newContext).

    A full request (epoch 0 or -1) closes the session it names; epoch 0 asks for a new one. An
    incremental request must name a cached session (else FETCH_SESSION_ID_NOT_FOUND) at the epoch
    it expects (else INVALID_FETCH_SESSION_EPOCH) and address topics the way it was opened with
    (ids from Fetch v13, else FETCH_SESSION_TOPIC_ID_ERROR); it moves the session to its next epoch.
    """
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        # A partition named twice is read once, with its last position (Kafka's LinkedHashMap).
        unique = list({p.key: p for p in asked}.values())
        return FetchContext(unique, create=epoch == INITIAL_EPOCH, privileged=privileged,
                            uses_topic_ids=uses_topic_ids)
    session = cache.get(session_id)
    if session is None:
        return FetchContext([], error=ErrorCode.fetch_session_id_not_found)
    if session.epoch != epoch:
        return FetchContext([], error=ErrorCode.invalid_fetch_session_epoch)
    if session.uses_topic_ids != uses_topic_ids:
        return FetchContext([], error=ErrorCode.fetch_session_topic_id_error)
    session.update(asked, forgotten)
    session.epoch = next_epoch(session.epoch)
    cache.touch(session, now_ms)
    return FetchContext(list(session.partitions.values()), session=session, privileged=privileged,
                        uses_topic_ids=uses_topic_ids)
