"""The byte streams a listener's connection reads and writes: the socket itself, or TLS over it.

`PlainStream` is the PLAINTEXT path, unchanged: `sock_recv_into` straight into the request decoder's
buffer, `sock_sendall`, and `os.sendfile` for the file slices of Fetch responses (zero copy).
`TlsStream` runs TLS with an `ssl.SSLObject` between two `ssl.MemoryBIO`s on the same non-blocking
socket, so a connection's code is the same for both; the kernel cannot encrypt, so file slices are
read (`os.pread`, a chunk at a time) and written through TLS. Ciphertext is received in large
gulps: once the socket is readable, it is read (plain non-blocking `recv_into`, no await in between)
into one buffer shared by all TLS connections of the thread and copied into the connection's incoming
BIO, until the socket is empty or TLS_RECEIVE_BYTES were taken; then every TLS record that has
arrived is decrypted straight into the request decoder's buffer. A connection thus holds no receive
buffer of its own, and a 1 MB produce request costs a few wake-ups, not one per 64 KiB. Reading and writing may run in two tasks
of one connection (its reader and its response writer): OpenSSL allows that on one thread, and the
ciphertext both produce goes to the socket under one lock, in the order it was produced.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import threading

RECV_BYTES = 256 * 1024
FILE_CHUNK_BYTES = 1024 * 1024
# Most ciphertext taken from the socket per wake-up; it waits in the connection's BIO until decrypted.
TLS_RECEIVE_BYTES = 1024 * 1024
_RECEIVE_CHUNK_BYTES = 256 * 1024  # one recv_into into the thread's shared ciphertext buffer
_shared = threading.local()


def _ciphertext_buffer() -> memoryview:
    """The calling thread's receive buffer for ciphertext, shared by its TLS connections: each receive
    copies it into a BIO before it awaits anything, so no two connections use it at once."""
    buffer = getattr(_shared, "ciphertext", None)
    if buffer is None:
        buffer = _shared.ciphertext = memoryview(bytearray(_RECEIVE_CHUNK_BYTES))
    return buffer


async def _wait_readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    future = loop.create_future()
    fd = sock.fileno()
    loop.add_reader(fd, lambda: future.done() or future.set_result(None))
    try:
        await future
    finally:
        loop.remove_reader(fd)


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


class PlainStream:
    """A connection's socket as it is: PLAINTEXT and SASL_PLAINTEXT listeners."""

    tls = False

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self.loop = loop
        self.sock = sock

    async def recv_into(self, buffer: memoryview) -> int:
        return await self.loop.sock_recv_into(self.sock, buffer)

    async def send(self, data: bytes | bytearray | memoryview) -> None:
        await self.loop.sock_sendall(self.sock, data)

    async def send_file(self, fd: int, offset: int, count: int) -> None:
        await sendfile_all(self.loop, self.sock, fd, offset, count)


class TlsHandshakeError(ConnectionError):
    """The peer did not complete a TLS handshake: it sent something else, gave up, or took too long."""


class TlsStream:
    """TLS on a connection's socket (SSL and SASL_SSL listeners), server side; see the module docstring."""

    tls = True

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, context: ssl.SSLContext) -> None:
        self.loop = loop
        self.sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._send_lock = asyncio.Lock()

    async def handshake(self, timeout_s: float) -> None:
        """Complete the TLS handshake within ``timeout_s``; TlsHandshakeError saying why not otherwise."""
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    try:
                        self._tls.do_handshake()
                        break
                    except ssl.SSLWantReadError:
                        await self._flush()
                        if not await self._receive():
                            raise TlsHandshakeError("closed by the client during the TLS handshake") from None
                await self._flush()
        except TimeoutError:
            raise TlsHandshakeError(f"TLS handshake not complete after {timeout_s:g} s") from None
        except ssl.SSLError as exc:
            try:  # the alert saying why, so the client can tell its user
                await asyncio.wait_for(self._flush(), 1.0)
            except (OSError, TimeoutError):
                pass
            raise TlsHandshakeError(f"TLS handshake failed: {exc.reason or exc}") from None

    def peer_certificate(self) -> bytes | None:
        """The client's certificate (DER) if it showed one that the truststore vouches for."""
        return self._tls.getpeercert(binary_form=True)

    async def _receive(self) -> bool:
        """Move the ciphertext that has arrived into the incoming BIO (waiting for some if none has):
        True if any came, False at the end of the stream."""
        buffer, taken = _ciphertext_buffer(), 0
        while taken < TLS_RECEIVE_BYTES:
            try:
                received = self.sock.recv_into(buffer)
            except (BlockingIOError, InterruptedError):
                if taken:
                    return True
                await _wait_readable(self.loop, self.sock)
                continue
            if not received:
                self._incoming.write_eof()
                return taken > 0
            self._incoming.write(buffer[:received])
            taken += received
        return True

    async def _flush(self) -> None:
        if not self._outgoing.pending and not self._send_lock.locked():
            return
        async with self._send_lock:
            data = self._outgoing.read()
            if data:
                await self.loop.sock_sendall(self.sock, data)

    async def recv_into(self, buffer: memoryview) -> int:
        """Decrypt into ``buffer`` as much as has arrived (at least one byte); 0 at the end of the stream.

        One `read` yields at most one TLS record (16 KiB), so records are read until the buffer is full
        or none is left: the connection then handles as many bytes per wake-up as on a plain socket."""
        filled, size, read = 0, len(buffer), self._tls.read
        while filled < size:
            try:
                received = read(size - filled, buffer[filled:])
            except ssl.SSLWantReadError:
                if filled:
                    break
                await self._flush()
                if not await self._receive():
                    return 0
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
            except ssl.SSLError as exc:
                raise ConnectionError(f"TLS record failed: {exc.reason or exc}") from None
            if received == 0:
                break
            filled += received
        if self._outgoing.pending:
            await self._flush()
        return filled

    async def send(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            written = self._tls.write(view)
            view = view[written:]
        await self._flush()

    async def send_file(self, fd: int, offset: int, count: int) -> None:
        while count > 0:
            chunk = os.pread(fd, min(count, FILE_CHUNK_BYTES), offset)
            if not chunk:
                raise ConnectionError(f"file ended with {count} bytes still to send (shorter than expected)")
            await self.send(chunk)
            offset += len(chunk)
            count -= len(chunk)
