"""Client quota accuracy and cost, against the quota itself and against the same broker without quotas.

One broker (local stack), librdkafka clients (confluent-kafka), each in its own process:

- **Accuracy**, for a quota Q of 1 MiB/s and of 10 MiB/s: a producer under ``producer_byte_rate=Q``
  and a consumer under ``consumer_byte_rate=Q`` (reading a pre-filled 64 MiB partition over and
  over) run beside an unthrottled producer. After a warm-up of one quota span (Kafka's defaults:
  11 windows of 1 s, so the first burst is over) their delivered/consumed bytes are counted over two
  spans (22 s); the figure is measured rate / Q (goal 0.9-1.1). The unthrottled producer's rate in
  that time is compared with its rate alone, measured just before (goal >= 0.8).
- **Overhead**: the unthrottled producer alone, with a ``producer_byte_rate`` set on the default
  client id far above what it sends (so every Produce is measured but none throttled), against no
  quotas at all (goal >= 0.95); the two alternate which goes first.

The broker throttles producer bytes with KIP-599's token bucket (burst: one span of the quota), so
after the warm-up a busy producer is paced at its quota; consumer bytes with Kafka's sampled rate
and a one-window pacing bucket (docs/operations.md, "Client quotas").

The limited producer and consumer are librdkafka's by default, or kafka-python's with
``--limited-client kafka-python``. kafka-python waits out a response's throttle_time itself
(KIP-219); librdkafka only reports it (its KIP table lists KIP-219 as not supported), so a librdkafka
producer is held to its quota only by the broker muting its connection after a throttled response.

Byte counts are payload bytes (values of 1000 bytes); the broker counts whole requests, a few percent
more. Medians over runs go to bench/results/quota_bench_<limited client>.json.

    .venv/bin/python bench/quota_bench.py [--runs 3] [--limited-client confluent|confluent-defaults|kafka-python]
        [--quotas 1,10] [--no-overhead]

``confluent-defaults`` runs the limited producer with librdkafka's default settings (the unthrottled
producers keep the bench's); ``--quotas 1 --no-overhead`` measures only the 1 MiB/s phases.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import confluent_kafka  # noqa: E402
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402

from bench.machine import machine_info, result_header, write_result  # noqa: E402
from broker_core.client import FloeClient  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402

MIB = 1024 * 1024
VALUE_BYTES = 1000
QUOTAS = (1 * MIB, 10 * MIB)
READ_TOPIC_BYTES = 64 * MIB
WRITE_TOPIC, READ_TOPIC = "quota-bench-write", "quota-bench-read"
PRODUCER_SETTINGS = {"acks": "1", "linger.ms": "5", "batch.size": "1000000", "batch.num.messages": "100000",
                     "queue.buffering.max.kbytes": "8192", "message.timeout.ms": "300000"}
UNLIMITED_QUOTA = 10**12  # bytes/s: defined, never reached
MAX_UNACKED = 8 * MIB // VALUE_BYTES


def produce_for(servers: str, client_id: str, start: float, warmup_s: float, measure_s: float,
                results: Any, settings: dict[str, str] = PRODUCER_SETTINGS) -> None:
    """Produce 1000-byte values as fast as allowed until start + warmup + measure; put the bytes
    delivered during the measured part (and the throttle reports) on ``results``."""
    delivered = [0]
    throttles: list[float] = []
    begin, end = start + warmup_s, start + warmup_s + measure_s

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None and begin <= time.time() <= end:
            delivered[0] += len(msg.value())

    producer = Producer({"bootstrap.servers": servers, "client.id": client_id, **settings,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    value = b"q" * VALUE_BYTES
    while time.time() < end:
        try:
            producer.produce(WRITE_TOPIC, value, partition=0, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.005)
            continue
        producer.poll(0)
    producer.poll(0.1)
    producer.purge()
    producer.flush(1)
    results.put((client_id, delivered[0] / measure_s, len(throttles), sum(throttles)))


def produce_defaults_for(servers: str, client_id: str, start: float, warmup_s: float, measure_s: float,
                         results: Any) -> None:
    """`produce_for` with librdkafka's default settings (acks=all, batch.size 1 MB, a queue of up to
    100,000 messages or 1 GiB): what a user who sets nothing runs."""
    produce_for(servers, client_id, start, warmup_s, measure_s, results, settings={})


def produce_kafka_python_for(servers: str, client_id: str, start: float, warmup_s: float, measure_s: float,
                             results: Any) -> None:
    """`produce_for` with kafka-python, which honours throttle_time itself (KIP-219; librdkafka does not)."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    delivered, settled = [0], [0]
    begin, end = start + warmup_s, start + warmup_s + measure_s

    def on_delivery(_: Any) -> None:
        settled[0] += 1
        if begin <= time.time() <= end:
            delivered[0] += VALUE_BYTES

    def on_error(_: Any) -> None:
        settled[0] += 1

    producer = KafkaProducer(bootstrap_servers=servers, client_id=client_id, acks=1, linger_ms=5,
                             batch_size=1_000_000, max_request_size=2_000_000)
    value = b"q" * VALUE_BYTES
    sent = 0
    while time.time() < end:
        if sent - settled[0] >= MAX_UNACKED:  # as librdkafka's bounded queue: at most 8 MB waiting
            time.sleep(0.001)
            continue
        producer.send(WRITE_TOPIC, value, partition=0).add_callback(on_delivery).add_errback(on_error)
        sent += 1
    results.put((client_id, delivered[0] / measure_s, -1, -1.0))
    try:
        producer.close(timeout=1)
    except KafkaTimeoutError:  # records still throttled are not waited for
        pass


def consume_kafka_python_for(servers: str, client_id: str, start: float, warmup_s: float, measure_s: float,
                             results: Any) -> None:
    """`consume_for` with kafka-python."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaPythonPartition

    received = 0
    begin, end = start + warmup_s, start + warmup_s + measure_s
    partition = KafkaPythonPartition(READ_TOPIC, 0)
    # Fetch sizes are kafka-python's (and the Java client's) defaults: 1 MiB per partition.
    consumer = KafkaConsumer(bootstrap_servers=servers, client_id=client_id, enable_auto_commit=False)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    end_offset = consumer.end_offsets([partition])[partition]
    while (now := time.time()) < end:
        for records in consumer.poll(timeout_ms=100).values():
            if now >= begin:
                received += sum(len(record.value) for record in records)
        if consumer.position(partition) >= end_offset:
            consumer.seek(partition, 0)
    consumer.close()
    results.put((client_id, received / measure_s, -1, -1.0))


def consume_for(servers: str, client_id: str, start: float, warmup_s: float, measure_s: float,
                results: Any) -> None:
    """Read READ_TOPIC from the start, again and again, until start + warmup + measure; put the
    bytes received during the measured part on ``results``."""
    received = 0
    throttles: list[float] = []
    begin, end = start + warmup_s, start + warmup_s + measure_s
    consumer = Consumer({"bootstrap.servers": servers, "client.id": client_id, "group.id": f"{client_id}-unused",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    consumer.assign([TopicPartition(READ_TOPIC, 0, 0)])
    while (now := time.time()) < end:
        message = consumer.poll(0.1)
        if message is None:
            continue
        if message.error() is not None:
            if message.error().code() == KafkaError._PARTITION_EOF:
                consumer.seek(TopicPartition(READ_TOPIC, 0, 0))
            continue
        if now >= begin:
            received += len(message.value())
    consumer.close()
    results.put((client_id, received / measure_s, len(throttles), sum(throttles)))


# The quota-limited producer and consumer: librdkafka (the client; with the bench's settings
# or its defaults) or kafka-python.
LIMITED_CLIENTS = {"confluent": (produce_for, consume_for),
                   "confluent-defaults": (produce_defaults_for, consume_for),
                   "kafka-python": (produce_kafka_python_for, consume_kafka_python_for)}


def run_clients(servers: str, clients: list[tuple[Any, str]], warmup_s: float, measure_s: float) -> dict[str, dict]:
    """Run each (function, client id) in its own process from one common start; rates by client id."""
    results: Any = multiprocessing.Queue()
    start = time.time() + 1.0
    processes = [multiprocessing.Process(target=target, args=(servers, client_id, start, warmup_s, measure_s, results))
                 for target, client_id in clients]
    for process in processes:
        process.start()
    found = {}
    for _ in processes:
        client_id, rate, throttle_reports, throttle_s = results.get(timeout=warmup_s + measure_s + 120)
        found[client_id] = {"bytes_per_s": rate, "throttle_reports": throttle_reports, "reported_throttle_s": throttle_s}
    for process in processes:
        process.join(30)
    return found


async def admin(servers: str, action: Any) -> Any:
    async with FloeClient(servers, client_id="quota-bench-admin") as client:
        return await action(client)


def set_quota(servers: str, entity: list[tuple[str, str | None]], key: str, value: float | None) -> None:
    if value is None:
        asyncio.run(admin(servers, lambda c: c.alter_client_quotas(entity, {}, [key])))
    else:
        asyncio.run(admin(servers, lambda c: c.alter_client_quotas(entity, {key: value})))
    time.sleep(1.0)  # a metadata poll: the broker holds it


def prefill(servers: str) -> None:
    producer = Producer({"bootstrap.servers": servers, **PRODUCER_SETTINGS, "queue.buffering.max.kbytes": "65536"})
    value = b"r" * VALUE_BYTES
    for _ in range(READ_TOPIC_BYTES // VALUE_BYTES):
        while True:
            try:
                producer.produce(READ_TOPIC, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(120) == 0


def one_run(number: int, servers: str, warmup_s: float, measure_s: float, limited: str,
            quotas: tuple[int, ...] = QUOTAS, overhead_phase: bool = True) -> dict[str, Any]:
    run: dict[str, Any] = {}
    for quota in quotas:
        tag = f"{quota // MIB}mib_r{number}"
        limited_producer, limited_consumer, free = f"limited-producer-{tag}", f"limited-consumer-{tag}", f"free-{tag}"
        set_quota(servers, [("client-id", limited_producer)], "producer_byte_rate", quota)
        set_quota(servers, [("client-id", limited_consumer)], "consumer_byte_rate", quota)
        alone = run_clients(servers, [(produce_for, free + "-alone")], 2.0, measure_s)[free + "-alone"]
        producer, consumer = LIMITED_CLIENTS[limited]
        together = run_clients(servers, [(producer, limited_producer), (consumer, limited_consumer),
                                         (produce_for, free)], warmup_s, measure_s)
        run[f"{quota // MIB}_mib_s"] = {
            "quota_bytes_per_s": quota,
            "producer": {**together[limited_producer], "rate_over_quota": together[limited_producer]["bytes_per_s"] / quota},
            "consumer": {**together[limited_consumer], "rate_over_quota": together[limited_consumer]["bytes_per_s"] / quota},
            "unthrottled_alone": alone,
            "unthrottled_beside": together[free],
            "unthrottled_kept": together[free]["bytes_per_s"] / alone["bytes_per_s"],
        }
        figures = run[f"{quota // MIB}_mib_s"]
        figures["load_average"] = list(os.getloadavg())  # 1, 5, 15 minutes, at the end of the phase
        # A limited client that was never throttled did not reach its quota: its figure then measures
        # what the machine let it send (neighbours' load), not the quota. Only librdkafka reports throttles
        # (kafka-python's count is -1: unknown).
        for side in ("producer", "consumer"):
            reports = figures[side]["throttle_reports"]
            figures[side]["quota_bound"] = None if reports < 0 else reports > 0
        print(f"  {quota // MIB} MiB/s: producer {figures['producer']['rate_over_quota']:.3f} "
              f"({figures['producer']['throttle_reports']} throttles), consumer "
              f"{figures['consumer']['rate_over_quota']:.3f} ({figures['consumer']['throttle_reports']} throttles), "
              f"unthrottled kept {figures['unthrottled_kept']:.3f} (alone {alone['bytes_per_s'] / MIB:.1f} MiB/s), "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
    if not overhead_phase:
        return run
    overhead = {}
    order = ("defined", "none") if number % 2 == 0 else ("none", "defined")
    for state in order:
        set_quota(servers, [("client-id", None)], "producer_byte_rate", UNLIMITED_QUOTA if state == "defined" else None)
        client_id = f"overhead-{state}-r{number}"
        overhead[state] = run_clients(servers, [(produce_for, client_id)], 2.0, measure_s)[client_id]
    if order[-1] == "defined":
        set_quota(servers, [("client-id", None)], "producer_byte_rate", None)
    run["overhead"] = {**overhead, "ratio": overhead["defined"]["bytes_per_s"] / overhead["none"]["bytes_per_s"]}
    print(f"  overhead ratio {run['overhead']['ratio']:.3f}", flush=True)
    return run


def median(runs: list[dict], *path: str) -> float:
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value[key]
        values.append(value)
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=12.0, help="seconds before counting (one quota span + 1)")
    parser.add_argument("--measure", type=float, default=22.0, help="seconds counted (two quota spans)")
    parser.add_argument("--limited-client", choices=sorted(LIMITED_CLIENTS), default="confluent",
                        help="the client library of the quota-limited producer and consumer")
    parser.add_argument("--quotas", default="1,10", help="the quotas to measure, MiB/s, comma-separated")
    parser.add_argument("--no-overhead", action="store_true", help="skip the overhead phase")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    quotas = tuple(int(value) * MIB for value in args.quotas.split(","))
    with tempfile.TemporaryDirectory(prefix="quota-bench-") as scratch:
        stack = LocalStack(directory=Path(scratch) / "stack", brokers=1,
                           overrides={"log.retention.check.interval.ms": "2000"})
        stack.start()
        try:
            servers = stack.bootstrap_servers
            # The unthrottled producers write hundreds of MB/s: retention keeps the written topic small.
            asyncio.run(admin(servers, lambda c: c.create_topic(WRITE_TOPIC, 1, 1, {
                "segment.bytes": str(32 * MIB), "retention.bytes": str(256 * MIB)})))
            asyncio.run(admin(servers, lambda c: c.create_topic(READ_TOPIC, 1, 1, {"segment.bytes": str(256 * MIB)})))
            prefill(servers)
            runs = []
            for number in range(args.runs):
                print(f"run {number + 1}/{args.runs}", flush=True)
                runs.append(one_run(number, servers, args.warmup, args.measure, args.limited_client, quotas,
                                    not args.no_overhead))
        finally:
            stack.stop(save_state=False)

    summary: dict[str, Any] = {}
    for quota in quotas:
        key = f"{quota // MIB}_mib_s"
        summary[key] = {
            "producer_rate_over_quota": median(runs, key, "producer", "rate_over_quota"),
            "consumer_rate_over_quota": median(runs, key, "consumer", "rate_over_quota"),
            "unthrottled_kept": median(runs, key, "unthrottled_kept"),
            "unthrottled_alone_mib_s": median(runs, key, "unthrottled_alone", "bytes_per_s") / MIB,
        }
    if not args.no_overhead:
        summary["overhead_ratio"] = median(runs, "overhead", "ratio")
    result = {
        **result_header("quota_bench", {**machine_info(), "load_average_at_end": os.getloadavg()}),
        "versions": {"librdkafka": confluent_kafka.libversion()[0]},
        "settings": {"runs": args.runs, "limited_client": args.limited_client, "warmup_s": args.warmup, "measure_s": args.measure, "value_bytes": VALUE_BYTES,
                     "quota_window": "Kafka's defaults: quota.window.num=11, quota.window.size.seconds=1",
                     "producer": PRODUCER_SETTINGS,
                     "limited_producer": "librdkafka defaults" if args.limited_client == "confluent-defaults"
                     else "as producer",
                     "quotas_mib_s": [quota // MIB for quota in quotas], "overhead_phase": not args.no_overhead},
        "goals": {"rate_over_quota": [0.9, 1.1], "unthrottled_kept": 0.8, "overhead_ratio": 0.95},
        "median": summary,
        "runs": runs,
    }
    write_result(args.output or REPO_ROOT / "bench" / "results" / f"quota_bench_{args.limited_client}.json", result)
    for key, value in summary.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
