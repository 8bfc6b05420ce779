"""Consume-transform-produce on Floe: exactly-once (transactions) against at-least-once, same run.

One local stack (moto server and --brokers brokers), an input topic and one output topic per mode,
--partitions partitions each. Both loops are the same confluent-kafka program, one process, one
consumer (isolation.level=read_committed, partitions assigned, no group rebalance) and one producer:
- exactly-once: a transactional producer; every --commit-ms it sends the consumer's positions with
  sendOffsetsToTransaction and commits (begin, transform and produce, send offsets, commit), as
  Kafka Streams does with processing.guarantee=exactly_once_v2 and commit.interval.ms=100;
- at-least-once: an idempotent producer (acks=all); every --commit-ms it flushes the producer and
  then commits the consumer's positions (OffsetCommit), the usual at-least-once loop.
The transform appends a suffix to the value.

Each run measures, alternating which mode goes first:
- throughput: --records records (--value-bytes each) are loaded into the input first; the loop
  starts at their first offset and the clock stops when it has committed all of them (the output
  visible to read_committed readers and the input offsets committed);
- latency: the loop runs at the input's end while a producer writes --rate records/s for
  --latency-seconds, each value carrying its send time; a read_committed consumer of the output
  takes the time each transformed record becomes visible. End-to-end latency = visible - sent
  (one clock: the same machine). p50 and p99.
Medians over --runs runs; the ratios exactly-once / at-least-once are printed.

Writes bench/results/ctp_bench.json.

    .venv/bin/python bench/ctp_bench.py [--runs 3] [--records 20000] [--rate 1000] [--latency-seconds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402

from bench.machine import result_header, write_result  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.metadata.store import MetadataStore  # noqa: E402

STACK_OVERRIDES = {"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "1000",
                   "metadata.poll.interval.ms": "500"}
SENT_AT = struct.Struct(">d")  # the value starts with its send time (time.time())
SUFFIX = b"|transformed"
MODES = ("exactly_once", "at_least_once")


def _consumer(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 10,
                         "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
    return consumer


class TransformLoop(threading.Thread):
    """The consume-transform-produce loop of one mode, from ``offsets`` of the input until ``stop``
    is set or, with ``until``, every partition's committed position has reached ``until``."""

    def __init__(self, mode: str, bootstrap: str, source: str, sink: str, offsets: dict[int, int],
                 commit_ms: int, until: dict[int, int] | None = None) -> None:
        super().__init__(daemon=True)
        self.mode, self.sink, self.commit_ms, self.until = mode, sink, commit_ms, until
        group = f"ctp-{mode}-{uuid.uuid4().hex[:8]}"
        self.consumer = _consumer(bootstrap, group, source, offsets)
        settings = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                    "batch.num.messages": 10000, "queue.buffering.max.messages": 500000}
        if mode == "exactly_once":
            settings["transactional.id"] = group
        self.producer = Producer(settings)
        if mode == "exactly_once":
            self.producer.init_transactions(30)
        self.stop = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.processed = 0

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as error:  # reported by the caller
            self.error = error
        finally:
            self.done.set()

    def _loop(self) -> None:
        transactional = self.mode == "exactly_once"
        while not self.stop.is_set():
            if transactional:
                self.producer.begin_transaction()
            opened = time.monotonic()
            pending = 0
            while (time.monotonic() - opened) * 1000 < self.commit_ms:
                for message in self.consumer.consume(1000, 0.01):
                    if message.error():
                        raise KafkaException(message.error())
                    while True:
                        try:
                            self.producer.produce(self.sink, value=message.value() + SUFFIX,
                                                  partition=message.partition())
                            break
                        except BufferError:
                            self.producer.poll(0.01)
                    pending += 1
                self.producer.poll(0)
            positions = self.consumer.position(self.consumer.assignment())
            if transactional:
                self.producer.send_offsets_to_transaction(positions, self.consumer.consumer_group_metadata(), 30)
                self.producer.commit_transaction(60)
            else:
                if self.producer.flush(60):
                    raise RuntimeError("at-least-once: records not acknowledged within 60 s")
                if pending:
                    self.consumer.commit(offsets=positions, asynchronous=False)
            self.processed += pending
            if self.until is not None and all(p.offset >= self.until[p.partition] for p in positions):
                return

    def close(self) -> None:
        self.stop.set()
        self.join(120)
        self.consumer.close()
        if self.error is not None:
            raise self.error


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp-offsets", "isolation.level": "read_committed"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        consumer.close()


def load(bootstrap: str, topic: str, partitions: int, count: int, value_bytes: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 10000})
    padding = b"x" * max(0, value_bytes - SENT_AT.size)
    for number in range(count):
        while True:
            try:
                producer.produce(topic, value=SENT_AT.pack(time.time()) + padding, partition=number % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120):
        raise RuntimeError("the input was not acknowledged")


def throughput(mode: str, bootstrap: str, source: str, sink: str, partitions: int, start: dict[int, int],
               end: dict[int, int], commit_ms: int) -> float:
    loop = TransformLoop(mode, bootstrap, source, sink, start, commit_ms, until=end)
    started = time.monotonic()
    loop.start()
    loop.done.wait(600)
    elapsed = time.monotonic() - started
    loop.close()
    records = sum(end[p] - start[p] for p in range(partitions))
    if loop.processed < records:
        raise RuntimeError(f"{mode}: processed {loop.processed} of {records} records")
    return records / elapsed


def latency(mode: str, bootstrap: str, source: str, sink: str, partitions: int, rate: int, seconds: float,
            value_bytes: int, commit_ms: int) -> dict[str, float]:
    start = end_offsets(bootstrap, source, partitions)
    output_start = end_offsets(bootstrap, sink, partitions)
    loop = TransformLoop(mode, bootstrap, source, sink, start, commit_ms)
    loop.start()
    reader = _consumer(bootstrap, f"ctp-reader-{uuid.uuid4().hex[:8]}", sink, output_start)
    latencies: list[float] = []
    total = int(rate * seconds)
    padding = b"x" * max(0, value_bytes - SENT_AT.size)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})

    def feed() -> None:
        began = time.monotonic()
        for number in range(total):
            delay = began + number / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            producer.produce(source, value=SENT_AT.pack(time.time()) + padding, partition=number % partitions)
            producer.poll(0)
        producer.flush(60)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    deadline = time.monotonic() + seconds + 60
    while len(latencies) < total and time.monotonic() < deadline:
        for message in reader.consume(1000, 0.05):
            if message.error():
                raise KafkaException(message.error())
            seen = time.time()
            latencies.append(seen - SENT_AT.unpack_from(message.value())[0])
        if loop.done.is_set():
            break
    feeder.join(60)
    reader.close()
    loop.close()
    if len(latencies) != total:
        raise RuntimeError(f"{mode}: {len(latencies)} of {total} records became visible")
    latencies.sort()
    return {"p50_ms": 1000 * latencies[len(latencies) // 2],
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--commit-ms", type=int, default=100)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--brokers", type=int, default=1)
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="ctp-bench-") as directory:
        stack = LocalStack(directory=Path(directory), brokers=args.brokers, overrides=STACK_OVERRIDES)
        stack.start()
        try:
            bootstrap = stack.bootstrap_servers
            store = MetadataStore(stack.aws)
            source = "ctp-input"
            sinks = {mode: f"ctp-output-{mode}" for mode in MODES}
            for topic in (source, *sinks.values()):
                store.create_topic(topic, args.partitions, 1, {})
            time.sleep(2)
            for run in range(args.runs):
                order = MODES if run % 2 == 0 else MODES[::-1]
                start = end_offsets(bootstrap, source, args.partitions)
                load(bootstrap, source, args.partitions, args.records, args.value_bytes)
                end = end_offsets(bootstrap, source, args.partitions)
                figures: dict[str, dict[str, float]] = {}
                for mode in order:
                    rate = throughput(mode, bootstrap, source, sinks[mode], args.partitions, start, end, args.commit_ms)
                    figures[mode] = {"records_per_s": rate}
                for mode in order:
                    figures[mode].update(latency(mode, bootstrap, source, sinks[mode], args.partitions, args.rate,
                                                 args.latency_seconds, args.value_bytes, args.commit_ms))
                figures["ratio"] = {"throughput": figures["exactly_once"]["records_per_s"]
                                    / figures["at_least_once"]["records_per_s"]}
                runs.append({**figures, "load_average_1m": os.getloadavg()[0]})
                print(f"run {run + 1}: " + "; ".join(
                    f"{mode} {figures[mode]['records_per_s']:.0f} rec/s, p50 {figures[mode]['p50_ms']:.0f} ms, "
                    f"p99 {figures[mode]['p99_ms']:.0f} ms" for mode in MODES)
                    + f"; throughput ratio {figures['ratio']['throughput']:.2f}; load {os.getloadavg()[0]:.1f}",
                    flush=True)
        finally:
            stack.stop(save_state=False)

    def median(mode: str, field: str) -> float:
        return statistics.median(run[mode][field] for run in runs)

    result = {
        **result_header("ctp_bench"),
        "settings": vars(args),
        "runs": runs,
        "median": {mode: {field: median(mode, field) for field in ("records_per_s", "p50_ms", "p99_ms")}
                   for mode in MODES},
        "median_throughput_ratio": statistics.median(run["ratio"]["throughput"] for run in runs),
    }
    write_result(REPO_ROOT / "bench" / "results" / "ctp_bench.json", result)
    print(f"median: exactly-once {result['median']['exactly_once']}, at-least-once {result['median']['at_least_once']}, "
          f"throughput ratio {result['median_throughput_ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
