"""Kafka request/response framing, sans-I/O.

A frame is a big-endian int32 size followed by that many bytes. `FrameDecoder` is fed whatever the
socket gave and hands back whole frames; `decode_request` turns a frame into (header, kio request);
`encode_response` turns a kio response into the list of parts to send, where a Fetch partition's
records may be a file slice that the connection sends with `os.sendfile` instead of copying.
"""

from __future__ import annotations

import io
import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from .api_keys import ApiKey
from .bounds import LengthOutOfBoundsError, check_lengths
from .messages import SUPPORTED_VERSIONS, request_class, response_class

_SIZE = struct.Struct(">i")
_API_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
MAX_SPARE_FRAME_BYTES = 16 * 1024 * 1024  # a connection keeps no larger buffer between frames


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


class RequestMemoryPool:
    """The broker-wide budget of request buffer bytes (Kafka's `queued.max.request.bytes` memory pool).

    Every connection's FrameDecoder takes from it the buffers of frames larger than its staging
    buffer: the one being received (which grows with the bytes that arrive), the one handed out
    until the connection has processed it, and the spare it keeps for its next large frame. A take
    that would go over the budget is refused, and the connection waits before reading more (the
    listener wakes it when `release` is called: `on_release`). Spares are a cache: a take that would
    go over first evicts other connections' spares. One holder at a time may go over the budget (it
    holds the overdraft until its frame is processed), so a request larger than the whole budget, up
    to `socket.request.max.bytes`, still proceeds, and partly received requests that hold the whole
    budget cannot wait on each other for ever: queued bytes stay below capacity plus one request.
    A negative capacity is unlimited (Kafka's default, -1).

    Sans-I/O and not thread-safe: the listener's event loop is its only caller.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.on_release: Callable[[], None] | None = None
        self._overdraft: object | None = None
        self._spares: dict[int, FrameDecoder] = {}  # decoders holding a spare, oldest first

    @property
    def unlimited(self) -> bool:
        return self.capacity < 0

    def try_take(self, count: int, holder: object) -> bool:
        """Take ``count`` bytes for ``holder`` if the budget (or the overdraft) allows; False otherwise."""
        if not self.unlimited and self.used + count > self.capacity:
            for decoder in list(self._spares.values()):
                if self.used + count <= self.capacity:
                    break
                if decoder is not holder:
                    decoder.drop_spare()
            if self.used + count > self.capacity:
                if self._overdraft not in (None, holder):
                    return False
                self._overdraft = holder
        self.used += count
        return True

    def release(self, count: int) -> None:
        self.used -= count
        if count and self.on_release is not None:
            self.on_release()

    def end_overdraft(self, holder: object) -> None:
        if self._overdraft is holder:
            self._overdraft = None
            if self.on_release is not None:
                self.on_release()

    def keep_spare(self, decoder: FrameDecoder) -> None:
        self._spares[id(decoder)] = decoder

    def forget_spare(self, decoder: FrameDecoder) -> None:
        self._spares.pop(id(decoder), None)


class FrameDecoder:
    """Takes in the received byte stream and hands back whole frames (without the size prefix).

    The connection receives in place: `receive_buffer()` says where its next recv should land and
    `received(count)` takes what arrived. A size prefix outside [min_frame_bytes, max_frame_bytes]
    raises FramingError as soon as its four bytes are in, before any of the frame is read. Small
    frames gather in a staging buffer and are copied out once each. A frame larger than
    ``large_frame_bytes`` (a produce request, a fetch response) gets a buffer of its own, and the
    rest of it is received straight into that buffer, which is handed back as a read-only
    memoryview: its bytes are not copied again. That buffer is never larger than twice the bytes
    received so far (at least ``large_frame_bytes``, at most the declared size): it grows
    geometrically as bytes arrive, so a size prefix alone allocates nothing large, and each byte is
    copied at most about once more on the way. The memoryview is valid until the next large frame
    starts to arrive (or `frames_processed()`), which releases it and keeps its buffer as the spare
    for the next large frame (a fresh, zeroed buffer per frame cost the broker about a tenth of its
    CPU under replicated load); a caller that holds on to the frame gets a ValueError, never bytes
    of a later frame, and a buffer still referenced through a slice of the frame is left to that
    slice's holder while the next frame takes a new one. (Not at the next `receive_buffer()`: an
    event loop may ask for the buffer again as soon as a frame is complete, before its reader has
    run.) `feed(data)` does the same for bytes that are already in memory.

    With a `RequestMemoryPool`, large buffers are taken from it; when it refuses, `ready()` is False
    and the caller must wait (see the pool) before asking for `receive_buffer()`. Without one,
    `ready()` is always True.

    Not thread-safe: one decoder per connection, fed by that connection's reader.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, *, staging_bytes: int = 256 * 1024,
                 large_frame_bytes: int = 64 * 1024, min_frame_bytes: int = 8,
                 pool: RequestMemoryPool | None = None) -> None:
        if not 0 < large_frame_bytes <= staging_bytes // 2:
            raise ValueError("large_frame_bytes must be positive and at most half of staging_bytes")
        self._min = min_frame_bytes
        # Adjustable between frames: a SASL connection reads small frames only until it authenticates.
        self.max_frame_bytes = max_frame_bytes
        self._large_frame_bytes = large_frame_bytes
        self._pool = pool
        # Anonymous memory: its pages become resident only as bytes land in them, so an idle or
        # stalled connection holds a page or two of it, not all of it.
        self._staging = mmap.mmap(-1, staging_bytes)
        self._start = 0  # staging[_start:_end] is received and not yet handed back
        self._end = 0
        self._large: bytearray | None = None  # a large frame being received into its own buffer
        self._large_size = 0  # its declared size; set while its start still waits in staging too
        self._large_filled = 0
        self._handed_out: memoryview | None = None  # the last large frame given to the caller
        self._held = 0  # bytes of the buffer being filled or handed out, taken from the pool
        self._spare: bytearray | None = None  # a released large buffer, for the next large frame

    def _take(self, count: int) -> bool:
        return self._pool is None or self._pool.try_take(count, self)

    def _give_back(self, count: int) -> None:
        if self._pool is not None:
            self._pool.release(count)

    def ready(self) -> bool:
        """Whether `receive_buffer()` can be given now: False while the pool refuses the memory it needs."""
        if self._large is None:
            return self._large_size == 0 or self._start_large()
        if self._large_filled < min(len(self._large), self._large_size):
            return True
        return self._grow()

    def receive_buffer(self) -> memoryview:
        """Where the next received bytes go (never past the end of a large frame being filled)."""
        if not self.ready():
            raise RuntimeError("receive_buffer() while the memory pool refuses this frame's buffer")
        if self._large is not None:
            return memoryview(self._large)[self._large_filled:min(len(self._large), self._large_size)]
        return memoryview(self._staging)[self._end:]

    def _start_large(self) -> bool:
        """Move the large frame whose start waits in staging into a buffer of its own."""
        size, available = self._large_size, self._end - self._start - 4
        wanted = min(size, max(2 * available, self._large_frame_bytes))
        if self._handed_out is not None:
            self._reclaim()
        spare = self._spare
        if spare is not None and wanted <= len(spare) <= 4 * size and self._unexported(spare):
            self._use_spare()
            buffer = spare
        else:
            self.drop_spare()
            if not self._take(wanted):
                return False
            self._held = wanted
            buffer = bytearray(wanted)
        buffer[:available] = memoryview(self._staging)[self._start + 4:self._end]
        self._large, self._large_filled = buffer, available
        self._start = self._end = 0
        return True

    def _grow(self) -> bool:
        old = self._large
        size = min(self._large_size, 2 * len(old))
        if not self._take(size):
            return False
        grown = bytearray(size)
        grown[:self._large_filled] = memoryview(old)[:self._large_filled]
        self._large = grown
        self._give_back(self._held)
        self._held = size
        return True

    def _use_spare(self) -> None:
        self._held, self._spare = len(self._spare), None
        if self._pool is not None:
            self._pool.forget_spare(self)

    def drop_spare(self) -> None:
        """Let the spare buffer go (the pool evicts spares this way when it needs their bytes)."""
        if self._spare is not None:
            self._give_back(len(self._spare))
            self._spare = None
            if self._pool is not None:
                self._pool.forget_spare(self)

    def _reclaim(self) -> None:
        """The handed-out frame is released; its buffer becomes the spare (if not too large to keep)."""
        frame, self._handed_out = self._handed_out, None
        buffer = frame.obj  # the bytearray the frame is a view of
        held, self._held = self._held, 0
        try:
            frame.release()
        except BufferError:  # something took a buffer from the frame itself: the buffer is theirs
            self._give_back(held)
            return
        self.drop_spare()
        if len(buffer) > MAX_SPARE_FRAME_BYTES:
            self._give_back(held)
            return
        self._spare = buffer
        if self._pool is not None:
            self._pool.keep_spare(self)

    @staticmethod
    def _unexported(buffer: bytearray) -> bool:
        """Whether no view of ``buffer`` is left: resizing a bytearray that any view still exports
        raises BufferError, and shrinking by one byte and growing back moves no memory. So a slice of
        an earlier frame kept by its holder leaves the buffer to them (the spare is dropped)."""
        try:
            buffer.append(buffer.pop())
        except BufferError:
            return False
        return True

    def frames_processed(self) -> None:
        """The caller is done with the frames handed back so far: a large frame's buffer becomes the spare."""
        if self._handed_out is not None:
            self._reclaim()
        if self._pool is not None and self._large is None:
            self._pool.end_overdraft(self)

    def close(self) -> None:
        """Give every buffer's bytes back to the pool (the connection is gone)."""
        self._give_back(self._held)
        self._held = 0
        self.drop_spare()
        self._large = self._handed_out = None
        self._large_size = 0
        if self._pool is not None:
            self._pool.end_overdraft(self)

    def received(self, count: int) -> list[bytes | memoryview]:
        """``count`` bytes arrived in the last `receive_buffer()`; the frames they complete, in order.

        Raises FramingError for a size prefix outside [min_frame_bytes, max_frame_bytes] (a request
        is at least 8 bytes: its api key, version and correlation id).
        """
        if self._large is not None:
            self._large_filled += count
            if self._large_filled < self._large_size:
                return []
            frame = memoryview(self._large)[:self._large_size].toreadonly()
            self._handed_out = frame
            self._large = None
            self._large_size = 0
            return [frame]
        self._end += count
        frames: list[bytes | memoryview] = []
        staging, end = self._staging, self._end
        view = memoryview(staging)
        position = self._start
        while end - position >= 4:
            (size,) = _SIZE.unpack_from(staging, position)
            if size < self._min or size > self.max_frame_bytes:
                raise FramingError(f"frame size {size} outside [{self._min}, {self.max_frame_bytes}]")
            available = end - position - 4
            if available >= size:
                frames.append(view[position + 4 : position + 4 + size].tobytes())
                position += 4 + size
                continue
            if size > self._large_frame_bytes:
                # Its start stays in staging until its own buffer is granted (now, unless the pool refuses).
                self._start, self._large_size = position, size
                self._start_large()
                return frames
            break
        if position == end:
            self._start = self._end = 0
        else:
            self._start = position
            if len(staging) - end < self._large_frame_bytes + 4:
                # Move the unfinished small frame to the front: it fits, and so does the rest of it.
                left = end - position
                staging[:left] = view[position:end].tobytes()  # the two ranges may overlap
                self._start, self._end = 0, left
        return frames

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Take ``data`` as if it had been received; the frames it completes, as bytes."""
        frames: list[bytes] = []
        data = memoryview(data).cast("B")
        while data:
            target = self.receive_buffer()
            count = min(len(target), len(data))
            target[:count] = data[:count]
            data = data[count:]
            frames += (bytes(frame) for frame in self.received(count))
        return frames

    @property
    def buffered(self) -> int:
        """Bytes received (size prefixes included) that no frame handed back yet holds."""
        if self._large is not None:
            return 4 + self._large_filled
        return self._end - self._start

    @property
    def allocated(self) -> int:
        """Bytes of large-frame buffers held: the one being filled or handed out, and the spare."""
        buffers = (self._large, self._handed_out.obj if self._handed_out is not None else None, self._spare)
        return sum(len(buffer) for buffer in buffers if buffer is not None)


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    size: int
    # Who sent it, as the listener knows them: the authenticated principal ("User:alice",
    # "User:ANONYMOUS" before or without authentication) and the client's address.
    principal: str = "User:ANONYMOUS"
    client_host: str = ""
    # The listener it arrived on ("" for a broker with the single default listener): Metadata and
    # FindCoordinator answer with that listener's endpoints, as Kafka does.
    listener_name: str = ""

    def without_body(self) -> Request:
        """This request's header (what a response is encoded from) without the decoded body."""
        return Request(self.api_key, self.api_version, self.correlation_id, self.client_id, None, self.size,
                       self.principal, self.client_host, self.listener_name)


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the first 8 bytes, common to every header version."""
    return _API_KEY_VERSION_CORRELATION.unpack_from(frame, 0)


def decode_request(frame: bytes | memoryview, principal: str = "User:ANONYMOUS", client_host: str = "",
                   listener_name: str = "") -> Request:
    """The request in ``frame``, stamped with who sent it (see `Request`)."""
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
    return Request(api_key, api_version, correlation_id, header.client_id, body, len(frame), principal, client_host,
                   listener_name)


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
    if api_key == ApiKey.API_VERSIONS:
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
