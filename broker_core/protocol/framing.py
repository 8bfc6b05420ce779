"""Kafka request/response framing, sans-I/O.

A frame is a big-endian int32 size followed by that many bytes. `FrameDecoder` is fed whatever the
socket gave and hands back whole frames; `decode_request` turns a frame into (header, kio request);
`encode_response` turns a kio response into the list of parts to send, where a Fetch partition's
records may be a file slice that the connection sends with `os.sendfile` instead of copying.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from .bounds import LengthOutOfBoundsError, check_lengths
from .messages import API_VERSIONS_KEY, SUPPORTED_VERSIONS, request_class, response_class

_SIZE = struct.Struct(">i")
_API_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes


class FramingError(Exception):
    """The byte stream is not Kafka framing; the connection that sent it must be closed."""


class InvalidRequestError(Exception):
    """A whole frame arrived but its contents cannot be decoded as the request it claims to be."""

    def __init__(self, message: str, *, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class UnsupportedVersionError(InvalidRequestError):
    """The API key is unknown to Floe or the version is outside the range Floe serves."""


class FrameDecoder:
    """Accumulates received bytes and yields whole frames (without the size prefix).

    Not thread-safe: one decoder per connection, fed by that connection's reader.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_frame_bytes

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        self._buffer += data
        frames: list[bytes] = []
        position = 0
        buffer = self._buffer
        while len(buffer) - position >= 4:
            (size,) = _SIZE.unpack_from(buffer, position)
            if size < 8 or size > self._max:
                raise FramingError(f"frame size {size} outside [8, {self._max}]")
            if len(buffer) - position - 4 < size:
                break
            frames.append(bytes(buffer[position + 4 : position + 4 + size]))
            position += 4 + size
        if position:
            del buffer[:position]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buffer)


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    size: int


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the first 8 bytes, common to every header version."""
    return _API_KEY_VERSION_CORRELATION.unpack_from(frame, 0)


def decode_request(frame: bytes) -> Request:
    api_key, api_version, correlation_id = peek_header(frame)
    versions = SUPPORTED_VERSIONS.get(api_key)
    if versions is None or not versions[0] <= api_version <= versions[1]:
        raise UnsupportedVersionError(
            f"api key {api_key} version {api_version} is not supported",
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
        )
    cls = request_class(api_key, api_version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    try:
        # kio reserves memory for declared array lengths before reading them; a frame declaring
        # more than it holds must never reach it (the reservation failing aborts the process).
        check_lengths(header_cls, cls, frame)
        header, header_size = entity_reader(header_cls)(frame, 0)
        body, _ = entity_reader(cls)(frame, header_size)
    # kio raises KeyError("Unknown tagged field tag: N") for a tagged field its schema lacks.
    except (SerialError, LengthOutOfBoundsError, ValueError, TypeError, UnicodeDecodeError, OverflowError, KeyError) as exc:
        raise InvalidRequestError(
            f"cannot decode {cls.__name__} v{api_version}: {exc}",
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
        ) from exc
    # Bytes after the body are ignored, as Kafka's own request parser does: librdkafka 2.x sends a few
    # extra bytes after some flexible-version bodies (Metadata v12) and Kafka brokers accept them.
    return Request(api_key, api_version, correlation_id, header.client_id, body, len(frame))


class SendableSlice(Protocol):
    """A region of an open file: what `os.sendfile` needs."""

    fd: int
    position: int
    length: int


class FileRecords(bytes):
    """Stands in for a records field in a response entity; encodes as a hole that a file slice fills.

    It is an empty bytes object whose len() is the slice's length, so kio writes the right length
    prefix, and `_SplicingBuffer` recognises it when kio writes the value itself.
    """

    def __new__(cls, file_slice: SendableSlice) -> FileRecords:
        obj = super().__new__(cls, b"")
        obj.file_slice = file_slice
        return obj

    def __len__(self) -> int:
        return self.file_slice.length


class _SplicingBuffer:
    """A write-only buffer for kio writers that keeps file slices apart from the bytes around them."""

    def __init__(self) -> None:
        self.parts: list[bytes | SendableSlice] = []
        self._current = io.BytesIO()

    def write(self, data: bytes) -> int:
        if type(data) is FileRecords:
            self._close_current()
            self.parts.append(data.file_slice)
            return len(data)
        return self._current.write(data)

    def _close_current(self) -> None:
        chunk = self._current.getvalue()
        if chunk:
            self.parts.append(chunk)
        self._current = io.BytesIO()

    def finish(self) -> list[bytes | SendableSlice]:
        self._close_current()
        return self.parts


def response_header_flexible(api_key: int, api_version: int) -> bool:
    # ApiVersions responses always use header v0 so that a client can read them whatever it asked.
    if api_key == API_VERSIONS_KEY:
        return False
    return bool(response_class(api_key, api_version).__flexible__)


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> list[bytes | SendableSlice]:
    """Size prefix, response header and body, as parts; file slices appear as their own parts."""
    buffer = _SplicingBuffer()
    if response_header_flexible(api_key, api_version):
        entity_writer(ResponseHeaderV1)(buffer, ResponseHeaderV1(correlation_id=correlation_id))
    else:
        entity_writer(ResponseHeaderV0)(buffer, ResponseHeaderV0(correlation_id=correlation_id))
    entity_writer(type(response))(buffer, response)
    parts = buffer.finish()
    size = sum(len(p) if isinstance(p, bytes) else p.length for p in parts)
    prefix = _SIZE.pack(size)
    if parts and isinstance(parts[0], bytes):
        parts[0] = prefix + parts[0]
    else:
        parts.insert(0, prefix)
    return parts


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None, request: Any) -> bytes:
    """A whole request frame, size prefix included (used by Floe's own client and by tests)."""
    cls = request_class(api_key, api_version)
    buffer = io.BytesIO()
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    entity_writer(header_cls)(
        buffer,
        header_cls(
            request_api_key=api_key,
            request_api_version=api_version,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    entity_writer(cls)(buffer, request)
    body = buffer.getvalue()
    return _SIZE.pack(len(body)) + body


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation_id, kio response) from a frame without its size prefix."""
    header_cls = ResponseHeaderV1 if response_header_flexible(api_key, api_version) else ResponseHeaderV0
    header, header_size = entity_reader(header_cls)(frame, 0)
    body, _ = entity_reader(response_class(api_key, api_version))(frame, header_size)
    return header.correlation_id, body
