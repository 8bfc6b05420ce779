"""A transactions checker in the style of Jepsen's Kafka workload.

Three brokers, a replicated topic. Several transactional producers (threads, confluent-kafka) loop:
begin, write a few records (each names its producer, transaction and index) to random partitions,
then commit or abort at random, recording what each transaction was told (committed, aborted, or
unknown when the outcome could not be learnt). A read_committed consumer reads all along, and on
to the end once every transaction has ended.

Two runs of faults. In the first, the producers are all coordinated by broker 3, which is SIGKILLed
mid-run and later restarted (twice in the full run). In the nemesis run (``make faults``) four faults
follow one another: SIGKILL of a producer's transaction coordinator, SIGSTOP of one (longer than the
broker session), SIGKILL of the broker leading the most partitions, SIGKILL of the controller; a
consume-transform-produce stage copies the checked topic transactionally (offsets committed in the
transaction) into a second topic all along.

At the end a fresh read_committed consumer reads everything, and for both consumers the checker
asserts: no aborted read (no record of an aborted transaction), no lost committed write (every
record of a committed transaction), no torn transaction (of every transaction all records or
none), no duplicate, and that every transaction ends (no Ongoing or Prepare* state remains once
the transaction timeout has passed). Of the copy it asserts that a read_committed reader sees every
committed record exactly once and nothing else.
"""

from __future__ import annotations

import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from broker_core.client import BlockingConnection
from broker_core.local_stack import LocalStack
from broker_core.metadata.controller import ControllerLease
from broker_core.metadata.store import MetadataStore
from broker_core.protocol.api_keys import ApiKey
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

PARTITIONS = 6
TRANSACTION_TIMEOUT_MS = 8000


@dataclass
class History:
    """What the producers were told about each transaction, and what the consumers read."""

    outcomes: dict[str, str] = field(default_factory=dict)  # transaction -> committed|aborted|unknown
    written: dict[str, set[bytes]] = field(default_factory=dict)  # transaction -> its record values
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def checker_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    overrides = {"floe.transaction.marker.retry.backoff.ms": "100", "default.replication.factor": "2",
                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
    with running_stack(tmp_path_factory.mktemp("txn-checker"), brokers=3, overrides=overrides) as stack:
        yield stack


def _request(stack: LocalStack, broker_id: int, api_key: ApiKey, data: dict, version: int) -> object:
    connection = BlockingConnection("127.0.0.1", stack.processes[broker_id].port, request_timeout_s=10)
    try:
        return connection.request(api_key, data, version)
    finally:
        connection.close()


def _producer_loop(stack: LocalStack, topic: str, transactional_id: str, history: History,
                   stopping: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    settings = {"bootstrap.servers": stack.bootstrap_servers, "transactional.id": transactional_id,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, "linger.ms": 2}
    producer: Producer | None = None
    number = 0
    while not stopping.is_set():
        try:
            if producer is None:
                producer = Producer(settings)
                producer.init_transactions(30)
        except KafkaException:
            producer = None
            time.sleep(0.5)
            continue
        number += 1
        name = f"{transactional_id}/{number}"
        values = {f"{name}/{i}".encode() for i in range(rng.randint(1, 5))}
        with history.lock:
            history.written[name] = values
            history.outcomes[name] = "unknown"
        try:
            producer.begin_transaction()
            for value in sorted(values):
                producer.produce(topic, value=value, partition=rng.randrange(PARTITIONS))
            if rng.random() < 0.7:
                producer.commit_transaction(30)
                outcome = "committed"
            else:
                producer.abort_transaction(30)
                outcome = "aborted"
        except KafkaException as exc:
            error = exc.args[0]
            outcome = "unknown"
            if error.txn_requires_abort():
                try:
                    producer.abort_transaction(30)
                    outcome = "aborted"
                except KafkaException:
                    producer = None
            elif not error.retriable():
                producer = None  # fatal (fenced, timed out): a new instance fences this one
        with history.lock:
            history.outcomes[name] = outcome


def _read_all(stack: LocalStack, topic: str, stopping: threading.Event | None, read: list[bytes]) -> None:
    """Read ``topic`` read_committed into ``read``: until ``stopping`` is set and the end is reached
    (or, without ``stopping``, until the end)."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": f"checker-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    at_end: set[int] = set()
    deadline = None
    try:
        while True:
            message = consumer.poll(0.2)
            if message is not None:
                if message.error() is None:
                    read.append(message.value())
                    at_end.discard(message.partition())
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
            if stopping is None or stopping.is_set():
                deadline = deadline or time.monotonic() + 60
                if len(at_end) == PARTITIONS or time.monotonic() > deadline:
                    return
    finally:
        consumer.close()


def _finish(stack: LocalStack, topic: str, transactional_ids: list[str], stopping: threading.Event,
            producers: list[threading.Thread], reader: threading.Thread, settled: threading.Event) -> list[bytes]:
    """Stop the producers, wait until every transaction has ended, let the live consumer finish, and
    return what a fresh read_committed consumer reads of ``topic``.

    The live consumer finishes only once every transaction has ended: before that a read_committed
    reader may rightly see part of a committed transaction, whose markers reach its partitions one
    by one (Kafka promises all or none once the transaction is complete, not at every instant)."""
    stopping.set()
    for thread in producers:
        thread.join(timeout=120)
        assert not thread.is_alive(), f"{thread.name} did not stop"

    def all_ended() -> bool:
        listed = _request(stack, 1, ApiKey.LIST_TRANSACTIONS, {
            "state_filters": ("Ongoing", "PrepareCommit", "PrepareAbort"), "producer_id_filters": (),
            "duration_filter": -1}, 1)
        return not [t for t in listed.transaction_states if t.transactional_id in transactional_ids]

    wait_until(all_ended, timeout_s=TRANSACTION_TIMEOUT_MS / 1000 + 30, interval_s=0.5,
               what="every transaction to end (commit or abort)")
    settled.set()
    reader.join(timeout=120)
    assert not reader.is_alive(), "the live consumer did not reach the end"
    final_read: list[bytes] = []
    _read_all(stack, topic, None, final_read)
    return final_read


def _check(history: History, read: list[bytes], who: str, complete: bool) -> None:
    counts = Counter(read)
    duplicates = [v for v, n in counts.items() if n > 1]
    assert not duplicates, f"{who}: duplicates {duplicates[:5]}"
    seen = set(read)
    for name, values in history.written.items():
        visible = values & seen
        outcome = history.outcomes[name]
        assert visible in (set(), values), f"{who}: torn transaction {name}: {len(visible)} of {len(values)} read"
        assert not (outcome == "aborted" and visible), f"{who}: read aborted transaction {name}"
        if complete:
            assert not (outcome == "committed" and not visible), f"{who}: lost committed transaction {name}"
    unknown_records = seen - set().union(*history.written.values())
    assert not unknown_records, f"{who}: read records never written: {sorted(unknown_records)[:5]}"


@pytest.mark.parametrize("run_s, kills", [
    pytest.param(12.0, 1, id="reduced"),
    pytest.param(40.0, 2, id="full", marks=pytest.mark.faults),
])
def test_transactions_survive_killing_their_coordinator(checker_stack: LocalStack, run_s: float, kills: int) -> None:
    stack = checker_stack
    topic = f"checked-{uuid.uuid4().hex[:8]}"
    MetadataStore(stack.aws).create_topic(topic, PARTITIONS, 2, {})
    transactional_ids = [f"writer-{i}-{uuid.uuid4().hex[:4]}" for i in range(3)]
    for transactional_id in transactional_ids:
        found = _request(stack, 3, ApiKey.FIND_COORDINATOR,
                         {"key_type": 1, "coordinator_keys": (transactional_id,)}, 4).coordinators[0]
        assert found.node_id == 3

    history = History()
    stopping, settled = threading.Event(), threading.Event()
    live_read: list[bytes] = []
    threads = [threading.Thread(target=_producer_loop, args=(stack, topic, tid, history, stopping, seed), daemon=True)
               for seed, tid in enumerate(transactional_ids)]
    reader = threading.Thread(target=_read_all, args=(stack, topic, settled, live_read), daemon=True)
    for thread in [*threads, reader]:
        thread.start()
    interval = run_s / (kills + 1)
    for _ in range(kills):
        time.sleep(interval / 2)
        stack.kill_broker(3, signal.SIGKILL)
        time.sleep(interval / 2)
        stack.restart_broker(3)
    time.sleep(interval)
    final_read = _finish(stack, topic, transactional_ids, stopping, threads, reader, settled)

    outcomes = Counter(history.outcomes.values())
    assert outcomes["committed"] > 0 and outcomes["aborted"] > 0, outcomes
    _check(history, final_read, "final consumer", complete=True)
    _check(history, live_read, "live consumer", complete=True)


# The nemesis run: every kind of broker the issue names, killed or paused in turn, with a
# consume-transform-produce stage copying the checked topic transactionally into a second one.

NEMESIS_FAULTS = ("kill-coordinator", "pause-coordinator", "kill-leader", "kill-controller")
PAUSE_S = 5.0  # longer than the test profile's broker session: a paused broker is fenced


def _coordinator_of(stack: LocalStack, transactional_id: str) -> int:
    live = sorted(b for b, process in stack.processes.items() if process.alive())
    for broker_id in live:
        try:
            answer = _request(stack, broker_id, ApiKey.FIND_COORDINATOR,
                              {"key_type": 1, "coordinator_keys": (transactional_id,)}, 4).coordinators[0]
        except Exception:  # noqa: BLE001 - a broker being restarted; ask the next one
            continue
        if answer.error_code == 0:
            return answer.node_id
    raise AssertionError(f"no broker names a coordinator for {transactional_id}")


def _leader_of_most(store: MetadataStore, topic: str, avoid: set[int]) -> int:
    leaders = Counter(p.leader for p in store.get_partitions(topic) if p.leader >= 0)
    ranked = [b for b, _ in leaders.most_common() if b not in avoid] or [b for b, _ in leaders.most_common()]
    return ranked[0]


def _copier_loop(stack: LocalStack, source: str, sink: str, stopping: threading.Event, copied: list[bytes],
                 errors: list[str]) -> None:
    """Consume-transform-produce: read ``source`` read_committed and write each record, prefixed, to
    ``sink`` in a transaction that also commits the group's offsets. On any failure the transaction is
    aborted (or the producer dropped) and the consumer rebuilt, so it resumes from the committed offsets."""
    group = f"copier-{uuid.uuid4().hex[:8]}"
    settings = {"bootstrap.servers": stack.bootstrap_servers, "transactional.id": f"copier-{uuid.uuid4().hex[:6]}",
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, "linger.ms": 2}
    producer: Producer | None = None
    consumer: Consumer | None = None
    while not stopping.is_set():
        try:
            if producer is None:
                candidate = Producer(settings)
                candidate.init_transactions(30)  # a producer whose init failed is dropped, not reused
                producer = candidate
            if consumer is None:
                consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": group,
                                     "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                     "enable.auto.commit": False})
                consumer.subscribe([source])
            messages = [m for m in consumer.consume(50, 0.5) if m.error() is None]
            if not messages:
                continue
            producer.begin_transaction()
            for m in messages:
                producer.produce(sink, value=b"copy:" + m.value(), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            copied.extend(m.value() for m in messages)
        except KafkaException as exc:
            error = exc.args[0]
            errors.append(f"{time.strftime('%H:%M:%S')} {error}")
            if producer is not None and error.txn_requires_abort():
                try:
                    producer.abort_transaction(30)
                except KafkaException:
                    producer = None
            elif not error.retriable():
                producer = None
            if consumer is not None:
                consumer.close()  # the next consumer starts from the offsets last committed
                consumer = None
    if consumer is not None:
        consumer.close()


@pytest.mark.faults
def test_transactions_survive_a_nemesis_of_coordinator_leader_and_controller_faults(checker_stack: LocalStack) -> None:
    stack = checker_stack
    store = MetadataStore(stack.aws)
    topic, sink = f"checked-{uuid.uuid4().hex[:8]}", f"copied-{uuid.uuid4().hex[:8]}"
    store.create_topic(topic, PARTITIONS, 2, {})
    store.create_topic(sink, PARTITIONS, 2, {})
    transactional_ids = [f"nemesis-{i}-{uuid.uuid4().hex[:4]}" for i in range(3)]

    history = History()
    stopping, copier_stopping = threading.Event(), threading.Event()
    live_read: list[bytes] = []
    copied: list[bytes] = []
    copier_errors: list[str] = []
    settled = threading.Event()
    threads = [threading.Thread(target=_producer_loop, args=(stack, topic, tid, history, stopping, seed), daemon=True)
               for seed, tid in enumerate(transactional_ids)]
    reader = threading.Thread(target=_read_all, args=(stack, topic, settled, live_read), daemon=True)
    copier = threading.Thread(target=_copier_loop, args=(stack, topic, sink, copier_stopping, copied, copier_errors),
                              daemon=True)
    for thread in [*threads, reader, copier]:
        thread.start()
    done: list[tuple[str, int]] = []
    time.sleep(6)
    for fault in NEMESIS_FAULTS:
        if fault.endswith("coordinator"):
            victim = _coordinator_of(stack, transactional_ids[len(done) % len(transactional_ids)])
        elif fault == "kill-controller":
            victim = ControllerLease(store).current().holder
        else:
            victim = _leader_of_most(store, topic, avoid={ControllerLease(store).current().holder})
        done.append((fault, victim))
        if fault.startswith("pause"):
            stack.kill_broker(victim, signal.SIGSTOP)
            time.sleep(PAUSE_S)
            stack.kill_broker(victim, signal.SIGCONT)
        else:
            stack.kill_broker(victim, signal.SIGKILL)
            time.sleep(PAUSE_S)
            stack.restart_broker(victim)
        time.sleep(6)
    final_read = _finish(stack, topic, transactional_ids, stopping, threads, reader, settled)
    committed = {v for name, values in history.written.items() if history.outcomes[name] == "committed" for v in values}

    # A commit the copier was not told of (its answer lost to a fault) is in the sink but not in
    # ``copied``: wait on what a read_committed reader of the sink sees.
    sink_read: list[bytes] = []

    def copier_caught_up() -> bool:
        sink_read.clear()
        _read_all(stack, sink, None, sink_read)
        return committed <= {v.removeprefix(b"copy:") for v in sink_read}

    try:
        wait_until(copier_caught_up, timeout_s=120, interval_s=2, what="the sink to hold every committed record")
    except AssertionError as error:
        missing = committed - {v.removeprefix(b"copy:") for v in sink_read}
        raise AssertionError(f"{error}: {len(missing)} of {len(committed)} committed records missing, "
                             f"{len(copied)} copied; the copier's last errors: {copier_errors[-8:]}") from None
    finally:
        copier_stopping.set()
        copier.join(timeout=60)
    assert not copier.is_alive(), "the copier did not stop"

    outcomes = Counter(history.outcomes.values())
    assert outcomes["committed"] > 0 and outcomes["aborted"] > 0, outcomes
    assert [fault for fault, _ in done] == list(NEMESIS_FAULTS), done
    _check(history, final_read, "final consumer", complete=True)
    _check(history, live_read, "live consumer", complete=True)
    # The copy: a read_committed reader of the sink sees every committed record once, and nothing else.
    sink_values = [v.removeprefix(b"copy:") for v in sink_read]
    duplicates = [v for v, n in Counter(sink_values).items() if n > 1]
    assert not duplicates, f"consume-transform-produce duplicated {len(duplicates)} records: {duplicates[:5]}"
    assert committed <= set(sink_values), f"the sink lacks {len(committed - set(sink_values))} committed records"
    assert set(sink_values) <= committed, f"the sink holds {len(set(sink_values) - committed)} uncommitted records"
