"""WriteProbe: one-record acks=all writes to every partition of a topic until each has been acknowledged.

What the failover measurements use (``bench/scale_bench.py``, the kill-leader fault test at 1,000
partitions): from a fault, how long until each partition accepts an acks=all write again. The probe
learns leaders as a current client does, from Metadata answers of the live brokers (each refresh
asks the next live broker, so every survivor's view is used; asked again at most every
``metadata_refresh_s`` while a partition's leader is unknown, unreachable or refused, as a client's
metadata backoff would: a Metadata answer for 1,000 partitions is costly to build, and with the
probe asking on every 50 ms turn, Metadata took about a fifth of each survivor's event loop in a
profiled failover) and from the new leader a NOT_LEADER_OR_FOLLOWER answer names (KIP-951, Produce
v10+). It sends one Produce per leader for up
to ``partitions_per_request`` partitions still waiting, each request a task of its own and each
partition in one request at a time: an acks=all write waiting (up to ``timeout_ms``) for its ISR to
shrink holds back no Metadata refresh and no write to a partition whose new leader is known.

What it times is each partition's first acknowledged write, so nothing but that partition's own
request may stand between the broker's acknowledgment and the probe's clock. A broker answers a
connection's requests in the order they came (Kafka's rule), so a request queued behind one still
waiting for its acks would be answered only when that one is, up to ``timeout_ms`` later, and a
Metadata request behind it would hold the whole probe as long. Hence each Produce in flight has a
connection of its own (a pool per broker: a connection is used again once its answer is in), and
Metadata has one per broker that carries nothing else. A request's answer still comes when its
slowest partition is acknowledged, so requests are small (``partitions_per_request``, 10 by default):
a partition that waits longer than the others holds back a few of them, not a hundred.

Every record it writes has a value of its own (``probe-<partition>-<attempt>-<broker>``), and
`acknowledged` maps each acknowledged value to its (partition, offset), so a caller can check the
records afterwards. Not thread-safe: one event loop drives it.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections import Counter
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from broker_core.protocol.api_keys import ApiKey
from broker_core.records import SimpleRecord, build_batch

from .connection import BrokerConnection
from .errors import ClientError
from .security import PLAINTEXT, ClientSecurity

LiveBrokers = Callable[[], dict[int, tuple[str, int]]]
"""The brokers to ask now: broker id -> (host, port) of each one believed alive."""


class WriteProbe:
    """acks=all writes to every partition of ``topic`` until each has been acknowledged once (see the module doc)."""

    def __init__(self, live_brokers: LiveBrokers, topic: str, partitions: int, *, security: ClientSecurity = PLAINTEXT,
                 timeout_ms: int = 5000, partitions_per_request: int = 10, metadata_refresh_s: float = 0.2,
                 pause_s: float = 0.05) -> None:
        self.live_brokers = live_brokers
        self.topic = topic
        self.security = security
        self.timeout_ms = timeout_ms
        self.partitions_per_request = partitions_per_request
        self.metadata_refresh_s = metadata_refresh_s
        self.pause_s = pause_s
        self.pending = set(range(partitions))
        self.accepted_after_s: dict[int, float] = {}
        self.acknowledged: dict[bytes, tuple[int, int]] = {}
        self.answers: Counter[str] = Counter()
        self.hinted_leaders = 0  # NOT_LEADER_OR_FOLLOWER answers naming a current leader (KIP-951)
        self.leader_of: dict[int, int] = {}
        self._metadata_due = 0.0
        self._attempt = 0
        self._refreshes = 0
        # Metadata only, one per broker; and the Produce connections not in use now, by broker.
        self._metadata_connections: dict[int, BrokerConnection] = {}
        self._idle: dict[int, list[BrokerConnection]] = {}
        self._produce_connections: set[BrokerConnection] = set()

    async def run(self, started: float, give_up_after_s: float) -> None:
        """Probe until every partition was acknowledged or ``give_up_after_s`` passed since ``started``
        (a `time.monotonic` reading: the fault's moment); `accepted_after_s` counts from it."""
        in_flight: set[int] = set()
        tasks: set[asyncio.Task] = set()

        def done(task: asyncio.Task, partitions: list[int]) -> None:
            tasks.discard(task)
            in_flight.difference_update(partitions)

        try:
            while self.pending and time.monotonic() - started < give_up_after_s:
                if time.monotonic() >= self._metadata_due:
                    self._metadata_due = float("inf")
                    await self._refresh_leaders()
                by_leader: dict[int, list[int]] = {}
                for partition in sorted(self.pending - in_flight):
                    by_leader.setdefault(self.leader_of.get(partition, -1), []).append(partition)
                unknown = by_leader.pop(-1, [])
                if unknown:
                    self.answers["no leader"] += len(unknown)
                    self._ask_metadata_soon()
                self._attempt += 1
                for broker_id, partitions in by_leader.items():
                    for i in range(0, len(partitions), self.partitions_per_request):
                        chunk = partitions[i:i + self.partitions_per_request]
                        in_flight.update(chunk)
                        task = asyncio.create_task(self._write(broker_id, chunk, started))
                        tasks.add(task)
                        task.add_done_callback(lambda t, chunk=chunk: done(t, chunk))
                await asyncio.sleep(self.pause_s)
        finally:
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for connection in [*self._metadata_connections.values(), *self._produce_connections]:
                await connection.close()

    def _ask_metadata_soon(self) -> None:
        self._metadata_due = min(self._metadata_due, time.monotonic() + self.metadata_refresh_s)

    async def _connect(self, broker_id: int) -> BrokerConnection | None:
        address = self.live_brokers().get(broker_id)
        if address is None:
            return None
        connection = BrokerConnection(*address, request_timeout_s=self.timeout_ms / 1000 + 10, security=self.security)
        try:
            await connection.connect()
        except ClientError:
            return None
        return connection

    async def _metadata_connection(self, broker_id: int) -> BrokerConnection | None:
        connection = self._metadata_connections.get(broker_id)
        if connection is not None and connection.connected:
            return connection
        connection = await self._connect(broker_id)
        if connection is not None:
            self._metadata_connections[broker_id] = connection
        return connection

    async def _produce_connection(self, broker_id: int) -> BrokerConnection | None:
        """A connection to ``broker_id`` with no request in flight: an idle one, or a new one."""
        idle = self._idle.setdefault(broker_id, [])
        while idle:
            connection = idle.pop()
            if connection.connected:
                return connection
            self._produce_connections.discard(connection)
        connection = await self._connect(broker_id)
        if connection is not None:
            self._produce_connections.add(connection)
        return connection

    async def _refresh_leaders(self) -> None:
        """Partition leaders as the next live broker's Metadata answer names them."""
        live = sorted(self.live_brokers())
        for turn in range(len(live)):
            broker_id = live[(self._refreshes + turn) % len(live)]
            connection = await self._metadata_connection(broker_id)
            if connection is None:
                continue
            try:
                response = await connection.send(ApiKey.METADATA, {
                    "topics": [{"name": self.topic, "topic_id": None}], "allow_auto_topic_creation": False,
                    "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})
            except ClientError:
                self.answers["metadata request failed"] += 1
                continue
            self._refreshes += 1
            for topic in response.topics:
                for partition in topic.partitions:
                    self.leader_of[partition.partition_index] = partition.leader_id
            return
        self._ask_metadata_soon()

    async def _write(self, broker_id: int, partitions: list[int], started: float) -> None:
        connection = await self._produce_connection(broker_id)
        if connection is None:
            self.answers["leader unreachable"] += len(partitions)
            self._ask_metadata_soon()
            return
        values = {p: f"probe-{p}-{self._attempt}-{broker_id}".encode() for p in partitions}
        try:
            response = await connection.send(ApiKey.PRODUCE, {
                "transactional_id": None, "acks": -1, "timeout": datetime.timedelta(milliseconds=self.timeout_ms),
                "topic_data": [{"name": self.topic, "partition_data": [
                    {"index": p, "records": build_batch([SimpleRecord(value=values[p])])} for p in partitions]}]})
        except ClientError:
            self.answers["connection lost"] += len(partitions)
            self._ask_metadata_soon()
            self._produce_connections.discard(connection)
            await connection.close()
            return
        elapsed = time.monotonic() - started
        self._idle[broker_id].append(connection)
        for topic in response.responses:
            for answer in topic.partition_responses:
                code = ErrorCode(answer.error_code)
                self.answers[code.name] += 1
                if code == ErrorCode.none:
                    self.acknowledged[values[answer.index]] = (answer.index, answer.base_offset)
                    self.pending.discard(answer.index)
                    self.accepted_after_s.setdefault(answer.index, elapsed)
                    continue
                hint = getattr(getattr(answer, "current_leader", None), "leader_id", -1)
                if code == ErrorCode.not_leader_or_follower and hint >= 0:
                    self.hinted_leaders += 1
                    self.leader_of[answer.index] = hint
                else:
                    self._ask_metadata_soon()
