"""Produce requests pipelined on one connection: appended and answered in the order they were sent.

The topic has two replicas and min.insync.replicas=2, so each acks=all request waits for the
follower while the requests behind it are read and appended; a request of another kind sent after
them is answered only after all of them, so it sees everything they wrote as committed. While they
wait, their records are already on disk, and the leader does not keep them in memory as well.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import signal

import psutil
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from broker_core.client import LATEST, BrokerConnection
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from broker_core.records import SimpleRecord, build_batch
from broker_core.server.listener import MAX_PIPELINED_PRODUCES
from tests.faults.harness import produce_outcome, send_produce
from tests.support.stack import running_stack
from tests.support.waiting import wait_until, wait_until_async

# Runs in `make faults`, not in `make test`: a broker stack driven with deep request pipelines (about 35 s on CI); the default suite must stay under CI's 20-minute budget.
pytestmark = pytest.mark.faults

REQUESTS = 20


def create_in_sync_topic(stack, topic: str) -> int:
    """A one-partition topic with two in-sync replicas and min.insync.replicas=2; returns its leader."""
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 2, config={"min.insync.replicas": "2"})])[topic].result(timeout=60)
    store = MetadataStore(stack.aws)
    wait_until(lambda: len(store.get_partition(topic, 0).isr) >= 2 and store.get_partition(topic, 0).leader >= 0,
               "the topic has two in-sync replicas", 60)
    return store.get_partition(topic, 0).leader


def test_pipelined_produces_get_consecutive_offsets_and_a_later_request_sees_them_committed(tmp_path) -> None:
    with running_stack(tmp_path, brokers=2) as stack:
        leader = create_in_sync_topic(stack, "pipelined")

        async def run() -> tuple[list, object]:
            connection = BrokerConnection(stack.host, stack.processes[leader].port, request_timeout_s=60)
            await connection.connect()
            try:
                produces = [send_produce(connection, "pipelined", 0, f"record-{i}".encode(), timeout_ms=30_000)
                            for i in range(REQUESTS)]
                offsets = connection.send(ApiKey.LIST_OFFSETS, {
                    "replica_id": -1, "isolation_level": 0,
                    "topics": [{"name": "pipelined", "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": LATEST}]}],
                })
                *produced, listed = await asyncio.gather(*produces, offsets)
            finally:
                await connection.close()
            return produced, listed

        produced, listed = asyncio.run(run())
        assert [produce_outcome(response) for response in produced] == [(ErrorCode.none, i) for i in range(REQUESTS)]
        answer = listed.topics[0].partitions[0]
        assert (answer.error_code, answer.offset) == (ErrorCode.none, REQUESTS)


BATCHES_PER_REQUEST = 6
RECORD_BYTES = 1_000_000  # one record per batch, under message.max.bytes


def test_produces_waiting_for_acks_all_do_not_keep_their_records_in_the_leaders_memory(tmp_path) -> None:
    """With the follower paused, a full pipeline of 6 MB acks=all requests waits on the leader; the
    leader's resident memory grows by much less than the records waiting (96 MB)."""
    # Long session and lag timeouts: the paused follower stays in the ISR, so the requests wait.
    overrides = {"broker.session.timeout.ms": "120000", "broker.heartbeat.interval.ms": "1000",
                 "replica.lag.time.max.ms": "120000"}
    with running_stack(tmp_path, brokers=2, overrides=overrides) as stack:
        leader = create_in_sync_topic(stack, "held")
        follower = next(broker_id for broker_id in stack.processes if broker_id != leader)
        leader_process = psutil.Process(stack.processes[leader].pid)
        records = b"".join(build_batch([SimpleRecord(value=os.urandom(RECORD_BYTES))])
                           for _ in range(BATCHES_PER_REQUEST))
        payload = len(records) * MAX_PIPELINED_PRODUCES

        def produce_request() -> dict:
            return {"transactional_id": None, "acks": -1, "timeout": datetime.timedelta(seconds=60),
                    "topic_data": [{"name": "held", "partition_data": [{"index": 0, "records": records}]}]}

        async def run() -> tuple[list, int, int]:
            connection = BrokerConnection(stack.host, stack.processes[leader].port, request_timeout_s=120)
            await connection.connect()
            try:
                # One request first, so the leader has a receive buffer of this size and its decoders loaded.
                warm_up = await connection.send(ApiKey.PRODUCE, produce_request())
                assert produce_outcome(warm_up) == (ErrorCode.none, 0)
                before = leader_process.memory_info().rss
                os.kill(stack.processes[follower].pid, signal.SIGSTOP)
                try:
                    waiting = [asyncio.ensure_future(connection.send(ApiKey.PRODUCE, produce_request()))
                               for _ in range(MAX_PIPELINED_PRODUCES)]
                    log_dir = stack.processes[leader].data_dir / "held-0"
                    appended = len(records) * (1 + MAX_PIPELINED_PRODUCES)
                    await wait_until_async(
                        lambda: sum(f.stat().st_size for f in log_dir.glob("*.log")) >= appended,
                        "the leader appends the pipelined requests", 60, interval_s=0.05)
                    assert not any(f.done() for f in waiting), "a request was answered before its follower fetched"
                    during = leader_process.memory_info().rss
                finally:
                    os.kill(stack.processes[follower].pid, signal.SIGCONT)
                answers = await asyncio.gather(*waiting)
            finally:
                await connection.close()
            return answers, before, during

        answers, before, during = asyncio.run(run())
        assert [produce_outcome(answer) for answer in answers] == [
            (ErrorCode.none, BATCHES_PER_REQUEST * (i + 1)) for i in range(MAX_PIPELINED_PRODUCES)]
        assert during - before < payload // 2, (
            f"the leader's resident memory grew by {(during - before) >> 20} MiB while "
            f"{payload >> 20} MiB of records waited for acks=all")
