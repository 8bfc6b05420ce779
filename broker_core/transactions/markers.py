"""Writing a transaction's COMMIT or ABORT markers to the leaders of its partitions (WriteTxnMarkers).

The coordinator sends one WriteTxnMarkers request (API 27) per leader, naming every partition of the
transaction that broker leads, with the producer id, the epoch the transaction ends under and the
coordinator epoch (the lease's). A partition is done when its leader answers NONE. A partition whose
leader moved, is down or is still loading is sent again, after ``floe.transaction.marker.retry.backoff.ms``
and a metadata check, to whichever broker leads it then: markers are idempotent on the leader, so a
resend is harmless. A partition whose topic was deleted needs no marker. `write` returns only when
every partition is done, or raises `MarkersFencedError` when a leader says a newer coordinator
epoch ended the transaction (this coordinator lost the transactional id).

Called from the event loop; one `MarkerWriter` per broker, its connections shared by all transactions.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker_core.client.connection import BrokerConnection
from broker_core.client.errors import BrokerConnectionError, ClientError
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.messages import build_entity, request_class

from .errors import TransactionError
from .state import TopicPartition

if TYPE_CHECKING:
    from broker_core.server.context import BrokerContext

log = logging.getLogger(__name__)

MARKERS_VERSION = 1


class MarkersFencedError(TransactionError):
    """A partition leader refused markers because a newer coordinator epoch wrote to it."""


class MarkerWriter:
    """Sends transaction markers to partition leaders until every partition has written them."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context
        self.backoff_s = context.config.get_int("floe.transaction.marker.retry.backoff.ms") / 1000
        self.request_timeout_s = context.config.get_int("request.timeout.ms") / 1000
        self._connections: dict[int, BrokerConnection] = {}

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

    async def write(self, partitions: frozenset[TopicPartition], producer_id: int, producer_epoch: int,
                    commit: bool, coordinator_epoch: int) -> None:
        remaining = set(partitions)
        while remaining:
            image = self.context.image
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in list(remaining):
                if tp.topic not in image.topics:
                    remaining.discard(tp)  # deleted: nothing left to mark
                    continue
                state = image.partitions.get((tp.topic, tp.partition))
                leader = state.leader if state is not None else -1
                by_leader.setdefault(leader, []).append(tp)
            results = await asyncio.gather(*(
                self._send(leader, tps, producer_id, producer_epoch, commit, coordinator_epoch)
                for leader, tps in by_leader.items() if leader >= 0))
            for written in results:
                remaining -= written
            if remaining:
                self.context.recheck_metadata_soon(self.backoff_s)
                await asyncio.sleep(self.backoff_s)

    async def write_to(self, broker_id: int, tp: TopicPartition, producer_id: int, producer_epoch: int,
                       commit: bool, coordinator_epoch: int) -> bool:
        """One marker to one broker (a group's marker partition at its coordinator); True once written."""
        return bool(await self._send(broker_id, [tp], producer_id, producer_epoch, commit, coordinator_epoch))

    async def _send(self, leader: int, partitions: list[TopicPartition], producer_id: int, producer_epoch: int,
                    commit: bool, coordinator_epoch: int) -> set[TopicPartition]:
        """The partitions ``leader`` wrote the marker to."""
        topics: dict[str, list[int]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        request = build_entity(request_class(ApiKey.WRITE_TXN_MARKERS, MARKERS_VERSION), {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
            "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": name, "partition_indexes": sorted(indexes)} for name, indexes in topics.items()],
        }]})
        try:
            connection = await self._connection(leader)
            response = await connection.send(ApiKey.WRITE_TXN_MARKERS, request, timeout_s=self.request_timeout_s)
        except (ClientError, OSError) as exc:
            log.warning("transaction markers for producer %d to broker %d not sent: %s", producer_id, leader, exc)
            await self._drop(leader)
            return set()
        written = set()
        for marker in response.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition_index)
                    if p.error_code == ErrorCode.none:
                        written.add(tp)
                    elif p.error_code == ErrorCode.transaction_coordinator_fenced:
                        raise MarkersFencedError(f"{tp.key()}: a newer coordinator than epoch {coordinator_epoch} "
                                                 f"ended producer {producer_id}'s transaction")
                    else:
                        log.info("marker for producer %d on %s not written by broker %d: %s; retrying",
                                 producer_id, tp.key(), leader, p.error_code.name)
        return written

    async def _connection(self, broker_id: int) -> BrokerConnection:
        connection = self._connections.get(broker_id)
        if connection is not None and connection.connected:
            return connection
        registration = self.context.image.brokers.get(broker_id)
        if registration is None:
            raise BrokerConnectionError(f"broker {broker_id} is not registered")
        connection = BrokerConnection(registration.host, registration.port, node_id=broker_id,
                                      client_id=f"floe-txn-coordinator-{self.context.config.broker_id}",
                                      request_timeout_s=self.request_timeout_s,
                                      security=self.context.config.inter_broker_security)
        await connection.connect()
        self._connections[broker_id] = connection
        return connection

    async def _drop(self, broker_id: int) -> None:
        connection = self._connections.pop(broker_id, None)
        if connection is not None:
            await connection.close()
