"""Connections a broker keeps to its peers, one per broker id, opened on first use.

A broker's services that ask other brokers over the Kafka protocol (the group coordinator's lag
sampler asking leaders for their log end, the partition leader asking a transaction coordinator to
verify a transaction) share this shape: look the peer up in the current metadata, reuse an open
connection, drop one whose request failed so the next use reconnects, close them all on stop.
Thread-safety: everything here belongs to the broker's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .connection import BrokerConnection
from .security import ClientSecurity

# (host, port) of a broker id in the current metadata, or None when the metadata has no such broker.
Locate = Callable[[int], "tuple[str, int] | None"]


class PeerConnections:
    """One `BrokerConnection` per peer broker id, named ``client_id`` on the wire."""

    def __init__(self, client_id: str, locate: Locate, request_timeout_s: float, security: ClientSecurity) -> None:
        self.client_id = client_id
        self.locate = locate
        self.request_timeout_s = request_timeout_s
        self.security = security
        self._connections: dict[int, BrokerConnection] = {}

    @classmethod
    def of_broker(cls, context: Any, purpose: str) -> PeerConnections:
        """The peers of the broker whose services see it as ``context`` (a BrokerContext: its config
        and current metadata image), named ``floe-<purpose>-<broker id>`` on the wire."""
        config = context.config

        def locate(node_id: int) -> tuple[str, int] | None:
            broker = context.image.brokers.get(node_id)
            return None if broker is None else (broker.host, broker.port)

        return cls(f"floe-{purpose}-{config.broker_id}", locate, config.get_int("request.timeout.ms") / 1000,
                   config.inter_broker_security)

    async def get(self, node_id: int) -> BrokerConnection | None:
        """An open connection to ``node_id``, or None when the metadata does not know that broker."""
        connection = self._connections.get(node_id)
        if connection is not None and connection.connected:
            return connection
        address = self.locate(node_id)
        if address is None:
            return None
        connection = BrokerConnection(address[0], address[1], client_id=self.client_id,
                                      request_timeout_s=self.request_timeout_s, node_id=node_id,
                                      security=self.security)
        await connection.connect()
        self._connections[node_id] = connection
        return connection

    def drop(self, node_id: int) -> None:
        """Forget the connection to ``node_id`` (closed in the background): the next `get` reconnects."""
        connection = self._connections.pop(node_id, None)
        if connection is not None:
            asyncio.ensure_future(connection.close())

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)
