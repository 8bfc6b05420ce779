"""Fuzzing a running broker over raw sockets: garbage request frames and Produce requests with garbage batches.

After every case the broker must still answer ApiVersions and Metadata on a fresh connection; what
it sent back on the fuzzed connection must be whole response frames (or nothing, when it closed the
connection); and a Produce whose batch is refused must leave the partition's log end where it was,
while an accepted one moves it by exactly the batch's record count. Cases whose flaw is known
(truncation, wrong magic, unknown codec bits, a record count that disagrees with the offsets, a
flipped bit under the CRC, a batch over max.message.bytes) must be refused with the matching error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records

from broker_core.client import FloeClient
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import DEFAULT_MAX_FRAME_BYTES, decode_response, encode_request
from broker_core.protocol.messages import SUPPORTED_VERSIONS, build_entity, request_class
from broker_core.records import Compression, SimpleRecord, build_batch, compute_crc, iter_headers
from broker_core.records.errors import RecordsError
from tests.support.stack import running_stack

# kio registers strategies for its primitive types but not for a records field.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

TOPIC = "fuzz-produce"
MAX_MESSAGE_BYTES = 16384
# APIs whose requests are fuzzed as frames: none of them creates or deletes anything.
FUZZED_APIS = [ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.API_VERSIONS,
               ApiKey.DESCRIBE_CONFIGS, ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS]
# A fuzzed connection gets this long to answer before the case counts as an ongoing (legal) long poll.
ANSWER_WAIT_S = 0.5
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                      HealthCheck.function_scoped_fixture])
SIZE = struct.Struct(">i")
CRC_OFFSET, ATTRIBUTES_OFFSET, MAGIC_OFFSET, RECORDS_COUNT_OFFSET, HEADER_SIZE = 17, 21, 16, 57, 61


class RawBroker:
    """Blocking one-shot connections to one broker, speaking the protocol through Floe's framing."""

    def __init__(self, host: str, port: int) -> None:
        self.address = (host, port)
        self.correlation_id = 0

    def exchange(self, data: bytes) -> bytes:
        """Send ``data``, half-close, and return everything the broker sends until it closes or goes quiet."""
        received = bytearray()
        with socket.create_connection(self.address, timeout=5) as sock:
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the broker closed the connection on a bad frame before reading the rest
            sock.settimeout(ANSWER_WAIT_S)
            while True:
                try:
                    chunk = sock.recv(65536)
                except (TimeoutError, ConnectionResetError):
                    break
                if not chunk:
                    break
                received += chunk
        return bytes(received)

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.correlation_id += 1
        frame = encode_request(api_key, version, self.correlation_id, "fuzz-check",
                               build_entity(request_class(api_key, version), body))
        with socket.create_connection(self.address, timeout=10) as sock:
            sock.sendall(frame)
            size = SIZE.unpack(self._read_exactly(sock, 4))[0]
            correlation_id, response = decode_response(api_key, version, self._read_exactly(sock, size))
        assert correlation_id == self.correlation_id
        return response

    @staticmethod
    def _read_exactly(sock: socket.socket, count: int) -> bytes:
        data = bytearray()
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            assert chunk, f"broker closed the connection {count - len(data)} bytes short of a response"
            data += chunk
        return bytes(data)

    def assert_healthy(self) -> None:
        versions = self.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "fuzz", "client_software_version": "1"})
        assert versions.error_code == ErrorCode.none
        assert {k.api_key for k in versions.api_keys} >= set(FUZZED_APIS)
        metadata = self.request(ApiKey.METADATA, 12, {"topics": [{"name": TOPIC, "topic_id": None}],
                                               "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})
        assert [b.node_id for b in metadata.brokers] == [1]
        assert [(t.name, t.error_code) for t in metadata.topics] == [(TOPIC, ErrorCode.none)]

    def log_end_offset(self) -> int:
        response = self.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        (partition,) = response.topics[0].partitions
        assert partition.error_code == ErrorCode.none
        return partition.offset

    def produce(self, records: bytes, version: int) -> ErrorCode:
        response = self.request(ApiKey.PRODUCE, version, {
            "transactional_id": None, "acks": 1, "timeout": datetime.timedelta(seconds=10),
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}],
        })
        (partition,) = response.responses[0].partition_responses
        return partition.error_code


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawBroker]:
    with running_stack(tmp_path_factory.mktemp("fuzz")) as stack:
        async def create_topic() -> None:
            async with FloeClient(stack.bootstrap_servers) as client:
                await client.create_topic(TOPIC, 1, 1, {"max.message.bytes": str(MAX_MESSAGE_BYTES)})

        asyncio.run(create_topic())
        yield RawBroker(stack.host, stack.processes[1].port)


def assert_whole_frames(received: bytes) -> None:
    position = 0
    while position < len(received):
        assert len(received) - position >= 4, f"a partial size prefix at byte {position}"
        (size,) = SIZE.unpack_from(received, position)
        assert 0 <= size <= len(received) - position - 4, f"a partial response frame at byte {position}"
        position += 4 + size


# Request frames ----------------------------------------------------------------------------------


@st.composite
def valid_requests(draw: st.DrawFn) -> tuple[bytes, int, bool]:
    """(frame with its size prefix, correlation id, whether the broker answers it)."""
    api_key = draw(st.sampled_from(FUZZED_APIS))
    low, high = SUPPORTED_VERSIONS[api_key]
    version = draw(st.integers(low, high))
    body = draw(st.from_type(request_class(api_key, version)))
    if api_key == ApiKey.FETCH:  # keep long polls short, or every case waits them out
        body = dataclasses.replace(body, max_wait=datetime.timedelta(milliseconds=draw(st.integers(0, 50))))
    if api_key == ApiKey.METADATA and 10 <= version < 12 and body.topics:
        # The schema lets v10-11 name topics by id only, but Kafka refuses those requests (names may be
        # null from v12), and so does Floe: by closing the connection.
        body = dataclasses.replace(body, topics=tuple(
            topic if topic.name is not None else dataclasses.replace(topic, name=draw(st.text(max_size=10)))
            for topic in body.topics))
    correlation_id = draw(st.integers(0, 2**31 - 1))
    frame = encode_request(api_key, version, correlation_id, draw(st.none() | st.text(max_size=10)), body)
    return frame, correlation_id, not (api_key == ApiKey.PRODUCE and body.acks == 0)


valid_frames = valid_requests().map(lambda request: request[0])


@st.composite
def mutated(draw: st.DrawFn, frame: bytes) -> bytes:
    """Edits after the 12 bytes of size prefix, api key, version and correlation id."""
    data = bytearray(frame)
    for _ in range(draw(st.integers(1, 3))):
        position = draw(st.integers(12, max(12, len(data))))
        edit = draw(st.sampled_from(["flip", "overwrite", "truncate", "insert"]))
        if edit == "flip" and position < len(data):
            data[position] ^= 1 << draw(st.integers(0, 7))
        elif edit == "overwrite":
            data[position:position + 4] = draw(st.sampled_from([b"\x00", b"\xff", b"\x7f\xff\xff\xff",
                                                                b"\xff\xff\xff\xff"]))
        elif edit == "truncate":
            del data[position:]
        elif edit == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
    # The size prefix follows the edits, so the frame stays whole.
    data[0:4] = SIZE.pack(len(data) - 4)
    return bytes(data)


def with_size(frame: bytes, size: int) -> bytes:
    return SIZE.pack(size) + frame[4:]


streams = st.one_of(
    st.lists(valid_frames, min_size=1, max_size=3).map(b"".join),  # pipelined, all valid
    valid_frames.flatmap(mutated),
    st.tuples(valid_frames, valid_frames.flatmap(mutated)).map(b"".join),  # a good one, then a bad one
    st.binary(max_size=300),  # anything at all
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64)).map(lambda t: SIZE.pack(t[0]) + t[1]),
    st.tuples(valid_frames, st.integers(-(2**31), 2**31 - 1)).map(lambda t: with_size(*t)),  # lying size
)


def whole_frames(stream: bytes) -> list[bytes]:
    """The frames a broker would decode from ``stream`` (stopping where the framing breaks)."""
    frames, position = [], 0
    while len(stream) - position >= 4:
        (size,) = SIZE.unpack_from(stream, position)
        if not 8 <= size <= DEFAULT_MAX_FRAME_BYTES or len(stream) - position - 4 < size:
            break
        frames.append(stream[position + 4:position + 4 + size])
        position += 4 + size
    return frames


@settings(FUZZ, max_examples=200)
@given(stream=streams)
def test_the_broker_survives_garbage_request_frames(broker: RawBroker, stream: bytes) -> None:
    assert_whole_frames(broker.exchange(stream))
    broker.assert_healthy()


@settings(FUZZ, max_examples=150)
@given(requests=st.lists(valid_requests(), min_size=1, max_size=3))
def test_valid_requests_are_answered_in_order(broker: RawBroker, requests: list[tuple[bytes, int, bool]]) -> None:
    received = broker.exchange(b"".join(frame for frame, _, _ in requests))
    assert_whole_frames(received)
    answered, position = [], 0
    while position < len(received):
        (size,) = SIZE.unpack_from(received, position)
        answered.append(struct.unpack_from(">i", received, position + 4)[0])
        position += 4 + size
    sent = [struct.unpack_from(">hhi", frame, 4) for frame, _, _ in requests]  # (api key, version, correlation id)
    assert answered == [correlation_id for _, correlation_id, answers in requests if answers], sent


# Produce with garbage batches ---------------------------------------------------------------------


@st.composite
def good_batches(draw: st.DrawFn) -> bytes:
    records = [
        SimpleRecord(key=draw(st.none() | st.binary(max_size=16)), value=draw(st.binary(min_size=size, max_size=size)),
                     headers=draw(st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)),
                                           max_size=2)))
        for size in draw(st.lists(st.integers(0, 200), min_size=1, max_size=5))
    ]
    return build_batch(records, compression=draw(st.sampled_from(list(Compression))))


def with_crc(batch: bytearray) -> bytes:
    batch[CRC_OFFSET:CRC_OFFSET + 4] = struct.pack(">I", compute_crc(batch, 0, len(batch)))
    return bytes(batch)


@st.composite
def flipped(draw: st.DrawFn) -> tuple[bytes, ErrorCode | None]:
    batch = bytearray(draw(good_batches()))
    position = draw(st.integers(0, len(batch) - 1))
    batch[position] ^= 1 << draw(st.integers(0, 7))
    if position < 8 or 12 <= position < 16:  # baseOffset and partitionLeaderEpoch: the broker overwrites both
        return bytes(batch), ErrorCode.none
    if position == MAGIC_OFFSET:
        return bytes(batch), ErrorCode.unsupported_for_message_format
    return bytes(batch), ErrorCode.corrupt_message  # batchLength, the CRC or anything the CRC covers


@st.composite
def truncated(draw: st.DrawFn) -> tuple[bytes, ErrorCode]:
    batch = draw(good_batches())
    cut = batch[:draw(st.integers(1, len(batch) - 1))]
    before = draw(st.none() | good_batches())  # a good batch in front is refused along with the cut one
    return (before or b"") + cut, ErrorCode.corrupt_message


@st.composite
def wrong_magic(draw: st.DrawFn) -> tuple[bytes, ErrorCode]:
    batch = bytearray(draw(good_batches()))
    batch[MAGIC_OFFSET] = draw(st.integers(0, 255).filter(lambda magic: magic != 2))
    return bytes(batch), ErrorCode.unsupported_for_message_format


@st.composite
def unknown_codec(draw: st.DrawFn) -> tuple[bytes, ErrorCode]:
    batch = bytearray(draw(good_batches()))
    batch[ATTRIBUTES_OFFSET + 1] = (batch[ATTRIBUTES_OFFSET + 1] & ~0x07) | draw(st.integers(5, 7))
    return with_crc(batch), ErrorCode.corrupt_message


@st.composite
def miscounted(draw: st.DrawFn) -> tuple[bytes, ErrorCode]:
    batch = bytearray(draw(good_batches()))
    (count,) = struct.unpack_from(">i", batch, RECORDS_COUNT_OFFSET)
    struct.pack_into(">i", batch, RECORDS_COUNT_OFFSET, draw(st.integers(-(2**31), 2**31 - 1).filter(
        lambda other: other != count)))
    return with_crc(batch), ErrorCode.corrupt_message


@st.composite
def oversized(draw: st.DrawFn) -> tuple[bytes, ErrorCode]:
    value = draw(st.binary(min_size=MAX_MESSAGE_BYTES, max_size=MAX_MESSAGE_BYTES + 2000))
    return build_batch([SimpleRecord(key=None, value=value)]), ErrorCode.message_too_large


produce_cases = st.one_of(
    good_batches().map(lambda batch: (batch, ErrorCode.none)),
    st.binary(min_size=1, max_size=400).map(lambda data: (data, None)),  # anything: either outcome
    flipped(),
    truncated(),
    wrong_magic(),
    unknown_codec(),
    miscounted(),
    oversized(),
)


def record_count(records: bytes) -> int:
    try:
        return sum(header.last_offset_delta + 1 for _, header in iter_headers(records))
    except RecordsError:
        return 0


@settings(FUZZ, max_examples=200)
@given(case=produce_cases, version=st.integers(*SUPPORTED_VERSIONS[ApiKey.PRODUCE]))
def test_a_refused_batch_writes_nothing_and_the_broker_stays_up(
        broker: RawBroker, case: tuple[bytes, ErrorCode | None], version: int) -> None:
    records, expected = case
    event(f"expected: {'either outcome' if expected is None else expected.name}")
    before = broker.log_end_offset()
    code = broker.produce(records, version)
    after = broker.log_end_offset()
    if expected is not None:
        assert code == expected
    if code == ErrorCode.none:
        assert after == before + record_count(records)
    else:
        assert after == before
    broker.assert_healthy()


def test_a_shortened_batch_is_corrupt_even_when_its_tail_reads_as_a_batch_of_another_magic(broker: RawBroker) -> None:
    # Found by the test above: with batchLength made 150 bytes short, the CRC of the first batch
    # fails, and the 150 bytes left over start a "batch" whose magic byte is record data (7). Kafka
    # reports the first bad batch, so CORRUPT_MESSAGE, not UNSUPPORTED_FOR_MESSAGE_FORMAT.
    batch = bytearray(build_batch([SimpleRecord(key=None, value=b"\x07" * 300)]))
    (length,) = struct.unpack_from(">i", batch, 8)
    struct.pack_into(">i", batch, 8, length - 150)
    before = broker.log_end_offset()
    assert broker.produce(bytes(batch), SUPPORTED_VERSIONS[ApiKey.PRODUCE][1]) == ErrorCode.corrupt_message
    assert broker.log_end_offset() == before
    broker.assert_healthy()


def test_a_frame_declaring_four_billion_topics_leaves_the_broker_up(tmp_path: Any) -> None:
    # Metadata v12 (flexible): header v2 with client id "x" and no tagged fields, then a compact array
    # of topics whose length varint says 2**32 - 2 entries.
    frame = struct.pack(">hhih", ApiKey.METADATA, 12, 7, 1) + b"x\x00" + b"\xff\xff\xff\xff\x0f"
    with running_stack(tmp_path) as stack:
        raw = RawBroker(stack.host, stack.processes[1].port)
        raw.exchange(SIZE.pack(len(frame)) + frame)
        versions = raw.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "fuzz", "client_software_version": "1"})
        assert versions.error_code == ErrorCode.none
