"""The broker's metrics endpoint: ``GET /metrics`` over HTTP on ``metrics.port``, served on the event loop.

It runs on the broker's event loop rather than in prometheus-client's HTTP server thread because the
collectors read state that only the loop changes (replicas, groups, connections): collected on the
loop, a scrape sees a consistent picture and needs no locks. Only the collection runs there; the
text (prometheus-client's `generate_latest`, most of a scrape's cost: about 24 ms of CPU for 2,000
lines on the bench machine) is written in a worker thread from the collected families, so the loop
is not held for a whole scrape. This module only speaks enough HTTP/1.1 to answer one GET per
connection. Anything other than GET /metrics (or /) is answered 404 or 405; a request
line or header block larger than MAX_HEADER_BYTES, or one not sent within READ_TIMEOUT_S, closes
the connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)
MAX_HEADER_BYTES = 16 * 1024
READ_TIMEOUT_S = 10.0


class _Collected:
    """Families collected earlier, in the shape `generate_latest` reads."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


class MetricsEndpoint:
    """An HTTP server answering ``GET /metrics`` with the families ``collect()`` gives."""

    def __init__(self, collect: Callable[[], list[Metric]], host: str, port: int) -> None:
        self.collect = collect
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen (port 0: any free port); the bound port."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_HEADER_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
            path = rest.split(" ", 1)[0].split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                status, body, content_type = "405 Method Not Allowed", b"only GET\n", "text/plain"
            elif path not in ("/metrics", "/"):
                status, body, content_type = "404 Not Found", b"see /metrics\n", "text/plain"
            else:
                body = await asyncio.to_thread(generate_latest, _Collected(self.collect()))
                status, content_type = "200 OK", CONTENT_TYPE_LATEST
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n".encode("latin-1"))
            if method != "HEAD":
                writer.write(body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError, ValueError):
            pass  # a client that sent no whole request, or too large a one: closed below
        except Exception:
            log.exception("metrics scrape failed")
        finally:
            writer.close()
