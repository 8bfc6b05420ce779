"""The follower's hand-written Fetch v12 codec agrees with kio, byte for byte and field for field."""

from __future__ import annotations

import datetime
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import decode_request, encode_request, encode_response
from broker_core.protocol.messages import build_entity, request_class, response_class
from broker_core.protocol.replica_fetch import (
    FetchPosition,
    ReplicaFetchFormatError,
    encode_replica_fetch,
    parse_fetch_response,
)

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
topic_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)
error_codes = st.sampled_from([ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.offset_out_of_range,
                               ErrorCode.fenced_leader_epoch])

positions = st.builds(FetchPosition, partition=i32, current_leader_epoch=i32, fetch_offset=i64,
                      log_start_offset=i64, partition_max_bytes=i32)


@settings(max_examples=300, deadline=None)
@given(correlation_id=i32, client_id=st.text(max_size=30), replica_id=i32, max_wait_ms=st.integers(0, 2**31 - 1),
       min_bytes=i32, max_bytes=i32, topics=st.dictionaries(topic_names, st.lists(positions, max_size=4), max_size=4),
       session=st.tuples(i32, i32),
       forgotten=st.dictionaries(topic_names, st.lists(i32, max_size=4), max_size=3))
def test_the_request_is_the_bytes_kio_would_send(correlation_id: int, client_id: str, replica_id: int,
                                                 max_wait_ms: int, min_bytes: int, max_bytes: int,
                                                 topics: dict[str, list[FetchPosition]], session: tuple[int, int],
                                                 forgotten: dict[str, list[int]]) -> None:
    ours = encode_replica_fetch(correlation_id, client_id, replica_id=replica_id, max_wait_ms=max_wait_ms,
                                min_bytes=min_bytes, max_bytes=max_bytes, topics=topics, session_id=session[0],
                                session_epoch=session[1], forgotten=forgotten)
    kio_request = build_entity(request_class(ApiKey.FETCH, 12), {
        "replica_id": replica_id, "max_wait": datetime.timedelta(milliseconds=max_wait_ms), "min_bytes": min_bytes,
        "max_bytes": max_bytes, "isolation_level": 0, "session_id": session[0], "session_epoch": session[1],
        "topics": [{"topic": name, "partitions": [
            {"partition": p.partition, "current_leader_epoch": p.current_leader_epoch, "fetch_offset": p.fetch_offset,
             "last_fetched_epoch": -1, "log_start_offset": p.log_start_offset,
             "partition_max_bytes": p.partition_max_bytes} for p in ps]} for name, ps in topics.items()],
        "forgotten_topics_data": [{"topic": name, "partitions": indexes} for name, indexes in forgotten.items()],
        "rack_id": "",
    })
    assert ours == encode_request(ApiKey.FETCH, 12, correlation_id, client_id, kio_request)
    assert decode_request(ours[4:]).body == kio_request  # and the broker reads it back as sent


@st.composite
def partition_data(draw: st.DrawFn) -> dict[str, Any]:
    data: dict[str, Any] = {
        "partition_index": draw(i32), "error_code": draw(error_codes), "high_watermark": draw(i64),
        "last_stable_offset": draw(i64), "log_start_offset": draw(i64), "preferred_read_replica": draw(i32),
        "aborted_transactions": draw(st.none() | st.lists(st.fixed_dictionaries(
            {"producer_id": st.integers(0, 2**63 - 1), "first_offset": i64}), max_size=3)),
        "records": draw(st.none() | st.binary(max_size=300)),
    }
    # Tagged fields a follower does not use but must step over.
    if draw(st.booleans()):
        data["diverging_epoch"] = {"epoch": draw(i32), "end_offset": draw(i64)}
    if draw(st.booleans()):
        data["current_leader"] = {"leader_id": draw(i32), "leader_epoch": draw(i32)}
    if draw(st.booleans()):
        data["snapshot_id"] = {"end_offset": draw(i64), "epoch": draw(i32)}
    return data


@settings(max_examples=300, deadline=None)
@given(correlation_id=i32, error_code=error_codes, session_id=i32, topics=st.lists(
    st.tuples(topic_names, st.lists(partition_data(), max_size=4)), max_size=4))
def test_the_response_parses_to_what_kio_decodes(correlation_id: int, error_code: ErrorCode, session_id: int,
                                                 topics: list[tuple[str, list[dict[str, Any]]]]) -> None:
    response = build_entity(response_class(ApiKey.FETCH, 12), {
        "throttle_time": datetime.timedelta(0), "error_code": error_code, "session_id": session_id,
        "responses": [{"topic": name, "partitions": parts} for name, parts in topics],
    })
    frame = b"".join(encode_response(ApiKey.FETCH, 12, correlation_id, response))[4:]
    answer = parse_fetch_response(frame)
    parsed = answer.partitions
    assert (answer.correlation_id, answer.error_code, answer.session_id) == (correlation_id, error_code, session_id)
    expected = [(name, p["partition_index"], p["error_code"], p["high_watermark"], p["log_start_offset"], p["records"])
                for name, parts in topics for p in parts]
    assert [(p.topic, p.partition, p.error_code, p.high_watermark, p.log_start_offset,
             None if p.records is None else bytes(p.records)) for p in parsed] == expected


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_cut_or_overlong_response_is_a_format_error_never_a_wrong_answer(data: st.DataObject) -> None:
    response = build_entity(response_class(ApiKey.FETCH, 12), {
        "throttle_time": datetime.timedelta(0), "error_code": ErrorCode.none, "session_id": 0,
        "responses": [{"topic": "t", "partitions": [data.draw(partition_data())]}],
    })
    frame = b"".join(encode_response(ApiKey.FETCH, 12, 7, response))[4:]
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(ReplicaFetchFormatError):
        parse_fetch_response(frame[:cut])


def test_a_varint_longer_than_five_bytes_is_refused() -> None:
    frame = struct.pack(">i", 7) + b"\x00" + struct.pack(">ihi", 0, 0, 0) + b"\xff" * 6 + b"\x01"
    with pytest.raises(ReplicaFetchFormatError, match="longer than 5 bytes"):
        parse_fetch_response(frame)
