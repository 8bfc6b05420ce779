"""Transactions written and read the way a producer, a coordinator and a consumer do on the wire.

Transactional batches come from Floe's record builder; markers are raw WriteTxnMarkers requests (what a
transaction coordinator sends a partition leader); reads are raw Fetch and ListOffsets requests, so a
test sees the LSO and the aborted-transaction list themselves. Requests go to the partition's
leader (any broker for a topic the cluster does not know, to see its refusal).
"""

from __future__ import annotations

import datetime
import time
import uuid
from pathlib import Path

from kio.schema.errors import ErrorCode

from broker_core.client import FloeClient, KafkaError
from broker_core.client.connection import BrokerConnection
from broker_core.log.config import LogConfig
from broker_core.log.partition_log import PartitionLog
from broker_core.log.transaction_index import AbortedTxn
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.messages import build_entity, request_class
from broker_core.records import SimpleRecord, build_batch
from broker_core.records.control import ControlRecordType, build_control_batch

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


async def leader_connection(client: FloeClient, topic: str) -> BrokerConnection:
    try:
        return await client._connection(await client._leader(topic, 0))
    except KafkaError:
        return await client._any_connection()


def txn_batch(producer_id: int, values: list[str], sequence: int, epoch: int = 0) -> bytes:
    return build_batch([SimpleRecord(value=v.encode()) for v in values], producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=sequence, is_transactional=True)


async def write_markers(client: FloeClient, topic: str, producer_id: int, commit: bool, *, epoch: int = 0,
                        coordinator_epoch: int = 0, partitions: tuple[int, ...] = (0,)) -> dict[int, ErrorCode]:
    connection = await leader_connection(client, topic)
    request = build_entity(request_class(ApiKey.WRITE_TXN_MARKERS, 1), {"markers": [{
        "producer_id": producer_id, "producer_epoch": epoch, "transaction_result": commit,
        "coordinator_epoch": coordinator_epoch,
        "topics": [{"name": topic, "partition_indexes": list(partitions)}]}]})
    response = await connection.send(ApiKey.WRITE_TXN_MARKERS, request)
    [marker] = response.markers
    assert marker.producer_id == producer_id
    return {p.partition_index: p.error_code for t in marker.topics for p in t.partitions}


async def raw_fetch(client: FloeClient, topic: str, offset: int, isolation_level: int):
    connection = await leader_connection(client, topic)
    response = await connection.send(ApiKey.FETCH, {
        "replica_id": -1, "max_wait": datetime.timedelta(0), "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    return response.responses[0].partitions[0]


async def latest_offset(client: FloeClient, topic: str, isolation_level: int) -> int:
    connection = await leader_connection(client, topic)
    response = await connection.send(ApiKey.LIST_OFFSETS, {
        "replica_id": -1, "isolation_level": isolation_level,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return response.topics[0].partitions[0].offset


def log_with_transactions(directory: Path) -> PartitionLog:
    """A partition log written as a leader writes it, for tiering by hand. Offsets: 0-1 producer 71
    (aborted, marker 2), 3 plain, 4 producer 72 (committed, marker 5), 6 producer 73 (aborted,
    marker 7); every batch in a segment of its own, the last one sealed."""
    log = PartitionLog.open(directory, LogConfig(segment_bytes=14), topic="t", partition=0)

    def marker(producer_id: int, kind: ControlRecordType) -> int:
        return log.append(build_control_batch(kind, producer_id=producer_id, producer_epoch=0,
                                              coordinator_epoch=0)).base_offset

    log.append(txn_batch(71, ["a1", "a2"], 0))
    log.append_aborted_transaction(AbortedTxn(71, 0, marker(71, ControlRecordType.ABORT), 3))
    log.append(build_batch([SimpleRecord(value=b"plain")]))
    log.append(txn_batch(72, ["c1"], 0))
    marker(72, ControlRecordType.COMMIT)
    log.append(txn_batch(73, ["a3"], 0))
    log.append_aborted_transaction(AbortedTxn(73, 6, marker(73, ControlRecordType.ABORT), 8))
    log.roll()
    return log


def committed_values(client_config: dict[str, str], topic: str, timeout_s: float = 30) -> list[bytes]:
    """Every value of the topic's partition 0 a confluent-kafka read_committed consumer reads (up to the
    LSO), with ``client_config`` (bootstrap servers and security)."""
    from confluent_kafka import Consumer

    consumer = Consumer({**client_config, "group.id": f"reader-{uuid.uuid4()}", "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "enable.partition.eof": True})
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        consumer.subscribe([topic])
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF: read up to the LSO
                    return values
                raise AssertionError(message.error())
            values.append(message.value())
    finally:
        consumer.close()
    raise AssertionError(f"no end of partition within {timeout_s} s; read {values}")
