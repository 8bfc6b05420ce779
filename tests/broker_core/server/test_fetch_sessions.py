"""The broker's fetch session cache and contexts: KIP-227 as Kafka's FetchSession.scala implements it."""

from __future__ import annotations

import random
import uuid

from kio.schema.errors import ErrorCode

from broker_core.protocol.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from broker_core.server.fetch_sessions import EVICTION_MS, CachedPartition, FetchSessionCache, new_context


def asked(topic: str, partition: int, offset: int = 0, topic_id: uuid.UUID | None = None) -> CachedPartition:
    return CachedPartition(topic, topic_id, partition, offset, 1 << 20)


def answer(partition: int, *, high_watermark: int = 0, log_start: int = 0, records: bytes = b"",
           error: ErrorCode = ErrorCode.none) -> dict:
    return {"partition_index": partition, "error_code": error, "high_watermark": high_watermark,
            "last_stable_offset": high_watermark, "log_start_offset": log_start, "preferred_read_replica": -1,
            "records": records, "aborted_transactions": None}


def open_session(cache: FetchSessionCache, partitions: list[CachedPartition], *, privileged: bool = False,
                 now_ms: float = 0.0) -> int:
    context = new_context(cache, session_id=INVALID_SESSION_ID, epoch=INITIAL_EPOCH, asked=partitions, forgotten=[],
                          uses_topic_ids=False, privileged=privileged, now_ms=now_ms)
    session_id, sent = context.select(cache, [(p, answer(p.partition)) for p in context.partitions], now_ms)
    assert len(sent) == len(partitions)  # a full fetch answers every partition
    return session_id


def incremental(cache: FetchSessionCache, session_id: int, epoch: int, partitions: list[CachedPartition] = (),
                forgotten: list[tuple[str, int]] = (), uses_topic_ids: bool = False):
    return new_context(cache, session_id=session_id, epoch=epoch, asked=list(partitions), forgotten=list(forgotten),
                       uses_topic_ids=uses_topic_ids, privileged=False, now_ms=1.0)


def test_an_initial_fetch_opens_a_session_and_an_incremental_one_answers_only_what_changed() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [asked("t", p) for p in range(5)])
    assert session_id != INVALID_SESSION_ID and len(cache) == 1

    context = incremental(cache, session_id, 1, [asked("t", 2, offset=7)])
    assert context.error == ErrorCode.none
    # Every partition of the session is read, the one named with its new position.
    assert [(p.partition, p.fetch_offset) for p in context.partitions] == [(0, 0), (1, 0), (2, 7), (3, 0), (4, 0)]
    answers = [(p, answer(p.partition)) for p in context.partitions]
    answers[1] = (answers[1][0], answer(1, high_watermark=3))  # the high watermark moved
    answers[3] = (answers[3][0], answer(3, records=b"batch"))  # records
    answers[4] = (answers[4][0], answer(4, error=ErrorCode.not_leader_or_follower))
    sent_id, sent = context.select(cache, answers, 1.0)
    assert sent_id == session_id
    assert [p.partition for p, _ in sent] == [1, 3, 4]
    # What was sent moves to the end of the session's order, so every partition gets its turn.
    assert [p.partition for p in cache.get(session_id).partitions.values()] == [0, 2, 1, 3, 4]

    context = incremental(cache, session_id, 2)
    _, sent = context.select(cache, [(p, answer(p.partition, high_watermark=3 if p.partition == 1 else 0))
                                     for p in context.partitions], 1.0)
    # Nothing new but the partition whose error went away: it is sent again.
    assert [p.partition for p, _ in sent] == [4]


def test_forgotten_partitions_leave_the_session() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [asked("t", p) for p in range(3)])
    context = incremental(cache, session_id, 1, [asked("u", 0)], forgotten=[("t", 1)])
    assert [(p.topic, p.partition) for p in context.partitions] == [("t", 0), ("t", 2), ("u", 0)]


def test_an_unknown_session_and_a_wrong_epoch_are_refused() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [asked("t", 0)])
    assert incremental(cache, session_id + 1, 1).error == ErrorCode.fetch_session_id_not_found
    assert incremental(cache, session_id, 2).error == ErrorCode.invalid_fetch_session_epoch
    assert incremental(cache, session_id, 1).error == ErrorCode.none
    # The epoch moved on with the request that was accepted; replaying it is refused.
    assert incremental(cache, session_id, 1).error == ErrorCode.invalid_fetch_session_epoch
    assert incremental(cache, session_id, 2).error == ErrorCode.none


def test_a_session_opened_by_name_refuses_requests_by_topic_id() -> None:
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [asked("t", 0)])
    assert incremental(cache, session_id, 1, uses_topic_ids=True).error == ErrorCode.fetch_session_topic_id_error


def test_a_full_fetch_closes_the_session_it_names() -> None:
    cache = FetchSessionCache(10)
    first = open_session(cache, [asked("t", 0)])
    context = new_context(cache, session_id=first, epoch=FINAL_EPOCH, asked=[asked("t", 0)], forgotten=[],
                          uses_topic_ids=False, privileged=False, now_ms=0.0)
    session_id, _ = context.select(cache, [(p, answer(0)) for p in context.partitions], 0.0)
    assert session_id == INVALID_SESSION_ID and len(cache) == 0  # FINAL_EPOCH: sessionless

    first = open_session(cache, [asked("t", 0)])
    context = new_context(cache, session_id=first, epoch=INITIAL_EPOCH, asked=[asked("t", 0)], forgotten=[],
                          uses_topic_ids=False, privileged=False, now_ms=0.0)
    second, _ = context.select(cache, [(p, answer(0)) for p in context.partitions], 0.0)
    assert second not in (first, INVALID_SESSION_ID) and list(cache.sessions) == [second]


def test_a_full_cache_refuses_a_newcomer_that_is_worth_no_more_than_its_sessions() -> None:
    cache = FetchSessionCache(2, rng=random.Random(1))
    open_session(cache, [asked("t", p) for p in range(3)], now_ms=0.0)
    open_session(cache, [asked("t", p) for p in range(3)], now_ms=0.0)
    # Sessions younger than the eviction time are safe from unprivileged newcomers, however large.
    assert open_session(cache, [asked("t", p) for p in range(100)], now_ms=1000.0) == INVALID_SESSION_ID
    assert len(cache) == 2 and cache.evictions == 0


def test_a_follower_evicts_the_smallest_consumer_session() -> None:
    cache = FetchSessionCache(2, rng=random.Random(1))
    small = open_session(cache, [asked("t", 0)], now_ms=0.0)
    large = open_session(cache, [asked("t", p) for p in range(5)], now_ms=0.0)
    follower = open_session(cache, [asked("t", 0)], privileged=True, now_ms=1000.0)
    assert follower != INVALID_SESSION_ID
    assert set(cache.sessions) == {large, follower} and small not in cache.sessions
    # Another follower takes the consumer's slot, never the first follower's (younger than the eviction time).
    second = open_session(cache, [asked("t", 0)], privileged=True, now_ms=2000.0)
    assert set(cache.sessions) == {follower, second} and cache.evictions == 2
    assert open_session(cache, [asked("t", p) for p in range(9)], privileged=True, now_ms=3000.0) == INVALID_SESSION_ID


def test_a_session_unused_past_the_eviction_time_goes_first() -> None:
    cache = FetchSessionCache(2, rng=random.Random(1))
    stale = open_session(cache, [asked("t", p) for p in range(50)], privileged=True, now_ms=0.0)
    fresh = open_session(cache, [asked("t", 0)], now_ms=EVICTION_MS)
    newcomer = open_session(cache, [asked("t", 0)], now_ms=EVICTION_MS + 1)
    assert newcomer != INVALID_SESSION_ID and set(cache.sessions) == {fresh, newcomer} and stale not in cache.sessions


def test_an_old_session_may_be_evicted_by_a_larger_newcomer() -> None:
    cache = FetchSessionCache(1, rng=random.Random(1))
    old = open_session(cache, [asked("t", 0)], now_ms=0.0)
    # Used recently (so not stale) but created more than the eviction time ago: any newcomer worth more may take it.
    incremental(cache, old, 1)
    cache.touch(cache.get(old), EVICTION_MS + 5)
    assert open_session(cache, [asked("t", 0)], now_ms=EVICTION_MS + 10) == INVALID_SESSION_ID  # a tie loses
    assert open_session(cache, [asked("t", 0), asked("t", 1)], now_ms=EVICTION_MS + 10) != INVALID_SESSION_ID
    assert old not in cache.sessions


def test_no_slots_means_no_sessions() -> None:
    cache = FetchSessionCache(0)
    assert open_session(cache, [asked("t", 0)]) == INVALID_SESSION_ID and len(cache) == 0


def test_topic_id_sessions_key_partitions_by_id() -> None:
    cache = FetchSessionCache(10)
    topic_id = uuid.uuid4()
    context = new_context(cache, session_id=0, epoch=0, asked=[asked("t", 0, topic_id=topic_id)], forgotten=[],
                          uses_topic_ids=True, privileged=False, now_ms=0.0)
    session_id, _ = context.select(cache, [(p, answer(0)) for p in context.partitions], 0.0)
    context = incremental(cache, session_id, 1, forgotten=[(topic_id, 0)], uses_topic_ids=True)
    assert context.error == ErrorCode.none and context.partitions == []


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(0) == 1 and next_epoch(2**31 - 1) == 1 and next_epoch(FINAL_EPOCH) == FINAL_EPOCH
