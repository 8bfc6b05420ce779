"""TlsStream over a real socket pair: a blocking TLS client in a thread, the stream on an event loop.

The stream takes ciphertext in gulps into a buffer shared by the thread's TLS connections; these
tests check that what a client sends in many small TLS records arrives whole and in order, also
when two connections receive on one loop at once, and that the end of the stream reads as 0.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import threading
from collections.abc import Iterator

import pytest
import uvloop

from broker_core.security.certificates import create_ca, issue, keystore_pem, write_private
from broker_core.server.streams import TlsStream

RECORD_BYTES = 3800  # librdkafka's TLS records in the produce bench average about this
MESSAGE_BYTES = 3 * 1024 * 1024  # three times what one receive takes from the socket


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ssl.SSLContext, ssl.SSLContext]]:
    directory = tmp_path_factory.mktemp("tls-stream")
    ca = create_ca()
    certificate, key = issue(ca, "broker-1", ("127.0.0.1",))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(write_private(directory / "broker.pem", keystore_pem(ca, certificate, key)))
    client = ssl.create_default_context(cafile=str(write_private(directory / "ca.pem", ca.pem)))
    yield server, client


def send_in_records(client_context: ssl.SSLContext, sock: socket.socket, message: bytes,
                    received: threading.Event) -> None:
    """The client: one TLS record per RECORD_BYTES of ``message``, then the end of the stream."""
    with client_context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
        for start in range(0, len(message), RECORD_BYTES):
            tls.sendall(message[start:start + RECORD_BYTES])
        tls.shutdown(socket.SHUT_WR)
        received.wait(30)


async def receive_all(stream: TlsStream) -> tuple[bytes, int]:
    """Everything the stream yields, through a 1 MiB buffer as the request decoder's; and the last count (0)."""
    await stream.handshake(10)
    buffer = memoryview(bytearray(1024 * 1024))
    chunks = []
    while count := await stream.recv_into(buffer):
        chunks.append(bytes(buffer[:count]))
    return b"".join(chunks), count


def run_connections(contexts: tuple[ssl.SSLContext, ssl.SSLContext], messages: list[bytes]) -> list[tuple[bytes, int]]:
    server_context, client_context = contexts
    pairs = [socket.socketpair() for _ in messages]
    received = threading.Event()
    clients = [threading.Thread(target=send_in_records, args=(client_context, client, message, received))
               for (_, client), message in zip(pairs, messages, strict=True)]
    for thread in clients:
        thread.start()

    async def serve() -> list[tuple[bytes, int]]:
        loop = asyncio.get_running_loop()
        for server, _ in pairs:
            server.setblocking(False)
        return await asyncio.gather(*(receive_all(TlsStream(loop, server, server_context)) for server, _ in pairs))

    try:
        return uvloop.run(serve())
    finally:
        received.set()
        for thread in clients:
            thread.join(30)
        for server, _ in pairs:
            server.close()


def test_bytes_sent_in_many_small_records_arrive_whole_and_then_the_end_reads_as_zero(contexts) -> None:
    message = os.urandom(MESSAGE_BYTES)
    [(data, last)] = run_connections(contexts, [message])
    assert data == message
    assert last == 0


def test_two_connections_receiving_on_one_loop_do_not_mix_their_bytes(contexts) -> None:
    # Both receive through the thread's one ciphertext buffer; each must get only its own client's bytes.
    first, second = os.urandom(MESSAGE_BYTES), os.urandom(MESSAGE_BYTES // 2)
    assert run_connections(contexts, [first, second]) == [(first, 0), (second, 0)]
