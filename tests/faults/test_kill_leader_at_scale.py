"""The kill-leader fault at 1,000 partitions (issue 26): SIGKILL of the broker leading the most
partitions while an idempotent acks=all producer writes to all of them; every partition must accept
an acks=all write again within two session timeouts, and no acknowledged record may be lost,
duplicated or moved (tests.faults.harness checks the replicas byte for byte afterwards).

From the kill, a probe sends one-record acks=all Produce requests, to each broker for every partition
still waiting that the surviving brokers' Metadata answers name it the leader of (up to 100 partitions a
request; each request a task of its own, so one waiting for an ISR to shrink holds back no other),
until each partition has acknowledged one; the records it gets acknowledged join the producer's in
the final check. The probe asks the brokers, as a client does, not DynamoDB: a Query of
1,000 partition items costs the local stack's moto seconds, and a probe asking it in a loop starved
the brokers' own DynamoDB calls.
"""

from __future__ import annotations

import asyncio
import datetime
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker_core.client import BrokerConnection, ClientError
from broker_core.protocol.api_keys import ApiKey
from broker_core.records import SimpleRecord, build_batch
from tests.faults.harness import SESSION_TIMEOUT_S, TOPIC, FaultCluster, fault_cluster

PARTITIONS_AT_SCALE = 1000
PROBE_TIMEOUT_MS = 5000
PARTITIONS_PER_REQUEST = 100


class WriteProbe:
    """acks=all writes to every partition until each has been acknowledged once (see the module doc)."""

    def __init__(self, cluster: FaultCluster, partitions: int) -> None:
        self.cluster = cluster
        self.pending = set(range(partitions))
        self.accepted_after_s: dict[int, float] = {}
        self.acknowledged: dict[bytes, tuple[int, int]] = {}
        self.answers: Counter[str] = Counter()
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting = asyncio.Lock()  # concurrent writes to one broker share its connection
        self._attempt = 0

    async def run(self, started: float, give_up_after_s: float) -> None:
        # Each write runs as a task of its own, a partition in one request at a time: an acks=all
        # write that waits (up to the probe timeout) for its partition's ISR to shrink must not hold
        # back the next Metadata answer and the writes to partitions whose new leader it names.
        in_flight: set[int] = set()
        tasks: set[asyncio.Task] = set()

        def done(task: asyncio.Task, partitions: list[int]) -> None:
            tasks.discard(task)
            in_flight.difference_update(partitions)

        try:
            while self.pending and time.monotonic() - started < give_up_after_s:
                leaders = await self._leaders()
                by_leader: dict[int, list[int]] = {}
                for partition, leader in leaders.items():
                    if partition in self.pending and partition not in in_flight and leader >= 0:
                        by_leader.setdefault(leader, []).append(partition)
                self._attempt += 1
                for broker_id, partitions in by_leader.items():
                    for i in range(0, len(partitions), PARTITIONS_PER_REQUEST):
                        chunk = partitions[i:i + PARTITIONS_PER_REQUEST]
                        in_flight.update(chunk)
                        task = asyncio.create_task(self._write(broker_id, chunk, started))
                        tasks.add(task)
                        task.add_done_callback(lambda t, chunk=chunk: done(t, chunk))
                await asyncio.sleep(0.05)
        finally:
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for connection in self._connections.values():
                await connection.close()

    async def _connection(self, broker_id: int) -> BrokerConnection:
        async with self._connecting:
            connection = self._connections.get(broker_id)
            if connection is None or not connection.connected:
                host, port = self.cluster.address(broker_id)
                connection = BrokerConnection(host, port, request_timeout_s=PROBE_TIMEOUT_MS / 1000 + 10,
                                              security=self.cluster.security)
                await connection.connect()
                self._connections[broker_id] = connection
            return connection

    async def _leaders(self) -> dict[int, int]:
        """Partition -> leader, as a live broker's Metadata answer names them (the next live broker
        on each call, so every survivor's view is used)."""
        live = [b for b, process in sorted(self.cluster.stack.processes.items()) if process.alive()]
        broker_id = live[self._attempt % len(live)]
        try:
            connection = await self._connection(broker_id)
            response = await connection.send(ApiKey.METADATA, {
                "topics": [{"name": TOPIC, "topic_id": None}], "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
            })
        except ClientError:
            self.answers["metadata request failed"] += 1
            return {}
        return {p.partition_index: p.leader_id for t in response.topics for p in t.partitions}

    async def _write(self, broker_id: int, partitions: list[int], started: float) -> None:
        process = self.cluster.stack.processes[broker_id]
        if not process.alive():
            self.answers["leader is the killed broker"] += len(partitions)
            return
        values = {p: f"probe-{p}-{self._attempt}-{broker_id}".encode() for p in partitions}
        try:
            connection = await self._connection(broker_id)
            response = await connection.send(ApiKey.PRODUCE, {
                "transactional_id": None, "acks": -1, "timeout": datetime.timedelta(milliseconds=PROBE_TIMEOUT_MS),
                "topic_data": [{"name": TOPIC, "partition_data": [
                    {"index": p, "records": build_batch([SimpleRecord(value=values[p])])} for p in partitions]}]})
        except ClientError:
            self.answers["connection failed"] += len(partitions)
            return
        elapsed = time.monotonic() - started
        for answer in response.responses[0].partition_responses:
            code = ErrorCode(answer.error_code)
            self.answers[code.name] += 1
            if code == ErrorCode.none:
                self.acknowledged[values[answer.index]] = (answer.index, answer.base_offset)
                self.pending.discard(answer.index)
                self.accepted_after_s.setdefault(answer.index, elapsed)


@pytest.mark.faults
@pytest.mark.timeout(1200)
def test_killing_the_broker_leading_most_of_1000_partitions_moves_them_all_within_two_session_timeouts(
        tmp_path: Path) -> None:
    with fault_cluster(tmp_path, partitions=PARTITIONS_AT_SCALE) as cluster:
        cluster.start_producing()
        led = Counter(p.leader for p in cluster.partitions())
        victim, leading = led.most_common(1)[0]
        probe = WriteProbe(cluster, PARTITIONS_AT_SCALE)
        started = time.monotonic()
        cluster.stop_broker(victim, signal.SIGKILL)
        asyncio.run(probe.run(started, give_up_after_s=10 * SESSION_TIMEOUT_S))
        slowest = max(probe.accepted_after_s.values(), default=float("inf"))
        outcome = cluster.finish(extra_acked=probe.acknowledged)
    # Safety first, so a failover too slow for the timing goal still shows whether anything was lost.
    outcome.assert_consistent()
    assert not probe.pending, (
        f"{len(probe.pending)} partitions took no acks=all write within {10 * SESSION_TIMEOUT_S:.0f}s of killing "
        f"broker {victim} (leader of {leading}); answers {dict(probe.answers)}")
    assert slowest <= 2 * SESSION_TIMEOUT_S, (
        f"the last partition took an acks=all write {slowest:.1f}s after broker {victim} (leader of {leading}) "
        f"was killed, more than twice the session timeout ({SESSION_TIMEOUT_S:.0f}s); answers {dict(probe.answers)}")
