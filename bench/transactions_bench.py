"""Transactional produce against idempotent produce: the cost of the transaction coordinator.

One local stack (moto server and --brokers brokers), a topic of 6 partitions. Each run measures, in
the same stack and alternating which goes first, two confluent-kafka producers sending the same
records (--value-bytes values, keyed round-robin over the partitions) as fast as librdkafka takes
them for --seconds:
- idempotent: enable.idempotence, one flush at the end;
- transactional: the same settings plus a transactional.id, committing every --commit-ms
  (begin, produce until the interval has passed, commit_transaction), so each transaction pays
  AddPartitionsToTxn, the leader's KIP-890 check, EndTxn and the markers.
Throughput is acknowledged records per second (the transactional count includes only committed
transactions). The ratio transactional/idempotent is reported per run and as the median over
--runs runs; the goal is >= 0.9.

Writes bench/results/transactions_bench.json.

    .venv/bin/python bench/transactions_bench.py [--runs 3] [--seconds 5] [--commit-ms 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from confluent_kafka import Producer  # noqa: E402

from bench.machine import result_header, write_result  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.metadata.store import MetadataStore  # noqa: E402

PARTITIONS = 6
STACK_OVERRIDES = {"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "1000",
                   "metadata.poll.interval.ms": "500"}


def _settings(bootstrap: str) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "batch.num.messages": 10000, "queue.buffering.max.messages": 200000}


def idempotent_rate(bootstrap: str, topic: str, seconds: float, value: bytes) -> float:
    producer = Producer(_settings(bootstrap))
    delivered = [0]

    def on_delivery(err: object, _msg: object) -> None:
        if err is None:
            delivered[0] += 1

    started = time.monotonic()
    sent = 0
    while time.monotonic() - started < seconds:
        try:
            producer.produce(topic, value=value, partition=sent % PARTITIONS, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)
    return delivered[0] / (time.monotonic() - started)


def transactional_rate(bootstrap: str, topic: str, seconds: float, value: bytes, commit_ms: int) -> float:
    producer = Producer({**_settings(bootstrap), "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    committed = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        producer.begin_transaction()
        opened = time.monotonic()
        in_transaction = 0
        while (time.monotonic() - opened) * 1000 < commit_ms:
            try:
                producer.produce(topic, value=value, partition=in_transaction % PARTITIONS)
                in_transaction += 1
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        producer.commit_transaction(60)
        committed += in_transaction
    return committed / (time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--commit-ms", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--brokers", type=int, default=1)
    args = parser.parse_args()
    value = b"x" * args.value_bytes
    runs = []
    with tempfile.TemporaryDirectory(prefix="txn-bench-") as directory:
        stack = LocalStack(directory=Path(directory), brokers=args.brokers, overrides=STACK_OVERRIDES)
        stack.start()
        try:
            topic = "bench-transactions"
            MetadataStore(stack.aws).create_topic(topic, PARTITIONS, 1, {})
            time.sleep(2)
            for run in range(args.runs):
                order = ("idempotent", "transactional") if run % 2 == 0 else ("transactional", "idempotent")
                rates = {}
                for kind in order:
                    if kind == "idempotent":
                        rates[kind] = idempotent_rate(stack.bootstrap_servers, topic, args.seconds, value)
                    else:
                        rates[kind] = transactional_rate(stack.bootstrap_servers, topic, args.seconds, value,
                                                         args.commit_ms)
                rates["ratio"] = rates["transactional"] / rates["idempotent"]
                runs.append(rates)
                print(f"run {run + 1}: idempotent {rates['idempotent']:.0f}/s, transactional "
                      f"{rates['transactional']:.0f}/s, ratio {rates['ratio']:.2f}", flush=True)
        finally:
            stack.stop(save_state=False)
    result = {
        **result_header("transactions_bench"),
        "settings": {"runs": args.runs, "seconds": args.seconds, "commit_ms": args.commit_ms,
                     "value_bytes": args.value_bytes, "brokers": args.brokers, "partitions": PARTITIONS},
        "runs": runs,
        "median_idempotent_records_per_s": statistics.median(r["idempotent"] for r in runs),
        "median_transactional_records_per_s": statistics.median(r["transactional"] for r in runs),
        "median_ratio": statistics.median(r["ratio"] for r in runs),
        "goal_ratio": 0.9,
    }
    write_result(REPO_ROOT / "bench" / "results" / "transactions_bench.json", result)
    print(f"median ratio transactional/idempotent: {result['median_ratio']:.2f} (goal >= 0.9)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
