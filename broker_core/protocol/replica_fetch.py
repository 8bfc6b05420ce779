"""The follower's Fetch v12, encoded and parsed by hand: the one exchange on replication's hot path.

A follower sends a Fetch request per round trip and gets back every byte the leader took, so kio's
generic entity machinery (a frozen dataclass per field group on the way out, a copy of every
partition's records on the way in) cost the followers a visible share of their CPU. This module
writes the request straight to bytes and reads the response in place: each partition's records come
back as a memoryview into the response frame, handed to the log's append without being copied.

Only what a follower sends is encoded (Fetch v12, request header v2, with or without a KIP-227 fetch
session: `broker_core.protocol.fetch_session`). The parser reads any Fetch v12
response and skips what a follower does not use (aborted transactions, tagged fields such as the
diverging epoch), checking every length against the frame; a response it cannot read raises
ReplicaFetchFormatError. Tests hold both sides to kio's encoding and decoding.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker_core.protocol.api_keys import ApiKey
from broker_core.records.errors import CorruptVarintError
from broker_core.records.varint import decode_unsigned_varint, write_unsigned_varint

FETCH_VERSION = 12

_REQUEST_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_REQUEST_FIXED = struct.Struct(">iiiibii")  # replica, max wait, min bytes, max bytes, isolation, session id, epoch
_PARTITION = struct.Struct(">iiqiqi")  # partition, current leader epoch, fetch offset, last fetched epoch,
#                                         log start offset, partition max bytes
_RESPONSE_FIXED = struct.Struct(">ihi")  # throttle time, error code, session id
_PARTITION_DATA = struct.Struct(">ihqqq")  # partition, error code, high watermark, last stable, log start
_INT32 = struct.Struct(">i")


class ReplicaFetchFormatError(ValueError):
    """A Fetch v12 response that does not parse: a length past the frame's end or a malformed varint."""


@dataclass(frozen=True, slots=True)
class FetchPosition:
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: memoryview | None  # a view into the response frame, None for a null records field


def encode_replica_fetch(correlation_id: int, client_id: str, *, replica_id: int, max_wait_ms: int, min_bytes: int,
                         max_bytes: int, topics: dict[str, list[FetchPosition]], session_id: int = 0,
                         session_epoch: int = -1, forgotten: dict[str, list[int]] | None = None) -> bytes:
    """A whole Fetch v12 request frame (size prefix included), as a follower sends it: in the fetch
    session given (KIP-227; by default none), no rack, read-uncommitted, last fetched epoch unknown (-1)."""
    client = client_id.encode()
    out = bytearray(_INT32.size)  # the size prefix, filled in last
    out += _REQUEST_HEADER.pack(ApiKey.FETCH, FETCH_VERSION, correlation_id, len(client))
    out += client
    out += b"\x00"  # header tagged fields
    out += _REQUEST_FIXED.pack(replica_id, max_wait_ms, min_bytes, max_bytes, 0, session_id, session_epoch)
    write_unsigned_varint(out, len(topics) + 1)
    for name, positions in topics.items():
        encoded = name.encode()
        write_unsigned_varint(out, len(encoded) + 1)
        out += encoded
        write_unsigned_varint(out, len(positions) + 1)
        for p in positions:
            out += _PARTITION.pack(p.partition, p.current_leader_epoch, p.fetch_offset, -1, p.log_start_offset,
                                   p.partition_max_bytes)
            out += b"\x00"  # partition tagged fields
        out += b"\x00"  # topic tagged fields
    forgotten = forgotten or {}
    write_unsigned_varint(out, len(forgotten) + 1)
    for name, indexes in forgotten.items():
        encoded = name.encode()
        write_unsigned_varint(out, len(encoded) + 1)
        out += encoded
        write_unsigned_varint(out, len(indexes) + 1)
        for index in indexes:
            out += _INT32.pack(index)
        out += b"\x00"  # forgotten topic tagged fields
    out += b"\x01\x00"  # rack id: ""; request tagged fields
    _INT32.pack_into(out, 0, len(out) - _INT32.size)
    return bytes(out)


class _Reader:
    __slots__ = ("frame", "position")

    def __init__(self, frame: bytes | memoryview, position: int) -> None:
        self.frame = frame
        self.position = position

    def need(self, count: int) -> int:
        start = self.position
        if count < 0 or start + count > len(self.frame):
            raise ReplicaFetchFormatError(f"{count} bytes wanted at {start}, frame has {len(self.frame)}")
        self.position = start + count
        return start

    def uvarint(self) -> int:
        try:
            value, self.position = decode_unsigned_varint(self.frame, self.position)
        except CorruptVarintError as exc:
            raise ReplicaFetchFormatError(str(exc)) from None
        return value

    def unpack(self, layout: struct.Struct) -> tuple:
        return layout.unpack_from(self.frame, self.need(layout.size))

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.need(self.uvarint())

    def compact_string(self) -> str:
        length = self.uvarint() - 1
        if length < 0:
            raise ReplicaFetchFormatError("null topic name")
        start = self.need(length)
        try:
            return bytes(self.frame[start:start + length]).decode()
        except UnicodeDecodeError as exc:
            raise ReplicaFetchFormatError(f"topic name is not UTF-8: {exc}") from None


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """A parsed Fetch v12 response: its top-level fields and the partitions it names."""

    correlation_id: int
    error_code: int
    session_id: int
    partitions: list[FetchedPartition]


def parse_fetch_response(frame: bytes | memoryview) -> FetchAnswer:
    """A Fetch v12 response frame (size prefix excluded), parsed. Each partition's records are a
    memoryview into ``frame``."""
    view = memoryview(frame)
    reader = _Reader(view, 0)
    correlation_id = _INT32.unpack_from(view, reader.need(4))[0]
    reader.skip_tagged_fields()  # response header v1
    _, error_code, session_id = reader.unpack(_RESPONSE_FIXED)
    partitions: list[FetchedPartition] = []
    for _ in range(reader.uvarint() - 1):
        topic = reader.compact_string()
        for _ in range(reader.uvarint() - 1):
            index, code, high_watermark, _, log_start = reader.unpack(_PARTITION_DATA)
            aborted = reader.uvarint() - 1
            for _ in range(max(aborted, 0)):
                reader.need(16)  # producer id, first offset
                reader.skip_tagged_fields()
            reader.need(4)  # preferred read replica
            length = reader.uvarint() - 1
            records = None
            if length >= 0:
                start = reader.need(length)
                records = view[start:start + length]
            reader.skip_tagged_fields()
            partitions.append(FetchedPartition(topic, index, code, high_watermark, log_start, records))
        reader.skip_tagged_fields()
    reader.skip_tagged_fields()
    return FetchAnswer(correlation_id, error_code, session_id, partitions)
