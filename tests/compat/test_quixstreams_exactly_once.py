"""A stateful quixstreams application with processing_guarantee="exactly-once" counts exactly on Floe
across a SIGKILL of its process and the loss of its local state.

examples/quixstreams_exactly_once.py runs as a real process against a local stack while a producer
feeds its input topic at a steady pace. Once some of its output is committed, the test freezes it
(SIGSTOP) until it catches it inside a transaction that has output records in the log (the
coordinator describes the transaction as Ongoing, and an output partition's last stable offset is
below its high watermark), kills it there with SIGKILL, deletes its state directory and starts it
again. The restarted instance fences the old one (same transactional id), rebuilds its counts from
the committed records of the state store's changelog, and resumes from the committed input offsets.
A read_committed reader of the output topic must then see, for every key, the counts 1, 2, ..., n
for its n input records, each input record's sequence number exactly once, in input order: nothing
lost, nothing counted twice, nothing of the aborted transaction visible.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
import quixstreams  # noqa: F401 - a missing quixstreams fails here, loudly (`make venv` installs it)
from confluent_kafka import Consumer, IsolationLevel, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from broker_core.transactions.cli import describe_transaction
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

pytestmark = pytest.mark.faults

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quixstreams_exactly_once.py"
INPUT = "clicks"
OUTPUT = "click-counts"
GROUP = "click-counter"
TRANSACTIONAL_ID = f"{GROUP}-0"  # the example's <group>-<instance>
PARTITIONS = 2
KEYS = 12
TOTAL = 3000
KILL_AFTER = 300  # committed outputs seen before the counter is caught inside a transaction and killed
PACE = 300  # input records per second: the input keeps flowing while the counter is killed and restarted
BROKERS = 3


class InputFeeder(threading.Thread):
    """Produces records ``{"seq": n}`` keyed ``user-<n mod KEYS>`` at a steady pace."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            started = time.monotonic()
            for seq in range(TOTAL):
                self.producer.produce(INPUT, key=key_of(seq), value=json.dumps({"seq": seq}))
                self.producer.poll(0)
                ahead = seq / PACE - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
            if self.producer.flush(30) != 0:
                raise RuntimeError("input records left unsent")
        except BaseException as error:  # reported by the test thread
            self.error = error


class CommittedOutput:
    """Everything a read_committed consumer has read from the output topic so far, per key."""

    def __init__(self, bootstrap: str, isolation: str = "read_committed") -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"checker-{isolation}",
                                  "enable.auto.commit": False, "isolation.level": isolation})
        self.consumer.assign([TopicPartition(OUTPUT, p, 0) for p in range(PARTITIONS)])
        self.by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self.total = 0

    def read(self, seconds: float) -> int:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            message = self.consumer.poll(min(left, 0.2))
            if message is None:
                continue
            if message.error() is not None:
                raise KafkaException(message.error())
            value = json.loads(message.value())
            self.by_key[message.key().decode()].append((value["count"], value["seq"]))
            self.total += 1
        return self.total

    def close(self) -> None:
        self.consumer.close()


def caught_inside_a_transaction(counter: subprocess.Popen, bootstrap: str) -> bool:
    """Freeze the counter; True if it is inside a transaction with output records in the log, else resume it."""
    counter.send_signal(signal.SIGSTOP)
    described = describe_transaction(argparse.Namespace(bootstrap_servers=bootstrap, stack=None, request_timeout=10,
                                                        transactional_id=TRANSACTIONAL_ID))
    if described["state"] == "Ongoing":
        admin = AdminClient({"bootstrap.servers": bootstrap})
        partitions = [TopicPartition(OUTPUT, p) for p in range(PARTITIONS)]
        stable = admin.list_offsets({tp: OffsetSpec.latest() for tp in partitions},
                                    isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=10)
        ends = admin.list_offsets({tp: OffsetSpec.latest() for tp in partitions},
                                  isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=10)
        if any(stable[tp].result().offset < ends[tp].result().offset for tp in stable):
            return True
    counter.send_signal(signal.SIGCONT)
    time.sleep(0.2)
    return False


def key_of(seq: int) -> str:
    return f"user-{seq % KEYS}"


def start_counter(bootstrap: str, state_dir: Path, log_path: Path) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--bootstrap-servers", bootstrap, "--group", GROUP, "--input", INPUT,
             "--output", OUTPUT, "--state-dir", str(state_dir), "--commit-interval", "0.5"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def log_tail(log_path: Path) -> str:
    return "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])


def test_an_exactly_once_counter_counts_exactly_across_a_sigkill_and_lost_state(tmp_path: Path) -> None:
    with running_stack(tmp_path / "stack", brokers=BROKERS) as stack:
        bootstrap = stack.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(INPUT, PARTITIONS, BROKERS),
                                           NewTopic(OUTPUT, PARTITIONS, BROKERS)]).values():
            future.result(30)
        del admin  # no client outlives the stack
        state_dir, log_path = tmp_path / "state", tmp_path / "counter.log"
        committed = CommittedOutput(bootstrap)
        feeder = InputFeeder(bootstrap)
        counter = start_counter(bootstrap, state_dir, log_path)
        try:
            wait_until(lambda: "is now processing" in log_path.read_text(errors="replace") or counter.poll() is not None,
                       lambda: f"the counter started\n{log_tail(log_path)}", timeout_s=60)
            feeder.start()
            wait_until(lambda: committed.read(0.3) >= KILL_AFTER or counter.poll() is not None,
                       lambda: f"{KILL_AFTER} committed outputs (have {committed.total})\n{log_tail(log_path)}",
                       timeout_s=90, interval_s=0)
            assert counter.poll() is None, log_tail(log_path)
            wait_until(lambda: caught_inside_a_transaction(counter, bootstrap),
                       "the counter frozen inside a transaction with output records", timeout_s=60, interval_s=0)
            counter.send_signal(signal.SIGKILL)
            counter.wait(10)
            killed_at = committed.read(0.5)
            assert killed_at < TOTAL, "the counter finished before it was killed: nothing was tested"
            assert any(state_dir.rglob("*")), "the counter kept no local state to lose"
            shutil.rmtree(state_dir)

            counter = start_counter(bootstrap, state_dir, log_path)
            wait_until(lambda: committed.read(0.5) >= TOTAL or counter.poll() is not None,
                       lambda: f"{TOTAL} committed outputs (have {committed.total})\n{log_tail(log_path)}",
                       timeout_s=120, interval_s=0)
            feeder.join(30)
            assert feeder.error is None, feeder.error
            counter.send_signal(signal.SIGTERM)
            assert counter.wait(30) == 0, log_tail(log_path)
        finally:
            if counter.poll() is None:
                counter.kill()
                counter.wait(10)
            feeder.join(30)
            del feeder
        committed.read(1.5)  # anything past the expected outputs would be a duplicate
        committed.close()
        everything = CommittedOutput(bootstrap, isolation="read_uncommitted")
        written = everything.read(1.5)
        everything.close()

    expected: dict[str, list[int]] = defaultdict(list)
    for seq in range(TOTAL):
        expected[key_of(seq)].append(seq)
    # The last committed count of every key is its true count ...
    assert {key: outputs[-1][0] for key, outputs in committed.by_key.items()} == {
        key: len(seqs) for key, seqs in expected.items()}
    # ... reached through every count once, each input record counted once, in input order.
    for key, seqs in expected.items():
        assert committed.by_key[key] == [(n + 1, seq) for n, seq in enumerate(seqs)], key
    assert committed.total == TOTAL
    # The transaction the SIGKILL cut short had output records in the log; they were aborted, so only a
    # read_uncommitted reader sees them.
    assert written > committed.total
    print(f"killed with {killed_at} outputs committed; output records written {written}, "
          f"committed {committed.total}, aborted {written - committed.total}")
