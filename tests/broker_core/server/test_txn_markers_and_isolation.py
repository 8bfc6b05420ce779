"""WriteTxnMarkers on the partition leader, the LSO, and read_committed Fetch and ListOffsets.

Transactions are written the way a producer and a coordinator write them on the wire: transactional
batches in Produce requests (Floe's record builder), then WriteTxnMarkers requests. Readers are
kafka-python and confluent-kafka consumers with isolation.level=read_committed, and raw Fetch /
ListOffsets requests where the test needs the LSO and the aborted-transaction list themselves.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from kafka import KafkaConsumer, TopicPartition
from kio.schema.errors import ErrorCode

from broker_core.client import FloeClient, KafkaError
from broker_core.local_stack import LocalStack
from broker_core.protocol.api_keys import ApiKey
from broker_core.records import SimpleRecord
from broker_core.records.control import ControlRecordType, build_control_batch
from tests.support.stack import running_stack
from tests.support.transactions import latest_offset, raw_fetch, txn_batch, write_markers

COMMITTING, ABORTING, OPEN = 4001, 4002, 4003


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(Path(tmp_path_factory.mktemp("txn-markers"))) as running:
        yield running


async def write_three_transactions(servers: str, topic: str) -> None:
    """Offsets: 0 plain, 1-2 COMMITTING, 3-4 ABORTING, 5 COMMITTING, 6 commit marker, 7 abort marker,
    8 plain, 9-10 OPEN (never ended), 11 plain."""
    async with FloeClient(servers) as client:
        await client.create_topic(topic, 1, 1)
        await client.produce(topic, [SimpleRecord(value=b"plain-0")], 0)
        await client.produce_many(topic, {0: txn_batch(COMMITTING, ["c1", "c2"], 0)})
        await client.produce_many(topic, {0: txn_batch(ABORTING, ["a1", "a2"], 0)})
        await client.produce_many(topic, {0: txn_batch(COMMITTING, ["c3"], 2)})
        assert await write_markers(client, topic, COMMITTING, True) == {0: ErrorCode.none}
        assert await write_markers(client, topic, ABORTING, False) == {0: ErrorCode.none}
        await client.produce(topic, [SimpleRecord(value=b"plain-8")], 0)
        await client.produce_many(topic, {0: txn_batch(OPEN, ["o1", "o2"], 0)})
        await client.produce(topic, [SimpleRecord(value=b"plain-11")], 0)


def committed_values_kafka_python(servers: str, topic: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=servers, isolation_level="read_committed",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) >= expected:
                break
        return values
    finally:
        consumer.close()


def committed_values_confluent(servers: str, topic: str, expected: int) -> list[bytes]:
    from confluent_kafka import TopicPartition as ConfluentPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"{topic}-reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([ConfluentPartition(topic, 0, 0)])
        values: list[bytes] = []
        idle = 0
        while len(values) < expected and idle < 10:
            message = consumer.poll(0.5)
            if message is None or message.error():
                idle += 1
                continue
            values.append(message.value())
        # A little longer: anything beyond the expected records (aborted or open ones) would show here.
        for _ in range(4):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                values.append(message.value())
        return values
    finally:
        consumer.close()


def test_read_committed_stops_at_the_open_transaction_and_names_the_aborted_one(stack: LocalStack) -> None:
    servers = stack.bootstrap_servers
    asyncio.run(write_three_transactions(servers, "txn-basic"))

    async def look() -> tuple:
        async with FloeClient(servers) as client:
            committed = await raw_fetch(client, "txn-basic", 0, 1)
            uncommitted = await raw_fetch(client, "txn-basic", 0, 0)
            return (committed, uncommitted, await latest_offset(client, "txn-basic", 1),
                    await latest_offset(client, "txn-basic", 0))

    committed, uncommitted, lso, hw = asyncio.run(look())
    assert (committed.high_watermark, committed.last_stable_offset) == (12, 9)
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(ABORTING, 3)]
    assert uncommitted.last_stable_offset == 9 and uncommitted.aborted_transactions is None
    assert (lso, hw) == (9, 12)

    expected = [b"plain-0", b"c1", b"c2", b"c3", b"plain-8"]
    assert committed_values_kafka_python(servers, "txn-basic", len(expected)) == expected
    assert committed_values_confluent(servers, "txn-basic", len(expected)) == expected


def test_committing_the_open_transaction_moves_the_lso_to_the_high_watermark(stack: LocalStack) -> None:
    servers = stack.bootstrap_servers

    async def run() -> tuple[int, int, list]:
        async with FloeClient(servers) as client:
            await client.create_topic("txn-close", 1, 1)
            await client.produce_many("txn-close", {0: txn_batch(OPEN, ["o1"], 0)})
            await client.produce("txn-close", [SimpleRecord(value=b"after")], 0)
            before = await latest_offset(client, "txn-close", 1)
            assert await write_markers(client, "txn-close", OPEN, True) == {0: ErrorCode.none}
            after = await latest_offset(client, "txn-close", 1)
            fetched = await raw_fetch(client, "txn-close", 0, 1)
            return before, after, list(fetched.aborted_transactions)

    before, after, aborted = asyncio.run(run())
    assert (before, after, aborted) == (0, 3, [])
    assert committed_values_kafka_python(servers, "txn-close", 2) == [b"o1", b"after"]


def test_stale_markers_and_client_control_batches_are_refused_and_write_nothing(stack: LocalStack) -> None:
    async def run() -> tuple:
        async with FloeClient(servers, retries=0) as client:
            await client.create_topic("txn-refused", 1, 1)
            await client.produce_many("txn-refused", {0: txn_batch(OPEN, ["x"], 0, epoch=3)})
            await write_markers(client, "txn-refused", OPEN, False, epoch=3, coordinator_epoch=5)
            end_before = await latest_offset(client, "txn-refused", 0)
            stale_epoch = await write_markers(client, "txn-refused", OPEN, True, epoch=2, coordinator_epoch=5)
            stale_coordinator = await write_markers(client, "txn-refused", OPEN, True, epoch=3, coordinator_epoch=4)
            unknown = await write_markers(client, "no-such-topic", OPEN, True)
            control = build_control_batch(ControlRecordType.COMMIT, producer_id=OPEN, producer_epoch=3,
                                          coordinator_epoch=5)
            with pytest.raises(KafkaError) as raised:
                await client.produce_many("txn-refused", {0: control})
            end_after = await latest_offset(client, "txn-refused", 0)
            return end_before, stale_epoch, stale_coordinator, unknown, raised.value.code, end_after

    servers = stack.bootstrap_servers
    end_before, stale_epoch, stale_coordinator, unknown, control_error, end_after = asyncio.run(run())
    assert stale_epoch == {0: ErrorCode.invalid_producer_epoch}
    assert stale_coordinator == {0: ErrorCode.transaction_coordinator_fenced}
    assert unknown == {0: ErrorCode.unknown_topic_or_partition}
    assert control_error == ErrorCode.invalid_record
    assert end_before == end_after == 2


def test_a_marker_for_an_unknown_producer_is_written_as_kafka_writes_it(stack: LocalStack) -> None:
    async def run() -> tuple:
        async with FloeClient(stack.bootstrap_servers) as client:
            await client.create_topic("txn-unknown", 1, 1)
            errors = await write_markers(client, "txn-unknown", 999_999, False)
            return errors, await latest_offset(client, "txn-unknown", 0), await latest_offset(client, "txn-unknown", 1)

    assert asyncio.run(run()) == ({0: ErrorCode.none}, 1, 1)


def test_lso_and_aborted_transactions_survive_a_kill_and_restart(stack: LocalStack) -> None:
    servers = stack.bootstrap_servers
    asyncio.run(write_three_transactions(servers, "txn-restart"))
    stack.kill_broker(1)
    stack.restart_broker(1)

    async def look():
        async with FloeClient(stack.bootstrap_servers) as client:
            return await raw_fetch(client, "txn-restart", 0, 1)

    committed = asyncio.run(look())
    assert committed.last_stable_offset == 9
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(ABORTING, 3)]
    assert committed_values_kafka_python(stack.bootstrap_servers, "txn-restart", 5) == [
        b"plain-0", b"c1", b"c2", b"c3", b"plain-8"]


async def produce_with_transactional_id(client: FloeClient, topic: str, records: bytes) -> ErrorCode:
    connection = await client._any_connection()
    response = await connection.send(ApiKey.PRODUCE, {
        "transactional_id": "txn-app", "acks": -1, "timeout": datetime.timedelta(seconds=10),
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return response.responses[0].partition_responses[0].error_code


def test_kip_890_a_write_that_would_open_a_transaction_unverified_is_refused_and_not_appended(
        stack: LocalStack) -> None:
    """No coordinator vouches for transactional id "txn-app" (never initialised), so its first write to
    the partition is refused: NOT_ENOUGH_REPLICAS (Kafka's retriable answer) while no transaction
    coordinator runs, the coordinator's INVALID_PRODUCER_ID_MAPPING or INVALID_TXN_STATE once one does.
    Once the producer's transaction is open on the partition, its next batches need no verification."""
    async def run() -> tuple:
        async with FloeClient(stack.bootstrap_servers) as client:
            await client.create_topic("txn-verify", 1, 1)
            refused = await produce_with_transactional_id(client, "txn-verify", txn_batch(5001, ["late"], 0))
            end_after_refusal = await latest_offset(client, "txn-verify", 0)
            # A transaction already open on the partition (its first batch written without an id) ...
            await client.produce_many("txn-verify", {0: txn_batch(5002, ["first"], 0)})
            # ... takes further batches without asking the coordinator.
            accepted = await produce_with_transactional_id(client, "txn-verify", txn_batch(5002, ["second"], 1))
            return refused, end_after_refusal, accepted, await latest_offset(client, "txn-verify", 0)

    refused, end_after_refusal, accepted, end = asyncio.run(run())
    assert refused in (ErrorCode.not_enough_replicas, ErrorCode.invalid_producer_id_mapping,
                       ErrorCode.invalid_txn_state)
    assert end_after_refusal == 0
    assert (accepted, end) == (ErrorCode.none, 2)
