"""Harness for the fault suite: Kafka's ducktape replication test at small scale.

A `FaultCluster` is three broker processes and a topic with replication factor 3 and
min.insync.replicas=2, written to continuously by an idempotent, acks=all confluent-kafka producer
(`ContinuousProducer`, in its own thread, every value unique). Tests inject faults into the broker
in a `Role` (the leader of partition 0, or the controller, which holds the lease in DynamoDB):
stop-and-restore and bounces with SIGTERM or SIGKILL, a SIGSTOP longer than the session timeout, or
losing two of the three replicas. `FaultCluster.finish` then heals the cluster, drains the producer,
reads everything back with a consumer, stops the stack and reads every replica's segment files, and
returns an `Outcome` whose `assert_consistent` checks Kafka's promise: every acknowledged record is
consumed exactly once at the offset it was acknowledged with, no offset is handed out twice, and
below the high watermark every replica holds the same batches, byte for byte.

Test-side reads of leadership and ISR go to DynamoDB directly (it is the source of truth, and a
client's cached metadata may name a broker that is paused); probes that need one exact error code
(`produce_directly`, `high_watermark_of`) talk to one broker over a single connection.

`FLOE_FAULTS_SECURITY` (plaintext, the default, or ssl or sasl_ssl) is the local stack's security mode:
`make faults` runs the matrix once PLAINTEXT and once with every broker, replica fetcher and client
(the producer, the checking consumers, the probes: the stack's `client_config`, its super user) on
SASL_SSL.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from broker_core.client import LATEST, PLAINTEXT, BrokerConnection, ClientSecurity
from broker_core.local_stack import LocalStack
from broker_core.log.config import LogConfig
from broker_core.log.partition_log import PartitionLog
from broker_core.metadata.controller import ControllerLease
from broker_core.metadata.state import BrokerState, PartitionState
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from broker_core.records import SimpleRecord, build_batch, iter_batches, iter_headers
from broker_core.records.errors import RecordsError
from tests.support import waiting
from tests.support.stack import TEST_BROKER_OVERRIDES, running_stack

SECURITY = os.environ.get("FLOE_FAULTS_SECURITY", "plaintext")
TOPIC = "replicated"
PARTITIONS = 3
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
BROKERS = 3
# Small segments, so replicas roll several times while faults happen.
SEGMENT_BYTES = 256 * 1024
SESSION_TIMEOUT_S = int(TEST_BROKER_OVERRIDES["broker.session.timeout.ms"]) / 1000
PRODUCE_RATE_PER_S = 2000
# Acknowledged records the producer must add to show the cluster takes writes again.
PROGRESS_RECORDS = 500
HEAL_TIMEOUT_S = 60.0


class Role(enum.Enum):
    """Which broker a fault hits, looked up afresh before each hit."""

    LEADER = "leader"  # the leader of partition 0
    CONTROLLER = "controller"  # the holder of the controller lease


class HarnessError(AssertionError):
    """The cluster did not reach a state the fault scenario waits for (an availability failure)."""


# the producer ------------------------------------------------------------------------------------


class ContinuousProducer:
    """An idempotent acks=all confluent-kafka producer writing unique values from its own thread.

    Values are `<run id>-<sequence>` padded to ~100 bytes. Delivery reports are collected by value:
    `acked` maps a value to the (partition, offset) the broker acknowledged it at, `failed` to the
    error its delivery ended with. `message.timeout.ms` is long enough that a record waits out any
    fault here rather than fail; a BufferError (local queue full) is answered by polling.
    """

    def __init__(self, client_config: dict[str, str], topic: str, rate_per_s: int = PRODUCE_RATE_PER_S) -> None:
        self.topic = topic
        self.rate_per_s = rate_per_s
        self.run_id = uuid.uuid4().hex[:8]
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: dict[bytes, str] = {}
        self.fatal_errors: list[str] = []
        self.sent = 0
        self._stopping = threading.Event()
        self._producer = Producer({
            **client_config,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 300_000,
            "request.timeout.ms": 10_000,
            "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": self._on_error,
        })
        self._thread = threading.Thread(target=self._run, name="continuous-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _on_error(self, error: KafkaError) -> None:
        # Transport errors while a broker is down are expected; a fatal one means the idempotent
        # producer had to give up its guarantees, which the checks report.
        if error.fatal():
            self.fatal_errors.append(str(error))

    def _on_delivery(self, error: KafkaError | None, message: Any) -> None:
        if error is None:
            self.acked[message.value()] = (message.partition(), message.offset())
        else:
            self.failed[message.value()] = str(error)

    def _run(self) -> None:
        tick_s = 0.01
        per_tick = max(1, int(self.rate_per_s * tick_s))
        next_tick = time.monotonic()
        while not self._stopping.is_set():
            for _ in range(per_tick):
                value = f"{self.run_id}-{self.sent:010d}-".encode().ljust(100, b"x")
                while not self._stopping.is_set():
                    try:
                        self._producer.produce(self.topic, value=value, on_delivery=self._on_delivery)
                        break
                    except BufferError:
                        self._producer.poll(0.1)
                    except KafkaException as exc:  # the producer is in a fatal state
                        self.fatal_errors.append(str(exc))
                        return
                else:
                    return
                self.sent += 1
            try:
                self._producer.poll(0)
            except KafkaException as exc:
                self.fatal_errors.append(str(exc))
                return
            next_tick += tick_s
            delay = next_tick - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_tick = time.monotonic()

    def wait_for_more_acks(self, count: int = PROGRESS_RECORDS, timeout_s: float = HEAL_TIMEOUT_S) -> None:
        """Block until ``count`` more records are acknowledged than now; HarnessError if they are not."""
        target = len(self.acked) + count
        try:
            waiting.wait_until(lambda: len(self.acked) >= target or self.fatal_errors,
                               f"{target} records acknowledged", timeout_s, interval_s=0.05)
        except AssertionError:
            pass  # reported below, with what the producer saw
        if len(self.acked) < target:
            raise HarnessError(
                f"producer stalled: {len(self.acked)} acknowledged, wanted {target} within {timeout_s:.0f}s "
                f"(sent {self.sent}, failed {len(self.failed)}, fatal errors {self.fatal_errors})")

    def stop(self, timeout_s: float = HEAL_TIMEOUT_S) -> int:
        """Stop writing and wait for outstanding deliveries; returns how many are still undelivered."""
        self._stopping.set()
        self._thread.join()
        try:
            return self._producer.flush(timeout_s)
        except KafkaException as exc:
            self.fatal_errors.append(str(exc))
            return len(self._producer)


# direct probes -----------------------------------------------------------------------------------


def produce_directly(host: str, port: int, topic: str, partition: int, value: bytes, *,
                     timeout_ms: int, security: ClientSecurity = PLAINTEXT) -> tuple[ErrorCode, int]:
    """One acks=all Produce of a one-record batch to exactly this broker: (error code, base offset)."""
    async def produce() -> tuple[ErrorCode, int]:
        connection = BrokerConnection(host, port, request_timeout_s=timeout_ms / 1000 + 10, security=security)
        await connection.connect()
        try:
            response = await send_produce(connection, topic, partition, value, timeout_ms=timeout_ms)
        finally:
            await connection.close()
        return produce_outcome(response)

    return asyncio.run(produce())


async def send_produce(connection: BrokerConnection, topic: str, partition: int, value: bytes, *,
                       timeout_ms: int) -> Any:
    return await connection.send(ApiKey.PRODUCE, {
        "transactional_id": None, "acks": -1, "timeout": datetime.timedelta(milliseconds=timeout_ms),
        "topic_data": [{"name": topic, "partition_data": [
            {"index": partition, "records": build_batch([SimpleRecord(value=value)])}]}],
    })


def produce_outcome(response: Any) -> tuple[ErrorCode, int]:
    answer = response.responses[0].partition_responses[0]
    return ErrorCode(answer.error_code), answer.base_offset


def high_watermark_of(host: str, port: int, topic: str, partition: int, *,
                      security: ClientSecurity = PLAINTEXT) -> tuple[ErrorCode, int]:
    """ListOffsets(latest) as a consumer asks it of this broker: (error code, high watermark)."""
    async def list_offsets() -> tuple[ErrorCode, int]:
        connection = BrokerConnection(host, port, request_timeout_s=10, security=security)
        await connection.connect()
        try:
            response = await connection.send(ApiKey.LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": 0,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": partition, "current_leader_epoch": -1, "timestamp": LATEST}]}],
            })
        finally:
            await connection.close()
        answer = response.topics[0].partitions[0]
        return ErrorCode(answer.error_code), answer.offset

    return asyncio.run(list_offsets())


# reading back ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsumedRecord:
    partition: int
    offset: int
    value: bytes


def consume_everything(client_config: dict[str, str], topic: str, partitions: int,
                       timeout_s: float = HEAL_TIMEOUT_S) -> tuple[list[ConsumedRecord], dict[int, int]]:
    """Every record below each partition's high watermark, read from the start by a plain consumer."""
    consumer = Consumer({
        **client_config, "group.id": f"fault-check-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    try:
        high = {p: _high_watermark(consumer, topic, p) for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        remaining = {p for p in range(partitions) if high[p] > 0}
        records: list[ConsumedRecord] = []
        deadline = time.monotonic() + timeout_s
        while remaining:
            if time.monotonic() > deadline:
                raise HarnessError(f"consumer did not reach the high watermarks {high} within {timeout_s:.0f}s; "
                                   f"partitions {sorted(remaining)} short")
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is not None:
                    raise HarnessError(f"consumer error: {message.error()}")
                records.append(ConsumedRecord(message.partition(), message.offset(), message.value()))
                if message.offset() + 1 >= high[message.partition()]:
                    remaining.discard(message.partition())
        return records, high
    finally:
        consumer.close()


def _high_watermark(consumer: Consumer, topic: str, partition: int, timeout_s: float = HEAL_TIMEOUT_S) -> int:
    """The partition's high watermark as the consumer asks its leader; asked again (as a client
    retries) while the answer is that the broker asked no longer leads it: leadership may move while
    the check runs (at 1,000 partitions, a broker fenced under load moves hundreds)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.NOT_LEADER_FOR_PARTITION or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@dataclass
class ReplicaLog:
    """One replica's log of one partition as read from its files after the stack stopped."""

    broker_id: int
    partition: int
    log_start_offset: int
    log_end_offset: int
    batches: list[tuple[int, bytes]]  # (base offset, batch bytes) of every batch below the HW
    values: dict[int, bytes | None]  # offset -> record value, below the HW


def read_replica_log(partition_dir: Path, scratch: Path, broker_id: int, partition: int, high_watermark: int) -> ReplicaLog:
    """Open a copy of a replica's directory with PartitionLog (recovery runs on the copy) and read it."""
    copy = scratch / f"broker-{broker_id}" / partition_dir.name
    shutil.copytree(partition_dir, copy)
    log = PartitionLog.open(copy, LogConfig(), topic=TOPIC, partition=partition)
    try:
        batches: list[tuple[int, bytes]] = []
        values: dict[int, bytes | None] = {}
        offset = log.log_start_offset
        while offset < min(high_watermark, log.log_end_offset):
            chunk = log.read_bytes(offset, 1024 * 1024, max_offset=high_watermark)
            if not chunk:
                break
            for position, header in iter_headers(chunk):
                batch = chunk[position:position + header.size]
                batches.append((header.base_offset, batch))
                for decoded in iter_batches(batch):
                    for record in decoded.records:
                        values[record.offset] = record.value
                offset = header.next_offset
        return ReplicaLog(broker_id, partition, log.log_start_offset, log.log_end_offset, batches, values)
    finally:
        log.close()


def log_end_offset_on_disk(partition_dir: Path) -> int | None:
    """The next offset after the last whole batch of a live replica's newest segment (None if unreadable)."""
    segments = sorted(partition_dir.glob("*.log"))
    if not segments:
        return None
    newest = segments[-1]
    end = int(newest.stem)
    try:
        for _, header in iter_headers(newest.read_bytes()):
            end = header.next_offset
    except (RecordsError, OSError):
        return None
    return end


# outcome -----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What a fault scenario left behind, and the checks every scenario must pass."""

    acked: dict[bytes, tuple[int, int]]
    consumed: list[ConsumedRecord]
    high_watermarks: dict[int, int]
    replicas: dict[int, list[ReplicaLog]]  # partition -> one log per replica
    fatal_producer_errors: list[str]
    undelivered: int
    failed: dict[bytes, str] = field(default_factory=dict)

    def summary(self) -> str:
        return (f"{len(self.acked)} acknowledged, {len(self.consumed)} consumed, {len(self.failed)} failed, "
                f"{self.undelivered} undelivered, high watermarks {self.high_watermarks}")

    def lost(self) -> list[bytes]:
        consumed = {r.value for r in self.consumed}
        return sorted(v for v in self.acked if v not in consumed)

    def duplicated(self) -> dict[bytes, int]:
        counts = Counter(r.value for r in self.consumed)
        return {v: n for v, n in counts.items() if n > 1}

    def moved(self) -> dict[bytes, tuple[tuple[int, int], tuple[int, int]]]:
        """Acknowledged records consumed at another (partition, offset) than the one acknowledged."""
        where = {r.value: (r.partition, r.offset) for r in self.consumed}
        return {v: (at, where[v]) for v, at in self.acked.items() if v in where and where[v] != at}

    def reused_offsets(self) -> dict[tuple[int, int], int]:
        """(partition, offset) pairs acknowledged, or consumed, for more than one record."""
        acked = Counter(self.acked.values())
        consumed = Counter((r.partition, r.offset) for r in self.consumed)
        return {at: n for at, n in (acked + consumed).items() if acked[at] > 1 or consumed[at] > 1}

    def replica_divergence(self) -> list[str]:
        """Every way the replicas' logs below the high watermark differ from each other or from what was consumed."""
        problems = []
        consumed_at = {(r.partition, r.offset): r.value for r in self.consumed}
        for partition, logs in sorted(self.replicas.items()):
            hw = self.high_watermarks[partition]
            reference = logs[0]
            for log in logs:
                name = f"partition {partition} on broker {log.broker_id}"
                if log.log_end_offset != hw:
                    problems.append(f"{name}: log end offset {log.log_end_offset}, high watermark {hw}")
                expected = log.log_start_offset
                for base_offset, batch in log.batches:
                    if base_offset != expected:
                        problems.append(f"{name}: batch at offset {base_offset} where {expected} was expected")
                        break
                    expected = base_offset + _records_in(batch)
                if log.values.keys() != reference.values.keys():
                    problems.append(f"{name}: holds offsets {_span(log.values)}, broker {reference.broker_id} "
                                    f"holds {_span(reference.values)}")
                if log.batches != reference.batches:
                    problems.append(f"{name}: batches differ from broker {reference.broker_id}'s from offset "
                                    f"{_first_difference(log.batches, reference.batches)}")
                for offset, value in log.values.items():
                    if consumed_at.get((partition, offset), value) != value:
                        problems.append(f"{name}: offset {offset} holds {value!r}, the consumer read "
                                        f"{consumed_at[(partition, offset)]!r}")
                        break
            missing = [o for o in range(reference.log_start_offset, hw) if (partition, o) not in consumed_at]
            if missing:
                problems.append(f"partition {partition}: the consumer skipped offsets {missing[:5]}...")
        return problems

    def assert_consistent(self) -> None:
        """Kafka's promise after a fault: nothing acknowledged lost, duplicated, moved, or held differently."""
        failures = []
        if self.fatal_producer_errors:
            failures.append(f"idempotent producer hit fatal errors: {self.fatal_producer_errors}")
        if lost := self.lost():
            failures.append(f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}")
        if duplicated := self.duplicated():
            failures.append(f"{len(duplicated)} records consumed more than once, e.g. {list(duplicated.items())[:3]}")
        if moved := self.moved():
            failures.append(f"{len(moved)} records consumed elsewhere than acknowledged (acked, consumed), "
                            f"e.g. {list(moved.items())[:3]}")
        if reused := self.reused_offsets():
            failures.append(f"{len(reused)} offsets given to more than one record, e.g. {list(reused.items())[:3]}")
        failures += self.replica_divergence()
        assert not failures, self.summary() + "\n" + "\n".join(failures)


def _records_in(batch: bytes) -> int:
    (_, header), = iter_headers(batch)
    return header.next_offset - header.base_offset


def _span(values: dict[int, Any]) -> str:
    return f"[{min(values)}, {max(values)}] ({len(values)})" if values else "nothing"


def _first_difference(ours: list[tuple[int, bytes]], theirs: list[tuple[int, bytes]]) -> int:
    for (offset, a), (_, b) in zip(ours, theirs, strict=False):
        if a != b:
            return offset
    shorter = ours if len(ours) < len(theirs) else theirs
    return shorter[-1][0] + _records_in(shorter[-1][1]) if shorter else 0


# the cluster -------------------------------------------------------------------------------------


@dataclass
class FaultCluster:
    stack: LocalStack
    store: MetadataStore
    scratch: Path
    producer: ContinuousProducer | None = None
    paused: set[int] = field(default_factory=set)
    partition_count: int = PARTITIONS

    # what DynamoDB says --------------------------------------------------------------------------

    def partitions(self) -> tuple[PartitionState, ...]:
        return tuple(self.store.get_partitions(TOPIC))

    def partition(self, index: int) -> PartitionState:
        return self.store.get_partition(TOPIC, index)

    def controller_id(self) -> int:
        lease = ControllerLease(self.store).current()
        return -1 if lease is None else lease.holder

    def broker_in(self, role: Role) -> int:
        broker = self.partition(0).leader if role is Role.LEADER else self.controller_id()
        if broker < 0:
            raise HarnessError(f"no broker is the {role.value} right now")
        return broker

    def wait_until(self, what: str, condition: Callable[[], bool], timeout_s: float = HEAL_TIMEOUT_S) -> float:
        """Poll ``condition`` until it holds; returns the seconds waited, HarnessError after ``timeout_s``."""
        start = time.monotonic()
        # Each check reads every partition from DynamoDB: at 1,000 partitions that is seconds of the
        # local stack's moto, which a check every 0.1 s would keep from the brokers' own calls.
        interval_s = 0.1 if self.partition_count <= 100 else 1.0
        try:
            waiting.wait_until(condition, what, timeout_s, interval_s=interval_s)
        except AssertionError as error:
            raise HarnessError(f"{error}; partitions {self.partitions()}") from None
        return time.monotonic() - start

    def wait_for_full_isr(self, timeout_s: float = HEAL_TIMEOUT_S) -> None:
        self.wait_until("every replica in sync", lambda: all(
            p.leader >= 0 and len(p.isr) == REPLICATION_FACTOR for p in self.partitions()), timeout_s)

    def wait_for_leaders_other_than(self, broker_id: int, timeout_s: float = HEAL_TIMEOUT_S) -> None:
        self.wait_until(f"every partition led by a broker other than {broker_id}", lambda: all(
            p.leader >= 0 and p.leader != broker_id for p in self.partitions()), timeout_s)

    def running_brokers(self) -> set[int]:
        return {b.broker_id for b in self.store.list_brokers() if b.state is BrokerState.RUNNING}

    # faults --------------------------------------------------------------------------------------

    @property
    def security(self) -> ClientSecurity:
        """How the test's own connections authenticate: the stack's client_config."""
        return ClientSecurity.from_properties(self.stack.client_config)

    def address(self, broker_id: int) -> tuple[str, int]:
        return self.stack.host, self.stack.processes[broker_id].port

    def stop_broker(self, broker_id: int, sig: signal.Signals) -> None:
        """SIGTERM (controlled shutdown) or SIGKILL, returning once the process has exited."""
        try:
            self.stack.kill_broker(broker_id, sig)
        except subprocess.TimeoutExpired:
            process = self.stack.processes[broker_id]
            process.process.kill()
            process.process.wait()
            raise HarnessError(f"broker {broker_id} did not exit after {sig.name}; see {process.log_path}") from None

    def pause(self, broker_id: int) -> None:
        os.kill(self.stack.processes[broker_id].pid, signal.SIGSTOP)
        self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        os.kill(self.stack.processes[broker_id].pid, signal.SIGCONT)
        self.paused.discard(broker_id)

    def restart(self, broker_id: int) -> None:
        self.stack.restart_broker(broker_id)

    def restore_all(self) -> None:
        """Resume paused brokers and restart stopped ones."""
        for broker_id in sorted(self.paused):
            self.resume(broker_id)
        for broker_id, process in sorted(self.stack.processes.items()):
            if not process.alive():
                self.restart(broker_id)

    # the end of a scenario -----------------------------------------------------------------------

    def wait_for_replicas_to_match(self, high_watermarks: Callable[[], dict[int, int]],
                                   timeout_s: float = HEAL_TIMEOUT_S) -> bool:
        """Wait until every replica's log ends at its partition's high watermark; False on timeout
        (the replica comparison then reports how they differ)."""
        def matched() -> bool:
            hws = high_watermarks()
            ends = {(p, b): log_end_offset_on_disk(self.stack.processes[b].data_dir / f"{TOPIC}-{p}")
                    for p in range(self.partition_count) for b in self.stack.processes}
            return all(ends[(p, b)] == hws[p] for p, b in ends)

        try:
            waiting.wait_until(matched, "every replica's log ends at its high watermark", timeout_s, interval_s=0.2)
        except AssertionError:
            return False
        return True

    def finish(self, extra_acked: dict[bytes, tuple[int, int]] | None = None) -> Outcome:
        """Heal the cluster, show it takes writes, drain the producer, read everything back, stop the
        stack and read each replica's files. ``extra_acked`` adds records acknowledged to a probe."""
        producer = self.producer
        assert producer is not None, "start_producing first"
        self.restore_all()
        self.wait_for_full_isr()
        producer.wait_for_more_acks()
        undelivered = producer.stop()
        consumer_hws = self._consumer_high_watermarks
        self.wait_for_replicas_to_match(consumer_hws)
        consumed, high_watermarks = consume_everything(self.stack.client_config, TOPIC, self.partition_count)
        self.stack.stop(save_state=False)
        replicas = {
            p: [read_replica_log(process.data_dir / f"{TOPIC}-{p}", self.scratch, b, p, high_watermarks[p])
                for b, process in sorted(self.stack.processes.items())]
            for p in range(self.partition_count)
        }
        return Outcome(acked={**producer.acked, **(extra_acked or {})}, consumed=consumed,
                       high_watermarks=high_watermarks, replicas=replicas,
                       fatal_producer_errors=producer.fatal_errors, undelivered=undelivered,
                       failed=producer.failed)

    def _consumer_high_watermarks(self) -> dict[int, int]:
        consumer = Consumer({**self.stack.client_config, "group.id": "fault-hw"})
        try:
            return {p: _high_watermark(consumer, TOPIC, p) for p in range(self.partition_count)}
        finally:
            consumer.close()

    def start_producing(self) -> ContinuousProducer:
        self.producer = ContinuousProducer(self.stack.client_config, TOPIC)
        self.producer.start()
        self.producer.wait_for_more_acks()
        return self.producer


def create_replicated_topic(client_config: dict[str, str], partitions: int = PARTITIONS) -> None:
    """Create the topic. librdkafka may drop its bootstrap connection (the one the request went on)
    when the cluster's metadata names the same brokers, failing the request with _DESTROY_BROKER
    though the broker may have created the topic (likelier when each connection authenticates first):
    asked again, and an existing topic is then the answer wanted."""
    admin = AdminClient(client_config)
    for attempt in range(3):
        topic = NewTopic(TOPIC, partitions, REPLICATION_FACTOR, config={
            "min.insync.replicas": str(MIN_INSYNC_REPLICAS), "segment.bytes": str(SEGMENT_BYTES)})
        try:
            # 30 s for the 3-partition topic; creating 1,000 partitions on the local stack took 13 s
            # on a busy 2-core machine (docs/performance.md, Scale), and more under heavier load.
            admin.create_topics([topic])[TOPIC].result(timeout=max(30.0, partitions * 0.12))
            return
        except KafkaException as exc:
            code = exc.args[0].code()
            if attempt and code == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if code != KafkaError._DESTROY_BROKER or attempt == 2:
                raise


@contextmanager
def fault_cluster(directory: Path, overrides: dict[str, str] | None = None,
                  partitions: int = PARTITIONS) -> Iterator[FaultCluster]:
    """Three brokers, the replicated topic created with every replica in sync, nothing produced yet."""
    with running_stack(directory / "stack", brokers=BROKERS, overrides=overrides, security=SECURITY) as stack:
        create_replicated_topic(stack.client_config, partitions)
        cluster = FaultCluster(stack=stack, store=MetadataStore(stack.aws), scratch=directory / "replicas",
                               partition_count=partitions)
        cluster.wait_for_full_isr()
        try:
            yield cluster
        finally:
            if cluster.producer is not None:
                cluster.producer.stop(timeout_s=0)
            for broker_id in sorted(cluster.paused):
                cluster.resume(broker_id)


# the faults --------------------------------------------------------------------------------------


def stop_then_restart(cluster: FaultCluster, role: Role, sig: signal.Signals) -> int:
    """Stop the broker in ``role``, show the other two take writes without it, then restart it."""
    broker_id = cluster.broker_in(role)
    cluster.stop_broker(broker_id, sig)
    cluster.wait_for_leaders_other_than(broker_id)
    cluster.producer.wait_for_more_acks()
    cluster.restart(broker_id)
    return broker_id


def bounce(cluster: FaultCluster, role: Role, sig: signal.Signals, times: int = 5) -> list[int]:
    """Stop and at once restart the broker in ``role`` (found afresh each time), ``times`` times,
    waiting between bounces until every replica is back in sync and the producer makes progress."""
    bounced = []
    for _ in range(times):
        broker_id = cluster.broker_in(role)
        cluster.stop_broker(broker_id, sig)
        cluster.restart(broker_id)
        bounced.append(broker_id)
        cluster.wait_for_full_isr()
        cluster.producer.wait_for_more_acks()
    return bounced


@dataclass
class PausedLeaderProbe:
    """What happened around a leader paused (SIGSTOP) past the session timeout."""

    paused_broker: int
    new_leader: int
    paused_for_s: float
    probe_value: bytes
    probe_error: ErrorCode
    probe_offset: int

    @property
    def acknowledged(self) -> dict[bytes, tuple[int, int]]:
        return {self.probe_value: (0, self.probe_offset)} if self.probe_error == ErrorCode.none else {}


def pause_leader(cluster: FaultCluster, pause_s: float = 2 * SESSION_TIMEOUT_S) -> PausedLeaderProbe:
    """SIGSTOP the leader of partition 0 until another broker leads it and at least ``pause_s`` has
    passed, then SIGCONT it with an acks=all Produce for partition 0 already waiting in its socket:
    the old leader handles it before it can have read the new metadata, so only the leader epoch and
    the HW rule stand between that write and an acknowledgement the new leader knows nothing of."""
    old_leader = cluster.broker_in(Role.LEADER)
    host, port = cluster.address(old_leader)
    probe_value = f"paused-leader-probe-{uuid.uuid4().hex[:8]}".encode()

    async def probe() -> PausedLeaderProbe:
        connection = BrokerConnection(host, port, request_timeout_s=60, security=cluster.security)
        await connection.connect()
        try:
            cluster.pause(old_leader)
            paused_at = time.monotonic()
            await asyncio.to_thread(cluster.wait_until, "a new leader for partition 0",
                                    lambda: cluster.partition(0).leader not in (old_leader, -1))
            await asyncio.sleep(max(0.0, pause_s - (time.monotonic() - paused_at)))
            sent = asyncio.create_task(send_produce(connection, TOPIC, 0, probe_value, timeout_ms=10_000))
            await asyncio.sleep(0.2)
            paused_for = time.monotonic() - paused_at
            cluster.resume(old_leader)
            error, offset = produce_outcome(await sent)
        finally:
            await connection.close()
        return PausedLeaderProbe(old_leader, cluster.partition(0).leader, paused_for, probe_value, error, offset)

    return asyncio.run(probe())


@dataclass
class TwoReplicasDownProbe:
    """acks=all produce attempts on the last live replica of partition 0 and the HW after each."""

    leader: int
    killed: list[int]
    high_watermark_before: int
    # The furthest log end the dead followers' files reached. Records below it were replicated
    # before they died: a leader may still commit those (Kafka does when the controller drops one
    # follower from the ISR before the other), but nothing beyond.
    replicated_end: int
    attempts: list[tuple[ErrorCode, int]] = field(default_factory=list)  # (produce error, HW after it)

    @property
    def errors(self) -> list[ErrorCode]:
        return [error for error, _ in self.attempts]

    @property
    def high_watermarks(self) -> set[int]:
        return {hw for _, hw in self.attempts}


def kill_both_followers(cluster: FaultCluster, refusals_wanted: int = 3,
                        timeout_s: float = 6 * SESSION_TIMEOUT_S) -> TwoReplicasDownProbe:
    """SIGKILL the two followers of partition 0, then keep sending acks=all produces (one record,
    1 s timeout) to its leader and reading its HW, until NOT_ENOUGH_REPLICAS came back
    ``refusals_wanted`` times in a row or ``timeout_s`` passed (the controller must first fence
    them, which takes a session timeout, and two if it was one of them)."""
    leader = cluster.broker_in(Role.LEADER)
    followers = [b for b in cluster.partition(0).replicas if b != leader]
    for broker_id in followers:
        cluster.stop_broker(broker_id, signal.SIGKILL)
    host, port = cluster.address(leader)
    error, hw = high_watermark_of(host, port, TOPIC, 0, security=cluster.security)
    assert error == ErrorCode.none, f"ListOffsets on the leader answered {error.name}"
    ends = [log_end_offset_on_disk(cluster.stack.processes[b].data_dir / f"{TOPIC}-0") for b in followers]
    assert None not in ends, f"the dead followers' logs of partition 0 are unreadable: {ends}"
    probe = TwoReplicasDownProbe(leader, followers, hw, max(ends))
    deadline = time.monotonic() + timeout_s
    refusals = 0
    while refusals < refusals_wanted and time.monotonic() < deadline:
        value = f"two-down-probe-{uuid.uuid4().hex[:8]}".encode()
        error, _ = produce_directly(host, port, TOPIC, 0, value, timeout_ms=1000, security=cluster.security)
        _, hw = high_watermark_of(host, port, TOPIC, 0, security=cluster.security)
        probe.attempts.append((error, hw))
        refusals = refusals + 1 if error == ErrorCode.not_enough_replicas else 0
    return probe
