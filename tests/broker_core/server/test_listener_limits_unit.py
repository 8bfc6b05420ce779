"""The listener's limits without a broker: the frame decoder's buffers and the request memory pool,
connection admission, and the KIP-219 mute of a real Connection over a socketpair.

The Connection tests give it a handler table of their own (the one narrow interface a Connection
uses) whose ApiVersions answer carries a throttle time, as a quota would set it.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import (
    FrameDecoder,
    FramingError,
    RequestMemoryPool,
    decode_response,
    encode_request,
)
from broker_core.protocol.messages import build_entity, request_class, respond
from broker_core.server.listener import (
    Connection,
    ConnectionAdmission,
    ListenerLimits,
    parse_per_ip_overrides,
)
from broker_core.settings import ConfigError

MiB = 1024 * 1024


def size_prefix(size: int) -> bytes:
    return struct.pack(">i", size)


def receive(decoder: FrameDecoder, data: bytes) -> list:
    """Put ``data`` where the decoder asks, as a socket would; the frames completed."""
    frames = []
    view = memoryview(data)
    while view:
        target = decoder.receive_buffer()
        count = min(len(target), len(view))
        target[:count] = view[:count]
        view = view[count:]
        frames += decoder.received(count)
    return frames


@pytest.mark.parametrize("size", [-1, -(2**31), 100 * MiB + 1])
def test_a_size_prefix_outside_the_limit_is_refused_before_any_body_arrives(size: int) -> None:
    decoder = FrameDecoder(100 * MiB)
    with pytest.raises(FramingError, match=f"frame size {size}"):
        receive(decoder, size_prefix(size))


def test_a_size_prefix_alone_allocates_no_more_than_the_large_frame_threshold() -> None:
    decoder = FrameDecoder(100 * MiB)
    assert receive(decoder, size_prefix(100 * MiB)) == []
    assert decoder.allocated <= 64 * 1024


def test_a_large_frame_buffer_stays_within_twice_the_bytes_received_and_the_frame_comes_back_whole() -> None:
    size = 5 * MiB + 123
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    decoder = FrameDecoder(100 * MiB)
    receive(decoder, size_prefix(size))
    received = 0
    frames: list = []
    while received < size:
        chunk = body[received:received + 100_000]
        frames += receive(decoder, chunk)
        received += len(chunk)
        if not frames:
            assert decoder.allocated <= max(2 * received, 64 * 1024)
    assert [bytes(frame) for frame in frames] == [body]


def test_a_pool_that_is_spent_holds_back_the_next_large_frame_until_bytes_are_released() -> None:
    pool = RequestMemoryPool(1 * MiB)
    first, second = FrameDecoder(100 * MiB, pool=pool), FrameDecoder(100 * MiB, pool=pool)
    receive(first, size_prefix(3 * MiB) + b"a" * (1 * MiB))  # takes the overdraft beyond the budget
    assert first.ready()
    assert receive(second, size_prefix(2 * MiB)) == []
    assert not second.ready()  # the budget is spent and the overdraft is taken
    frames = receive(first, b"a" * (2 * MiB))
    assert [len(frame) for frame in frames] == [3 * MiB]
    assert not second.ready()  # the frame is handed out, not processed yet
    first.frames_processed()  # its buffer becomes a spare, which the second evicts
    assert second.ready()
    assert [bytes(frame) for frame in receive(second, b"b" * (2 * MiB))] == [b"b" * (2 * MiB)]
    second.frames_processed()
    first.close()
    second.close()
    assert pool.used == 0


def test_a_request_larger_than_the_whole_pool_still_proceeds() -> None:
    pool = RequestMemoryPool(256 * 1024)
    decoder = FrameDecoder(100 * MiB, pool=pool)
    frames = receive(decoder, size_prefix(4 * MiB) + b"z" * (4 * MiB))
    assert [bytes(frame) for frame in frames] == [b"z" * (4 * MiB)]


def test_small_frames_need_nothing_from_a_spent_pool() -> None:
    pool = RequestMemoryPool(0)
    decoder = FrameDecoder(100 * MiB, pool=pool)
    assert receive(decoder, size_prefix(8) + b"12345678") == [b"12345678"]


def test_per_ip_overrides_are_read_in_kafkas_format() -> None:
    assert parse_per_ip_overrides("127.0.0.1:5, ::1:2,localhost:0") == {"127.0.0.1": 5, "::1": 2, "localhost": 0}
    assert parse_per_ip_overrides("") == {}
    with pytest.raises(ConfigError, match="host:count"):
        parse_per_ip_overrides("127.0.0.1")
    with pytest.raises(ConfigError, match="no integer"):
        parse_per_ip_overrides("127.0.0.1:many")


def test_admission_refuses_beyond_each_limit_and_counts_why() -> None:
    limits = ListenerLimits(max_connections=3, max_connections_per_ip=2,
                            max_connections_per_ip_overrides={"127.0.0.2": 0}, max_connection_creation_rate=100)
    admission = ConnectionAdmission(limits, now=0.0)
    assert admission.admit("10.0.0.1", 0.0) is None
    assert admission.admit("10.0.0.1", 0.0) is None
    assert "max.connections.per.ip (2)" in admission.admit("10.0.0.1", 0.0)
    assert "max.connections.per.ip (0)" in admission.admit("127.0.0.2", 0.0)
    assert admission.admit("10.0.0.2", 0.0) is None
    assert "max.connections (3)" in admission.admit("10.0.0.3", 0.0)
    admission.closed("10.0.0.1")
    assert admission.admit("10.0.0.3", 0.0) is None
    assert admission.refused == {"max.connections.per.ip": 2, "max.connections": 1}


def test_admission_limits_the_creation_rate_per_second() -> None:
    admission = ConnectionAdmission(ListenerLimits(max_connection_creation_rate=2), now=0.0)
    outcomes = [admission.admit(f"10.0.0.{i}", 0.0) for i in range(3)]
    assert outcomes[:2] == [None, None] and "max.connection.creation.rate (2/s)" in outcomes[2]
    assert admission.admit("10.0.0.9", 0.6) is None  # 1.2 tokens back after 0.6 s


class ThrottlingHandlers:
    """A handler table whose ApiVersions answers carry ``throttle``, as a quota would set it."""

    def __init__(self, throttle: datetime.timedelta) -> None:
        self.throttle = throttle

    def api_versions_response(self, request, error=ErrorCode.none):
        return respond(request, {"error_code": error, "api_keys": [], "throttle_time": self.throttle})

    async def handle(self, request):
        return self.api_versions_response(request)

    async def start_produce(self, request):
        raise AssertionError("no produce is sent")


def api_versions_request(correlation_id: int) -> bytes:
    return encode_request(ApiKey.API_VERSIONS, 3, correlation_id, "test",
                          build_entity(request_class(ApiKey.API_VERSIONS, 3),
                                       {"client_software_name": "t", "client_software_version": "1"}))


async def read_response(reader: asyncio.StreamReader) -> int:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    correlation_id, _ = decode_response(ApiKey.API_VERSIONS, 3, await reader.readexactly(size))
    return correlation_id


async def answers_in_window(throttle: datetime.timedelta, window_s: float) -> list[int]:
    """Send request 1, read its answer, send request 2; the answers to request 2 read within ``window_s``."""
    server, client = socket.socketpair()
    server.setblocking(False)
    connection = Connection(server, ThrottlingHandlers(throttle), 100 * MiB)
    serving = asyncio.create_task(connection.serve())
    reader, writer = await asyncio.open_connection(sock=client)
    try:
        writer.write(api_versions_request(1))
        assert await read_response(reader) == 1
        writer.write(api_versions_request(2))
        try:
            return [await asyncio.wait_for(read_response(reader), window_s)]
        except TimeoutError:
            return []
    finally:
        writer.close()
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


def test_after_a_throttled_response_the_connection_reads_nothing_more_for_the_throttle_time() -> None:
    assert asyncio.run(answers_in_window(datetime.timedelta(seconds=3), window_s=2.0)) == []


def test_after_an_unthrottled_response_the_next_request_is_answered() -> None:
    assert asyncio.run(answers_in_window(datetime.timedelta(0), window_s=30.0)) == [2]


def test_a_throttled_connection_answers_the_next_request_once_the_throttle_time_is_over() -> None:
    assert asyncio.run(answers_in_window(datetime.timedelta(seconds=1), window_s=30.0)) == [2]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(8, 300_000), min_size=1, max_size=6), st.integers(0, 400_000),
       st.lists(st.integers(1, 200_000), min_size=1, max_size=8))
def test_with_any_pool_the_frames_come_back_whole_and_every_byte_is_given_back(
        sizes: list[int], capacity: int, chunks: list[int]) -> None:
    pool = RequestMemoryPool(capacity)
    decoder = FrameDecoder(100 * MiB, pool=pool)
    frames = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    stream = memoryview(b"".join(size_prefix(len(frame)) + frame for frame in frames))
    received: list[bytes] = []
    turn = 0
    while stream:
        assert decoder.ready()  # a lone connection always proceeds: it may take the overdraft
        target = decoder.receive_buffer()
        count = min(len(target), len(stream), chunks[turn % len(chunks)])
        turn += 1
        target[:count] = stream[:count]
        stream = stream[count:]
        got = decoder.received(count)
        received += [bytes(frame) for frame in got]
        if got:
            decoder.frames_processed()
        assert pool.used == decoder.allocated
    assert received == frames
    decoder.close()
    assert pool.used == 0


def test_a_per_ip_override_by_host_name_applies_to_every_address_of_the_name() -> None:
    admission = ConnectionAdmission(ListenerLimits(max_connections_per_ip_overrides={"localhost": 0}), now=0.0)
    assert "max.connections.per.ip (0)" in admission.admit("127.0.0.1", 0.0)
    assert admission.admit("127.0.0.9", 0.0) is None
