"""Fuzzing the sans-I/O request path: `FrameDecoder` and `decode_request`, no broker needed.

Whatever bytes arrive, the decoder must hand back exactly the whole frames in them or raise
FramingError, and decode_request must return a typed request or raise InvalidRequestError (or its
subclass UnsupportedVersionError) carrying the frame's correlation id, never another exception.
Every request type and version Floe serves must survive encode -> decode unchanged.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records, i64Timedelta

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameDecoder,
    FramingError,
    InvalidRequestError,
    UnsupportedVersionError,
    decode_request,
    encode_request,
)
from broker_core.protocol.messages import SUPPORTED_VERSIONS, build_entity, request_class
from broker_core.records import SimpleRecord, build_batch
from broker_core.records.varint import write_unsigned_varint

# kio registers strategies for its primitive types but not for a records field.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
# kio's strategy for an int64 millisecond duration spans all of timedelta's range, but its writer computes
# the milliseconds as round(total_seconds() * 1000) in floating point, exact only while the count stays
# well under 2**53, and its decoder refuses more than (2**63 - 1) // 1000 milliseconds either way. Kafka
# clients send -1 or a retention of days; round trips here stay within +-2**50 ms (about 35,000 years),
# where the float arithmetic is exact. `test_a_duration_beyond_what_decodes_is_an_invalid_request` pins
# down what happens above what decodes.
I64_MILLIS_DECODED = (2**63 - 1) // 1000
I64_MILLIS_EXACT = 2**50
st.register_type_strategy(i64Timedelta, st.integers(-I64_MILLIS_EXACT, I64_MILLIS_EXACT).map(
    lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms))))

SUPPORTED = [(key, version) for key, (low, high) in SUPPORTED_VERSIONS.items() for version in range(low, high + 1)]
SMALL_MAX_FRAME = 64
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@st.composite
def valid_requests(draw: st.DrawFn) -> tuple[int, int, Any]:
    api_key, version = draw(st.sampled_from(SUPPORTED))
    return api_key, version, draw(st.from_type(request_class(api_key, version)))


correlation_ids = st.integers(-(2**31), 2**31 - 1)
client_ids = st.none() | st.text(max_size=20)


@st.composite
def mutated(draw: st.DrawFn, frame: bytes) -> bytes:
    """``frame`` with a few random edits after its first 8 bytes (api key, version, correlation id)."""
    data = bytearray(frame)
    for _ in range(draw(st.integers(1, 4))):
        edit = draw(st.sampled_from(["flip", "overwrite", "truncate", "insert", "delete"]))
        position = draw(st.integers(8, max(8, len(data))))
        if edit == "flip" and position < len(data):
            data[position] ^= 1 << draw(st.integers(0, 7))
        elif edit == "overwrite":
            data[position:position + 4] = draw(st.sampled_from([b"\x00", b"\xff", b"\x7f\xff\xff\xff", b"\x80",
                                                                b"\xff\xff\xff\xff", b"\x00\x00\x00\x00"]))
        elif edit == "truncate":
            del data[position:]
        elif edit == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif edit == "delete":
            del data[position:position + draw(st.integers(1, 8))]
    return bytes(data)


def check_decoded_or_refused(frame: bytes, decode_outcome: Any) -> None:
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
    if (api_key, version) not in set(SUPPORTED):
        with pytest.raises(UnsupportedVersionError) as refused:
            decode_request(frame)
        assert (refused.value.api_key, refused.value.api_version, refused.value.correlation_id) == (
            api_key, version, correlation_id)
        return
    outcome = decode_outcome(frame)
    assert outcome.kind in ("request", "invalid"), (outcome, frame.hex())


@settings(FUZZ, max_examples=300)
@given(valid_requests(), correlation_ids, client_ids)
def test_every_supported_request_survives_encode_and_decode(request: tuple[int, int, Any], correlation_id: int,
                                                            client_id: str | None) -> None:
    api_key, version, body = request
    frame = encode_request(api_key, version, correlation_id, client_id, body)
    decoded = decode_request(frame[4:])
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id, decoded.client_id) == (
        api_key, version, correlation_id, client_id)
    assert decoded.body == body
    assert decoded.size == len(frame) - 4


@pytest.mark.parametrize("retention_ms", [I64_MILLIS_DECODED + 1, 2**63 - 1, -(2**63)])
def test_a_duration_beyond_what_decodes_is_an_invalid_request(retention_ms: int) -> None:
    body = build_entity(request_class(ApiKey.OFFSET_COMMIT, 2), {
        "group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m",
        "retention_time": datetime.timedelta(0), "topics": []})
    frame = bytearray(encode_request(ApiKey.OFFSET_COMMIT, 2, 77, "c", body)[4:])
    # The body starts after the header (api key, version, correlation id, client id "c") with the
    # group id "g" (int16 length), the generation and member id "m"; retention_time follows them.
    at = 8 + 2 + 1 + 2 + 1 + 4 + 2 + 1
    assert frame[at:at + 8] == bytes(8)
    frame[at:at + 8] = struct.pack(">q", retention_ms)
    with pytest.raises(InvalidRequestError) as refused:
        decode_request(bytes(frame))
    assert refused.value.correlation_id == 77
    assert "overflow" in str(refused.value)


@settings(FUZZ, max_examples=400)
@given(api_key=st.sampled_from(sorted(SUPPORTED_VERSIONS)) | st.integers(-(2**15), 2**15 - 1),
       version=st.integers(-1, 14) | st.integers(-(2**15), 2**15 - 1), correlation_id=correlation_ids,
       body=st.binary(max_size=200))
def test_arbitrary_bytes_after_a_header_decode_to_a_request_or_an_invalid_request_error(
        api_key: int, version: int, correlation_id: int, body: bytes, decode_outcome: Any) -> None:
    check_decoded_or_refused(struct.pack(">hhi", api_key, version, correlation_id) + body, decode_outcome)


@settings(FUZZ, max_examples=200)
@given(data=st.data())
def test_mutated_valid_frames_decode_to_a_request_or_an_invalid_request_error(data: st.DataObject,
                                                                              decode_outcome: Any) -> None:
    api_key, version, body = data.draw(valid_requests())
    frame = encode_request(api_key, version, data.draw(correlation_ids), data.draw(client_ids), body)[4:]
    check_decoded_or_refused(data.draw(mutated(frame)), decode_outcome)


@st.composite
def decoder_geometries(draw: st.DrawFn) -> Any:
    """A FrameDecoder factory (max frame bytes -> decoder): the connection's staging and large-frame
    sizes, or small ones under which frames of a few hundred bytes take the large-frame path (their
    own buffer, received into in place) and the staging buffer is compacted often."""
    if draw(st.booleans()):
        return FrameDecoder
    staging = draw(st.integers(16, 700))
    large = draw(st.integers(1, staging // 2))
    return lambda max_frame: FrameDecoder(max_frame, staging_bytes=staging, large_frame_bytes=large)


def size_prefixed(frames: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(frame)) + frame for frame in frames)


def feed_in_pieces(decoder: FrameDecoder, stream: bytes, cuts: list[int]) -> tuple[list[bytes], bool]:
    """Feed ``stream`` cut at ``cuts``; (frames handed back, whether FramingError was raised)."""
    frames: list[bytes] = []
    bounds = [0, *sorted(set(cuts)), len(stream)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        try:
            frames += decoder.feed(stream[start:end])
        except FramingError:
            return frames, True
    return frames, False


def reference_parse(stream: bytes, max_frame: int) -> tuple[list[bytes], bool, int]:
    """(whole frames, whether a size outside [8, max_frame] is reached, bytes left over)."""
    frames, position = [], 0
    while len(stream) - position >= 4:
        (size,) = struct.unpack_from(">i", stream, position)
        if not 8 <= size <= max_frame:
            return frames, True, 0
        if len(stream) - position - 4 < size:
            break
        frames.append(stream[position + 4:position + 4 + size])
        position += 4 + size
    return frames, False, len(stream) - position


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(min_size=8, max_size=300), max_size=8), st.binary(max_size=40),
       st.lists(st.integers(0, 3000), max_size=12), decoder_geometries())
def test_the_frame_decoder_gives_back_the_frames_however_the_stream_is_cut(
        frames: list[bytes], partial_next: bytes, cuts: list[int], geometry: Any) -> None:
    # A frame that has not fully arrived stays buffered: a size prefix saying more than is there.
    tail = struct.pack(">i", max(8, len(partial_next) + 1)) + partial_next
    stream = size_prefixed(frames) + tail
    decoder = geometry(DEFAULT_MAX_FRAME_BYTES)
    received, failed = feed_in_pieces(decoder, stream, [c for c in cuts if c < len(stream)])
    assert not failed
    assert received == frames
    assert decoder.buffered == len(tail)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(min_size=8, max_size=SMALL_MAX_FRAME), max_size=4), st.binary(max_size=120),
       st.lists(st.integers(0, 600), max_size=10), decoder_geometries())
def test_the_frame_decoder_agrees_with_a_reference_parser_on_arbitrary_bytes(
        frames: list[bytes], garbage: bytes, cuts: list[int], geometry: Any) -> None:
    stream = size_prefixed(frames) + garbage
    expected_frames, expected_failure, left_over = reference_parse(stream, SMALL_MAX_FRAME)
    decoder = geometry(SMALL_MAX_FRAME)
    received, failed = feed_in_pieces(decoder, stream, [c for c in cuts if c < len(stream)])
    assert failed == expected_failure
    if failed:
        # Frames completed in the same feed() call as the bad size are dropped with the connection.
        assert received == expected_frames[:len(received)]
    else:
        assert received == expected_frames
        assert decoder.buffered == left_over


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=8, max_size=400), min_size=1, max_size=6),
       st.lists(st.integers(1, 500), min_size=1, max_size=40), decoder_geometries())
def test_receiving_in_place_gives_back_the_frames_and_large_ones_unshared(
        frames: list[bytes], recv_sizes: list[int], geometry: Any) -> None:
    # As the listener does: recv_into the decoder's buffer, however little the socket gives each time.
    stream = size_prefixed(frames)
    decoder = geometry(DEFAULT_MAX_FRAME_BYTES)
    received: list[bytes] = []
    position, turn = 0, 0
    while position < len(stream):
        target = decoder.receive_buffer()
        assert len(target) > 0
        count = min(len(target), recv_sizes[turn % len(recv_sizes)], len(stream) - position)
        target[:count] = stream[position:position + count]
        position += count
        turn += 1
        for frame in decoder.received(count):
            assert isinstance(frame, bytes) or frame.readonly
            received.append(bytes(frame))  # a large frame is valid until the next one starts
    assert received == frames
    assert decoder.buffered == 0


def receive_whole(decoder: FrameDecoder, stream: bytes, most_per_recv: int | None = None) -> list[bytes | memoryview]:
    frames: list[bytes | memoryview] = []
    position = 0
    while position < len(stream):
        target = decoder.receive_buffer()
        count = min(len(target), len(stream) - position, most_per_recv or len(stream))
        target[:count] = stream[position:position + count]
        position += count
        frames += decoder.received(count)
    return frames


def test_a_large_frame_kept_past_the_start_of_the_next_is_released_not_overwritten() -> None:
    decoder = FrameDecoder(staging_bytes=64, large_frame_bytes=16)
    (first,) = receive_whole(decoder, size_prefixed([b"a" * 100]))
    assert bytes(first) == b"a" * 100
    (second,) = receive_whole(decoder, size_prefixed([b"b" * 90]))  # reuses the first one's buffer
    assert bytes(second) == b"b" * 90
    with pytest.raises(ValueError, match="released"):
        bytes(first)


def test_a_large_frame_stays_readable_while_small_frames_and_empty_reads_come_after_it() -> None:
    # An event loop asks for the next buffer as soon as a frame completes, before its reader runs.
    decoder = FrameDecoder(staging_bytes=64, large_frame_bytes=16)
    (large,) = receive_whole(decoder, size_prefixed([b"a" * 100]))
    decoder.receive_buffer()
    assert receive_whole(decoder, size_prefixed([b"s" * 10])) == [b"s" * 10]
    assert bytes(large) == b"a" * 100


def test_a_buffer_still_referenced_through_a_slice_is_not_reused() -> None:
    decoder = FrameDecoder(staging_bytes=64, large_frame_bytes=16)
    (first,) = receive_whole(decoder, size_prefixed([b"a" * 100]))
    kept = first[10:20]
    (second,) = receive_whole(decoder, size_prefixed([b"b" * 100]))
    assert bytes(second) == b"b" * 100
    assert bytes(kept) == b"a" * 10


def test_a_large_produce_request_received_in_place_decodes_like_its_bytes() -> None:
    records = build_batch([SimpleRecord(key=b"k%d" % i, value=bytes([i]) * 1000) for i in range(200)])
    frame = encode_request(ApiKey.PRODUCE, 9, 41, "in-place", build_entity(request_class(ApiKey.PRODUCE, 9), {
        "transactional_id": None, "acks": -1, "timeout": datetime.timedelta(seconds=1),
        "topic_data": [{"name": "t", "partition_data": [{"index": 3, "records": records}]}]}))
    received = receive_whole(FrameDecoder(), frame, most_per_recv=8192)  # a socket handing over 8 KiB at a time
    assert len(received) == 1 and isinstance(received[0], memoryview)  # took the large-frame path
    in_place, copied = decode_request(received[0]), decode_request(frame[4:])
    assert in_place == copied
    assert in_place.body.topic_data[0].partition_data[0].records == records


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**31), 7) | st.integers(DEFAULT_MAX_FRAME_BYTES + 1, 2**31 - 1))
def test_a_size_prefix_outside_the_allowed_range_is_a_framing_error(size: int) -> None:
    with pytest.raises(FramingError, match=f"frame size {size} outside"):
        FrameDecoder().feed(struct.pack(">i", size) + b"\x00" * 8)


# Declared lengths beyond the frame ------------------------------------------------------------------
# kio 0.6.5's native reader reserves an array's declared length before reading it, and a failed
# reservation aborts the process: decode_request must refuse such frames before kio sees them.


def _unsigned_varint(value: int) -> bytes:
    out = bytearray()
    write_unsigned_varint(out, value)
    return bytes(out)


def _flexible_frame(api_key: int, version: int, body: bytes) -> bytes:
    """Header v2 (client id "x", no tagged fields) followed by ``body``."""
    return struct.pack(">hhih", api_key, version, 7, 1) + b"x" + b"\x00" + body


HUGE_COMPACT_ARRAY = _unsigned_varint(2**32 - 1)  # 2**32 - 2 entries


@pytest.mark.parametrize("frame", [
    pytest.param(_flexible_frame(20, 4, HUGE_COMPACT_ARRAY), id="DeleteTopics v4 topic names"),
    pytest.param(_flexible_frame(3, 12, HUGE_COMPACT_ARRAY), id="Metadata v12 topics"),
    pytest.param(_flexible_frame(19, 7, HUGE_COMPACT_ARRAY), id="CreateTopics v7 topics"),
])
def test_an_array_length_far_beyond_the_frame_is_an_invalid_request(frame: bytes, decode_outcome: Any) -> None:
    outcome = decode_outcome(frame)
    assert (outcome.kind, outcome.detail) == ("invalid", "InvalidRequestError")


@pytest.mark.parametrize(("length", "reason"), [
    pytest.param(b"\x81\x80\x80\x80\x80\x00", "varint longer than 5 bytes", id="six bytes"),
    pytest.param(b"\x81\x80", "varint runs past the end of the buffer", id="cut off"),
])
def test_a_compact_length_kafka_cannot_read_is_refused_by_the_bounds_walk(length: bytes, reason: str) -> None:
    """Kafka's readUnsignedVarint refuses a sixth byte; so does the walk, naming the field, before kio reads it."""
    with pytest.raises(InvalidRequestError, match=f"DeleteTopicsRequest v4: topic_names: {reason}") as raised:
        decode_request(_flexible_frame(20, 4, length))
    assert raised.value.correlation_id == 7
