"""KafkaJS's transactional producer, consume-transform-produce and read_committed consumer against Floe.

The client runs unchanged in Node.js (tests/compat/kafkajs/transactions.js, KafkaJS from the npm
registry, installed by `make`): a commit, an abort and a commit over three partitions; a
consume-transform-produce stage that commits the group's offsets in each transaction; a
read_committed group consumer. What KafkaJS reads is checked against confluent-kafka's read_committed
view of the same topics and against the group's committed offsets.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from tests.support.stack import running_stack

# Runs in `make faults`, not in `make test`: a fourth client's pass over the transactions that
# test_transactions_confluent.py checks in the default suite, which must stay under CI's budget.
pytestmark = pytest.mark.faults

PARTITIONS = 3
SCRIPT_DIR = Path(__file__).parent / "kafkajs"


@pytest.fixture(scope="module")
def kafkajs_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    if shutil.which("node") is None or not (SCRIPT_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.fail("Node.js and KafkaJS are needed: `make faults` installs KafkaJS with npm ci")
    overrides = {"floe.transaction.marker.retry.backoff.ms": "100"}
    with running_stack(tmp_path_factory.mktemp("kafkajs-txn"), overrides=overrides) as stack:
        yield stack


def _kafkajs(*args: str) -> dict:
    done = subprocess.run(["node", str(SCRIPT_DIR / "transactions.js"), *args], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, f"KafkaJS {args[0]} failed:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def _read_committed(stack: LocalStack, topic: str) -> list[str]:
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: list[str] = []
    at_end: set[int] = set()
    try:
        while len(at_end) < PARTITIONS:
            message = consumer.poll(10)
            assert message is not None, f"no end of {topic} within 10 s; read {values}"
            if message.error() is None:
                values.append(message.value().decode())
            else:
                at_end.add(message.partition())
        return values
    finally:
        consumer.close()


def _committed_offsets(stack: LocalStack, group: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)]
    finally:
        consumer.close()


def _end_offsets(stack: LocalStack, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "ends"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(PARTITIONS)]
    finally:
        consumer.close()


def test_kafkajs_transactions_commit_abort_and_consume_transform_produce(kafkajs_stack: LocalStack) -> None:
    stack = kafkajs_stack
    store = MetadataStore(stack.aws)
    source, sink = f"js-src-{uuid.uuid4().hex[:8]}", f"js-sink-{uuid.uuid4().hex[:8]}"
    store.create_topic(source, PARTITIONS, 1, {})
    store.create_topic(sink, PARTITIONS, 1, {})
    bootstrap = stack.bootstrap_servers

    written = _kafkajs("produce", bootstrap, source, f"js-writer-{uuid.uuid4().hex[:6]}")
    assert len(written["committed"]) == 15 and len(written["aborted"]) == 5
    assert sorted(_read_committed(stack, source)) == sorted(written["committed"])

    group = f"js-ctp-{uuid.uuid4().hex[:8]}"
    transformed = _kafkajs("transform", bootstrap, source, sink, group, f"js-ctp-{uuid.uuid4().hex[:6]}", "15")
    assert transformed["transformed"] == 15
    assert sorted(_read_committed(stack, sink)) == sorted(f"t-{v}" for v in written["committed"])
    # The offsets committed in the transactions are past every committed record of each partition:
    # its end, or the end less the last transaction's marker when that one was an abort.
    committed, ends = _committed_offsets(stack, group, source), _end_offsets(stack, source)
    assert all(0 < c <= e for c, e in zip(committed, ends, strict=True)), (committed, ends)

    read = _kafkajs("consume", bootstrap, sink, f"js-reader-{uuid.uuid4().hex[:8]}", "15")
    assert sorted(read["values"]) == sorted(f"t-{v}" for v in written["committed"])
