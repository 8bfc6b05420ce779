"""The fetching side of KIP-227 sessions, and the follower's session requests as a leader reads them.

The last test is the follower's whole exchange without the sockets: `FetchSessionHandler` builds the
request, `encode_replica_fetch` writes it, kio decodes it as the leader's handler does, and the
leader's session context answers it, so it shows that after the first fetch a follower names only
the partitions whose position changed and hears back only about those with news.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker_core.protocol.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID, FetchSessionHandler
from broker_core.protocol.framing import decode_request
from broker_core.protocol.replica_fetch import FetchPosition, encode_replica_fetch
from broker_core.server.fetch_sessions import CachedPartition, FetchSessionCache, new_context


def position(partition: int, offset: int) -> FetchPosition:
    return FetchPosition(partition, 0, offset, 0, 1 << 20)


def test_the_first_request_is_full_then_only_changes_are_sent() -> None:
    handler: FetchSessionHandler[tuple[str, int], FetchPosition] = FetchSessionHandler()
    wanted = {("t", p): position(p, 0) for p in range(4)}
    first = handler.build(wanted)
    assert first.full and first.session_id == INVALID_SESSION_ID and len(first.to_send) == 4
    assert handler.handle_response(ErrorCode.none, 77)
    wanted[("t", 2)] = position(2, 5)
    del wanted[("t", 3)]
    second = handler.build(wanted)
    assert (second.session_id, second.epoch) == (77, 1)
    assert list(second.to_send) == [("t", 2)] and second.to_forget == [("t", 3)]
    assert handler.handle_response(ErrorCode.none, 77)
    third = handler.build(wanted)
    assert (third.epoch, third.to_send, third.to_forget) == (2, {}, [])


def test_a_broker_without_room_keeps_getting_full_requests() -> None:
    handler: FetchSessionHandler[tuple[str, int], FetchPosition] = FetchSessionHandler()
    handler.build({("t", 0): position(0, 0)})
    assert handler.handle_response(ErrorCode.none, INVALID_SESSION_ID)
    again = handler.build({("t", 0): position(0, 0)})
    assert again.full and again.session_id == INVALID_SESSION_ID and len(again.to_send) == 1


def test_session_errors_and_lost_answers_start_over_with_a_full_request() -> None:
    handler: FetchSessionHandler[tuple[str, int], FetchPosition] = FetchSessionHandler()
    wanted = {("t", 0): position(0, 0)}
    handler.build(wanted)
    handler.handle_response(ErrorCode.none, 9)
    handler.build(wanted)
    assert not handler.handle_response(ErrorCode.invalid_fetch_session_epoch, 0)
    retry = handler.build(wanted)
    # Full, naming the old session so that the broker closes it while it opens the next.
    assert (retry.session_id, retry.epoch, len(retry.to_send)) == (9, INITIAL_EPOCH, 1)
    assert not handler.handle_response(ErrorCode.fetch_session_id_not_found, 0)
    assert handler.build(wanted).session_id == INVALID_SESSION_ID
    handler.handle_response(ErrorCode.none, 10)
    handler.build(wanted)
    handler.reset()  # the connection dropped with the answer
    assert handler.build(wanted).full


def test_positions_told_by_change_build_the_same_requests_as_whole_ones() -> None:
    handler: FetchSessionHandler[tuple[str, int], FetchPosition] = FetchSessionHandler()
    for p in range(4):
        handler.want(("t", p), position(p, 0))
    first = handler.build()
    assert first.full and list(first.to_send) == [("t", p) for p in range(4)]
    handler.want(("t", 1), position(1, 3))  # changed while the full request was out: sent next
    assert handler.handle_response(ErrorCode.none, 5)
    second = handler.build()
    assert (second.epoch, second.to_send, second.to_forget) == (1, {("t", 1): position(1, 3)}, [])
    assert handler.handle_response(ErrorCode.none, 5)
    handler.want(("t", 2), position(2, 0))  # told again, unchanged: not sent
    handler.drop(("t", 3))
    handler.drop(("t", 9))  # never in the session: nothing to forget
    third = handler.build()
    assert (third.epoch, third.to_send, third.to_forget) == (2, {}, [("t", 3)])
    assert handler.handle_response(ErrorCode.none, 5)
    fourth = handler.build()
    assert (fourth.to_send, fourth.to_forget) == ({}, [])
    handler.reset()  # the answer was lost: the next request is full, with what is wanted now
    again = handler.build()
    assert again.full and again.to_send == {("t", 0): position(0, 0), ("t", 1): position(1, 3),
                                            ("t", 2): position(2, 0)}
    assert handler.handle_response(ErrorCode.none, 6)
    handler.want(("t", 3), position(3, 7))
    assert handler.build().to_send == {("t", 3): position(3, 7)}
    assert not handler.handle_response(ErrorCode.invalid_fetch_session_epoch, 0)
    assert len(handler.build().to_send) == 4  # after a session error the full fetch carries all four


def _leader_reads(cache: FetchSessionCache, frame: bytes, high_watermarks: dict[int, int]) -> tuple[int, list[int], int]:
    """The leader's side: decode the request as the broker does, answer it through its session context.
    (session id, partitions answered, partitions named in the request)."""
    body = decode_request(frame[4:]).body
    asked = [CachedPartition(t.topic, None, p.partition, p.fetch_offset, p.partition_max_bytes, p.log_start_offset,
                             p.current_leader_epoch) for t in body.topics for p in t.partitions]
    forgotten = [(t.topic, index) for t in body.forgotten_topics_data for index in t.partitions]
    context = new_context(cache, session_id=body.session_id, epoch=body.session_epoch, asked=asked,
                          forgotten=forgotten, uses_topic_ids=False, privileged=True, now_ms=0.0)
    assert context.error == ErrorCode.none
    answers = [(p, {"partition_index": p.partition, "error_code": ErrorCode.none,
                    "high_watermark": high_watermarks.get(p.partition, 0), "log_start_offset": 0, "records": b""})
               for p in context.partitions]
    session_id, sent = context.select(cache, answers, 0.0)
    return session_id, [p.partition for p, _ in sent], len(asked)


def test_a_follower_session_sends_only_changed_partitions() -> None:
    cache = FetchSessionCache(1000)
    handler: FetchSessionHandler[tuple[str, int], FetchPosition] = FetchSessionHandler()
    wanted = {("topic", p): position(p, 100) for p in range(1000)}

    def round_trip(high_watermarks: dict[int, int]) -> tuple[int, list[int], int, int]:
        request = handler.build(wanted)
        topics: dict[str, list[FetchPosition]] = {}
        for (topic, _), p in request.to_send.items():
            topics.setdefault(topic, []).append(p)
        forgotten: dict[str, list[int]] = {}
        for topic, index in request.to_forget:
            forgotten.setdefault(topic, []).append(index)
        frame = encode_replica_fetch(1, "floe-replica-2", replica_id=2, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                     topics=topics, session_id=request.session_id, session_epoch=request.epoch,
                                     forgotten=forgotten)
        session_id, answered, named = _leader_reads(cache, frame, high_watermarks)
        assert handler.handle_response(ErrorCode.none, session_id)
        return session_id, answered, named, len(frame)

    session_id, answered, named, full_bytes = round_trip({})
    assert session_id != INVALID_SESSION_ID and named == 1000 and len(answered) == 1000
    _, answered, named, idle_bytes = round_trip({})
    assert (named, answered) == (0, [])  # nothing changed: an empty request, an empty answer
    wanted[("topic", 7)] = position(7, 105)  # the follower appended to partition 7
    _, answered, named, _ = round_trip({7: 105})
    assert (named, answered) == (1, [7])
    assert idle_bytes * 100 < full_bytes
