"""SIGKILL a broker in the middle of log cleaning passes, restart it, and check what compaction promises.

One broker, a compacted topic with small segments, and the cleaner's I/O throttled to 256 KiB/s so a
pass lasts long enough to be hit: each round overwrites every key (acks=all, offsets recorded), waits
until a pass has `.cleaned` or `.swap` files on disk, sleeps a random part of a second and kills the
broker with SIGKILL, then restarts it. After the rounds the broker cleans once more undisturbed and
stops; its directory, opened as a partition log, must hold every key's latest acknowledged value at
the offset it was acknowledged at, offsets strictly increasing, no key twice below the cleaner
checkpoint, and no leftover cleaner files. The seed is printed so a failing run can be replayed.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from broker_core.log import LogConfig, PartitionLog
from broker_core.log.checkpoint import read_offset_checkpoint
from broker_core.log.cleaner import CLEANER_CHECKPOINT_FILE
from broker_core.log.swap import CLEANED_SUFFIX, SWAP_SUFFIX
from broker_core.records import iter_batches
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

pytestmark = pytest.mark.faults

TOPIC = "compacted-under-fire"
KEYS = 300
ROUNDS = 5
VALUE_BYTES = 200
OVERRIDES = {"log.cleaner.backoff.ms": "50", "log.cleaner.io.max.bytes.per.second": str(256 * 1024),
             "log.segment.delete.delay.ms": "0"}
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01"}


def cleaner_files(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]


def produce_round(bootstrap: str, round_number: int, acknowledged: dict[bytes, tuple[int, bytes]]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, retries=0)
    try:
        futures = []
        for key in range(KEYS):
            name = b"key-%d" % key
            value = (b"round %d key %d " % (round_number, key)).ljust(VALUE_BYTES, b".")
            futures.append((name, value, producer.send(TOPIC, key=name, value=value, partition=0)))
        producer.flush(timeout=60)
        for name, value, future in futures:
            acknowledged[name] = (future.get(timeout=30).offset, value)
    finally:
        producer.close()


def test_a_broker_killed_during_cleaning_passes_keeps_every_latest_value_at_its_offset(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    print(f"cleaner fault seed {seed}")
    chance = random.Random(seed)
    acknowledged: dict[bytes, tuple[int, bytes]] = {}
    with running_stack(tmp_path / "stack", overrides=OVERRIDES) as stack:
        admin = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers)
        try:
            admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs=TOPIC_CONFIGS)])
        finally:
            admin.close()
        directory = stack.processes[1].data_dir / f"{TOPIC}-0"
        kills = 0
        left_mid_pass = []
        for round_number in range(ROUNDS):
            produce_round(stack.bootstrap_servers, round_number, acknowledged)
            if round_number == 0:
                continue
            wait_until(lambda: cleaner_files(directory), "a cleaning pass writing its files", timeout_s=60,
                       interval_s=0.005)
            time.sleep(chance.uniform(0, 0.8))
            stack.kill_broker(1, signal.SIGKILL)
            kills += 1
            left_mid_pass.append(cleaner_files(directory))
            stack.restart_broker(1)
        assert kills == ROUNDS - 1
        print(f"cleaner files at each kill: {left_mid_pass}")
        assert any(left_mid_pass), "no kill landed inside a cleaning pass"
        # An undisturbed pass over everything, then a clean stop.
        end = max(offset for offset, _ in acknowledged.values()) + 1
        produce_round(stack.bootstrap_servers, ROUNDS, acknowledged)

        def cleaned_through_last_round() -> bool:
            try:
                checkpoint = read_offset_checkpoint(directory / CLEANER_CHECKPOINT_FILE) or 0
            except OSError:
                return False
            return checkpoint >= end and not cleaner_files(directory)

        wait_until(cleaned_through_last_round, "the cleaner passing the killed rounds", timeout_s=120)
    checkpoint = read_offset_checkpoint(directory / CLEANER_CHECKPOINT_FILE)
    assert cleaner_files(directory) == []
    log = PartitionLog.open(directory, LogConfig(cleanup_policy="compact"), topic=TOPIC)
    try:
        records = []
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read_bytes(offset, 1 << 20)
            assert data, f"nothing readable at offset {offset} below the log end {log.log_end_offset}"
            for batch in iter_batches(data):
                records.extend((r.offset, r.key, r.value) for r in batch.records)
                offset = batch.header.next_offset
    finally:
        log.close()
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(set(offsets))
    latest = {key: (offset, value) for offset, key, value in records}
    assert latest == acknowledged
    below = [key for offset, key, _ in records if offset < checkpoint]
    assert len(below) == len(set(below))
