"""The Kafka listener: accepts connections and runs each one's request/response cycle.

Connections use raw non-blocking sockets rather than asyncio transports so that Fetch responses can
hand file slices to `os.sendfile` (zero copy) on any event loop, uvloop included. A connection
answers in the order requests were sent and appends its produce requests in that order. As in Kafka,
a request other than Produce is handled alone, once every earlier response has been written. Unlike
Kafka, a Produce request is appended as soon as it is read, and while it waits for acks=all the
connection reads, and appends, the produce requests behind it (up to MAX_PIPELINED_PRODUCES): with
acks=all a producer's next batch would otherwise wait a whole replication round trip before it is
even read. A waiting request keeps only its header and the response it will send: its records are
on disk already.

A frame that is not Kafka framing, or a request that cannot be decoded, closes that connection only;
a well-formed request for an unsupported API version is answered (ApiVersions) or refused by closing.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import (
    FrameDecoder,
    FramingError,
    InvalidRequestError,
    Request,
    UnsupportedVersionError,
    decode_request,
    encode_response,
)
from broker_core.protocol.messages import api_name

if TYPE_CHECKING:
    from .handlers import RequestHandlers

log = logging.getLogger(__name__)
RECV_BYTES = 256 * 1024
MAX_PIPELINED_PRODUCES = 16


async def _wait_writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    future = loop.create_future()
    fd = sock.fileno()
    loop.add_writer(fd, lambda: future.done() or future.set_result(None))
    try:
        await future
    finally:
        loop.remove_writer(fd)


async def sendfile_all(loop: asyncio.AbstractEventLoop, sock: socket.socket, fd: int, offset: int, count: int) -> None:
    """Send ``count`` bytes of ``fd`` from ``offset`` with os.sendfile, waiting whenever the socket is full."""
    while count > 0:
        try:
            sent = os.sendfile(sock.fileno(), fd, offset, count)
        except BlockingIOError:
            await _wait_writable(loop, sock)
            continue
        if sent == 0:
            raise ConnectionError(f"sendfile made no progress with {count} bytes left (file shorter than expected)")
        offset += sent
        count -= sent


class Connection:
    def __init__(self, sock: socket.socket, handlers: RequestHandlers, max_frame_bytes: int) -> None:
        self.sock = sock
        self.handlers = handlers
        self.decoder = FrameDecoder(max_frame_bytes, staging_bytes=RECV_BYTES)
        self.loop = asyncio.get_running_loop()
        self.peer = sock.getpeername()
        # Produce responses still to be written, in request order; each yields encoded parts or None.
        self._responses: asyncio.Queue[asyncio.Future] = asyncio.Queue(MAX_PIPELINED_PRODUCES)

    async def serve(self) -> None:
        writer = asyncio.create_task(self._write_responses(asyncio.current_task()))
        try:
            while True:
                received = await self.loop.sock_recv_into(self.sock, self.decoder.receive_buffer())
                if received == 0:
                    await self._responses.join()
                    return
                for frame in self.decoder.received(received):
                    if not await self._process(frame):
                        await self._responses.join()  # answer what came before the bad request
                        return
        except FramingError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except (ConnectionError, OSError) as exc:
            if getattr(exc, "errno", None) not in (errno.ECONNRESET, errno.EPIPE, None):
                log.info("connection from %s ended: %s", self.peer, exc)
        finally:
            writer.cancel()
            while not self._responses.empty():
                self._responses.get_nowait().cancel()
            self.sock.close()

    async def _process(self, frame: bytes | memoryview) -> bool:
        """Handle one request; False when the connection must be closed."""
        try:
            request = decode_request(frame)
        except UnsupportedVersionError as exc:
            if exc.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer with v0 and our ranges so the client can pick a version.
                stub = Request(ApiKey.API_VERSIONS, 0, exc.correlation_id, None, None, len(frame))
                response = self.handlers.api_versions_response(stub, ErrorCode.unsupported_version)
                await self._responses.join()
                await self._send(encode_response(ApiKey.API_VERSIONS, 0, exc.correlation_id, response))
                return True
            log.warning("closing connection from %s: %s", self.peer, exc)
            return False
        except InvalidRequestError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            return False
        if request.api_key == ApiKey.PRODUCE:
            try:
                complete = await self.handlers.start_produce(request)
            except Exception:
                log.exception("Produce v%d from %s failed", request.api_version, self.peer)
                return False
            await self._responses.put(asyncio.ensure_future(self._encode(request.without_body(), complete())))
            return True
        await self._responses.join()
        try:
            parts = await self._encode(request, self.handlers.handle(request))
        except Exception:
            return False
        if parts is not None:
            await self._send(parts)
        return True

    async def _encode(self, request: Request, answer: Awaitable[Any]) -> list | None:
        """The encoded response to ``request`` once ``answer`` gives it; None when none is sent."""
        try:
            response = await answer
            if response is None:
                return None
            # A response the version cannot carry (e.g. a null topic name before Metadata v12) fails here.
            return encode_response(request.api_key, request.api_version, request.correlation_id, response)
        except Exception:
            log.exception("%s v%d from %s failed", api_name(request.api_key), request.api_version, self.peer)
            raise

    async def _write_responses(self, reader: asyncio.Task) -> None:
        """Write produce responses in request order; a failed one closes the connection, as a failed
        request handled alone does."""
        while True:
            pending = await self._responses.get()
            try:
                parts = await pending
                if parts is not None:
                    await self._send(parts)
            except Exception:
                reader.cancel()
                return
            self._responses.task_done()

    async def _send(self, parts: list) -> None:
        pending = bytearray()
        for part in parts:
            if isinstance(part, bytes):
                pending += part
                continue
            if pending:
                await self.loop.sock_sendall(self.sock, pending)
                pending = bytearray()
            await sendfile_all(self.loop, self.sock, part.fd, part.position, part.length)
        if pending:
            await self.loop.sock_sendall(self.sock, pending)


class KafkaListener:
    def __init__(self, handlers: RequestHandlers, host: str, port: int, max_frame_bytes: int) -> None:
        self.handlers = handlers
        self.host = host
        self.port = port
        self.max_frame_bytes = max_frame_bytes
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task | None = None
        self._connections: set[asyncio.Task] = set()

    async def start(self) -> int:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(512)
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._accept_task = asyncio.create_task(self._accept_loop())
        return self.port

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        while True:
            client, _ = await loop.sock_accept(self._sock)
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = asyncio.create_task(Connection(client, self.handlers, self.max_frame_bytes).serve())
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def stop(self) -> None:
        if self._accept_task:
            self._accept_task.cancel()
        if self._sock:
            self._sock.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
