"""Produce requests pipelined on one connection: appended and answered in the order they were sent.

The topic has two replicas and min.insync.replicas=2, so each acks=all request waits for the
follower while the requests behind it are read and appended; a request of another kind sent after
them is answered only after all of them, so it sees everything they wrote as committed.
"""

from __future__ import annotations

import asyncio
import time

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from broker_core.client import BrokerConnection
from broker_core.metadata.store import MetadataStore
from tests.faults.harness import produce_outcome, send_produce
from tests.support.stack import running_stack

LIST_OFFSETS_API = 2
LATEST_TIMESTAMP = -1
REQUESTS = 20


def test_pipelined_produces_get_consecutive_offsets_and_a_later_request_sees_them_committed(tmp_path) -> None:
    with running_stack(tmp_path, brokers=2) as stack:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        admin.create_topics([NewTopic("pipelined", 1, 2, config={"min.insync.replicas": "2"})])["pipelined"].result(
            timeout=60)
        store = MetadataStore(stack.aws)
        deadline = time.monotonic() + 60
        while len(store.get_partition("pipelined", 0).isr) < 2 or store.get_partition("pipelined", 0).leader < 0:
            assert time.monotonic() < deadline, "the topic never had two in-sync replicas"
            time.sleep(0.1)
        leader = store.get_partition("pipelined", 0).leader

        async def run() -> tuple[list, object]:
            connection = BrokerConnection(stack.host, stack.processes[leader].port, request_timeout_s=60)
            await connection.connect()
            try:
                produces = [send_produce(connection, "pipelined", 0, f"record-{i}".encode(), timeout_ms=30_000)
                            for i in range(REQUESTS)]
                offsets = connection.send(LIST_OFFSETS_API, {
                    "replica_id": -1, "isolation_level": 0,
                    "topics": [{"name": "pipelined", "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": LATEST_TIMESTAMP}]}],
                })
                *produced, listed = await asyncio.gather(*produces, offsets)
            finally:
                await connection.close()
            return produced, listed

        produced, listed = asyncio.run(run())
        assert [produce_outcome(response) for response in produced] == [(ErrorCode.none, i) for i in range(REQUESTS)]
        answer = listed.topics[0].partitions[0]
        assert (answer.error_code, answer.offset) == (ErrorCode.none, REQUESTS)
