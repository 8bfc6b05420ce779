"""`BlockingConnection`: a `BrokerConnection` for code that blocks instead of awaiting.

The group admin behind `floe groups`, the tests' raw group members and the group benchmark send one
request and wait for its answer, from plain threads. Rather than a second socket client, each
`BlockingConnection` owns an asyncio event loop (an `asyncio.Runner`) and runs its
`BrokerConnection` on it one call at a time: the loop turns only while a call is in progress, and
responses that arrive in between wait in the socket. Errors are the client's (`ClientError` and its
subclasses), timeouts the connection's ``request_timeout_s`` for the connect and for each request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from broker_core.protocol.messages import build_entity, request_class

from .connection import BrokerConnection
from .security import PLAINTEXT, ClientSecurity


class BlockingConnection:
    """One connection to one broker whose calls block until the broker answers.

    Role: a blocking facade over `BrokerConnection`, with the same version negotiation, framing
    and errors. Opened by the constructor (BrokerConnectionError if that fails); `close` closes the
    connection and its event loop.
    Callers: one thread at a time, any thread that is not itself running an event loop (there,
    await a `BrokerConnection` instead).
    """

    def __init__(self, host: str, port: int, *, client_id: str = "floe-client",
                 request_timeout_s: float = 30.0, security: ClientSecurity = PLAINTEXT) -> None:
        self.host = host
        self.port = port
        # With a loop factory the runner leaves the calling thread's current event loop alone.
        self._runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
        self._closed = False
        self._connection = BrokerConnection(host, port, client_id=client_id, request_timeout_s=request_timeout_s,
                                            security=security)
        try:
            self._runner.run(self._connection.connect())
        except BaseException:
            self._runner.close()
            raise

    def __repr__(self) -> str:
        return f"BlockingConnection({self.host}:{self.port})"

    def request(self, api_key: int, request: Mapping[str, Any], version: int | None = None) -> Any:
        """Send one request, a dict of its fields, and return the decoded kio response: at ``version``
        when given (the broker must serve it), else at the version negotiated for ``api_key``."""
        if version is not None:
            request = build_entity(request_class(api_key, version), request)
        return self._runner.run(self._connection.send(api_key, request))

    def close(self) -> None:
        """Close the connection and its event loop; closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self._runner.run(self._connection.close())
        finally:
            self._runner.close()
