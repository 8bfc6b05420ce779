"""A quixstreams state store backed by a compacted changelog on Floe, restored after its local state is deleted.

A quixstreams Application counts records per key with a RocksDB state store; quixstreams creates
the store's changelog topic itself (cleanup.policy=compact) and writes every state change to it. The
broker rolls segments at 4 KiB and cleans at a dirty ratio of 1%, so the changelog is compacted while
the application runs. After three runs (the third one with the local state directory deleted first)
every key's count is the number of records it got in all three: the third run rebuilt its state from
the compacted changelog alone. quixstreams pins confluent-kafka below the version Floe uses, so
`make venv` installs it with --no-deps (see the Makefile) and the test runs it with the project's
confluent-kafka; a missing quixstreams fails the import below. It starts a broker and takes about
half a minute, so it runs in `make faults`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import quixstreams
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker_core.log.cleaner import CLEANER_CHECKPOINT_FILE
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

pytestmark = pytest.mark.faults

TOPIC = "clicks"
GROUP = "click-counter"
CHANGELOG = f"changelog__{GROUP}--{TOPIC}--default"
KEYS = 10
PER_ROUND = 300
OVERRIDES = {"log.cleaner.backoff.ms": "100", "log.segment.bytes": "4096",
             "log.cleaner.min.cleanable.ratio": "0.01"}


def produce_round(bootstrap: str, round_number: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for number in range(PER_ROUND):
        producer.produce(TOPIC, key=f"user-{number % KEYS}", value=json.dumps({"round": round_number, "n": number}))
    assert producer.flush(30) == 0


def run_counter(bootstrap: str, state_dir: Path) -> dict[str, int]:
    """Process one round's records; return the last count the application saw per key."""
    app = quixstreams.Application(broker_address=bootstrap, consumer_group=GROUP, auto_offset_reset="earliest",
                                  state_dir=str(state_dir), commit_every=10)
    sdf = app.dataframe(app.topic(TOPIC, value_deserializer="json", key_deserializer="str"))
    seen: dict[str, int] = {}

    def count(value: dict, key: str, timestamp: int, headers: object, state: object) -> dict:
        total = state.get("count", 0) + 1
        state.set("count", total)
        seen[key] = total
        return value

    sdf.apply(count, stateful=True, metadata=True)
    app.run(count=PER_ROUND, timeout=60)
    return seen


def changelog_records(bootstrap: str) -> tuple[int, int]:
    """(records a consumer reads from the changelog's start, offsets written to it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "changelog-reader", "enable.auto.commit": False})
    partition = TopicPartition(CHANGELOG, 0, 0)
    low, high = consumer.get_watermark_offsets(partition, timeout=10)
    consumer.assign([partition])
    count = 0
    while True:
        message = consumer.poll(5)
        if message is None:
            break
        assert message.error() is None, message.error()
        count += 1
        if message.offset() >= high - 1:
            break
    consumer.close()
    return count, high


def test_a_counter_restores_its_state_from_the_compacted_changelog(tmp_path: Path) -> None:
    with running_stack(tmp_path / "stack", overrides=OVERRIDES) as stack:
        bootstrap = stack.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        state_dir = tmp_path / "state"
        for round_number in range(2):
            produce_round(bootstrap, round_number)
            seen = run_counter(bootstrap, state_dir)
            assert seen == {f"user-{key}": PER_ROUND // KEYS * (round_number + 1) for key in range(KEYS)}
        configs = admin.describe_configs([quixstreams_resource(CHANGELOG)])
        (described,) = configs.values()
        assert described.result(30)["cleanup.policy"].value == "compact"
        changelog_dir = stack.processes[1].data_dir / f"{CHANGELOG}-0"
        wait_until(lambda: (changelog_dir / CLEANER_CHECKPOINT_FILE).exists(), "the changelog compacted",
                   timeout_s=60)
        kept, written = changelog_records(bootstrap)
        assert KEYS <= kept < written  # every key is still there, older changes were compacted away

        shutil.rmtree(state_dir)
        produce_round(bootstrap, 2)
        seen = run_counter(bootstrap, state_dir)
        assert seen == {f"user-{key}": PER_ROUND // KEYS * 3 for key in range(KEYS)}


def quixstreams_resource(topic: str) -> object:
    from confluent_kafka.admin import ConfigResource, ResourceType

    return ConfigResource(ResourceType.TOPIC, topic)
