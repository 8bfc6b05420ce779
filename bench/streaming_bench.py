"""The floe stream source and sink against a local stack: latency, stream/batch throughput, sink/producer.

Setup (not timed): a local stack (moto server and one broker process on loopback, brokers tiering
every second) and a local Spark session (``local[2]``).

Timed, ``--runs`` times, medians reported:

- latency: a confluent-kafka producer sends one record every 50 ms for ``--latency-seconds`` to a
  topic that a streaming query (processingTime trigger of 1 s, foreachBatch) reads from latest; a
  record's latency is the wall time from its delivery report (the broker's acknowledgement) to the
  foreachBatch call that holds it. p50 and p99 per run (goal p50 <= 1.5 s).
- throughput: ``--rows`` records (16-byte keys, 100-byte values) in a topic of 2 partitions with
  1 MiB segments, partly tiered; a batch read (``spark.read``) and a stream with Trigger.AvailableNow
  from earliest, both into Spark's noop sink, alternating which goes first; ratio stream rows/s / batch
  rows/s (goal >= 0.7), by wall time of the whole query and by Spark's own streaming throughput (rows
  over the micro-batches' trigger execution time, as StreamingQueryProgress reports it).
- sink: the same rows written by ``df.write.format("floe")`` and by one confluent-kafka producer
  (acks=all, idempotent) from one process; ratio sink rows/s / producer rows/s.

    .venv/bin/python bench/streaming_bench.py [--rows 200000] [--runs 3] [--latency-seconds 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402

from bench.machine import result_header, write_result  # noqa: E402
from broker_core.local_stack import STACK_FILE, LocalStack  # noqa: E402
from emr_jobs import FloeDataSource  # noqa: E402

RESULT = REPO_ROOT / "bench" / "results" / "streaming_bench.json"


def create_topic(stack: LocalStack, name: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    configs = {"remote.storage.enable": "true", "segment.bytes": str(1024 * 1024)}
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=configs)]).values():
        future.result(timeout=60)


def produce_rows(stack: LocalStack, topic: str, rows: int) -> float:
    """``rows`` records from one idempotent producer; returns the seconds until all are acknowledged."""
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    value = b"v" * 100
    started = time.perf_counter()
    for number in range(rows):
        while True:
            try:
                producer.produce(topic, key=b"%016d" % number, value=value)
                break
            except BufferError:
                producer.poll(0.01)
        if number % 1000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0
    return time.perf_counter() - started


def measure_latency(spark: SparkSession, stack: LocalStack, options: dict[str, str], topic: str,
                    seconds: float, work: Path) -> list[float]:
    acknowledged: dict[bytes, float] = {}
    visible: dict[bytes, float] = {}

    def on_batch(frame: DataFrame, _batch_id: int) -> None:
        keys = [bytes(row["key"]) for row in frame.select("key").collect()]
        now = time.time()
        for key in keys:
            visible.setdefault(key, now)

    query = (
        spark.readStream.format("floe").options(subscribe=topic, startingOffsets="latest", **options).load()
        .writeStream.foreachBatch(on_batch).option("checkpointLocation", str(work / f"latency-{topic}"))
        .trigger(processingTime="1 second").start()
    )
    try:
        while not query.recentProgress:  # the first micro-batch fixes the starting offsets
            time.sleep(0.2)

        def delivered(error: object, message: object) -> None:
            if error is None:
                acknowledged[message.key()] = time.time()  # type: ignore[attr-defined]

        producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all", "linger.ms": 0})
        deadline = time.monotonic() + seconds
        number = 0
        while time.monotonic() < deadline:
            producer.produce(topic, key=b"lat-%08d" % number, value=b"x" * 100, on_delivery=delivered)
            producer.poll(0)
            time.sleep(0.05)
            number += 1
        producer.flush(60)
        end = time.monotonic() + 60
        while len(visible) < len(acknowledged) and time.monotonic() < end:
            time.sleep(0.2)
    finally:
        query.stop()
    return sorted(visible[key] - acknowledged[key] for key in acknowledged if key in visible)


def percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(fraction * len(values)))]


def timed(action) -> float:  # noqa: ANN001
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def one_run(spark: SparkSession, stack: LocalStack, options: dict[str, str], run: int, args: argparse.Namespace,
            work: Path) -> dict[str, float]:
    latency_topic, data_topic, sink_topic, twin_topic = (f"{name}-{run}" for name in ("lat", "data", "sink", "twin"))
    for topic in (latency_topic, data_topic, sink_topic, twin_topic):
        create_topic(stack, topic)
    latencies = measure_latency(spark, stack, options, latency_topic, args.latency_seconds, work)

    producer_s = produce_rows(stack, data_topic, args.rows)
    time.sleep(3)  # let the uploader tier some segments, so both paths are exercised
    progress: list[dict] = []

    def batch_read() -> float:
        return timed(lambda: spark.read.format("floe").options(topic=data_topic, **options).load()
                     .write.format("noop").mode("overwrite").save())

    def stream_read() -> float:
        def run_query() -> None:
            query = (spark.readStream.format("floe")
                     .options(subscribe=data_topic, startingOffsets="earliest", **options).load()
                     .writeStream.format("noop").option("checkpointLocation", str(work / f"stream-{run}"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            progress.extend(p for p in query.recentProgress if p["numInputRows"] > 0)

        return timed(run_query)

    # Alternate which read goes first, so neither always meets a colder cache or a busier moment.
    if run % 2 == 0:
        batch_s, stream_s = batch_read(), stream_read()
    else:
        stream_s = stream_read()
        batch_s = batch_read()
    streamed_rows = sum(p["numInputRows"] for p in progress)
    trigger_s = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000

    rows = spark.read.format("floe").options(topic=data_topic, **options).load().select("key", "value").cache()
    assert rows.count() == args.rows
    sink_s = timed(lambda: rows.write.format("floe").options(topic=sink_topic, **options).mode("append").save())
    twin_s = produce_rows(stack, twin_topic, args.rows)
    rows.unpersist()
    return {
        "latency_records": len(latencies),
        "latency_p50_s": percentile(latencies, 0.5),
        "latency_p99_s": percentile(latencies, 0.99),
        "batch_rows_per_s": args.rows / batch_s,
        "stream_rows_per_s": args.rows / stream_s,
        "stream_over_batch": batch_s / stream_s,
        # Spark's own streaming throughput (StreamingQueryProgress.processedRowsPerSecond summed over
        # the query's micro-batches): rows over the micro-batches' trigger execution time, without the
        # query's one-time start and stop, which a long-running stream pays once.
        "stream_micro_batches": len(progress),
        "stream_processed_rows_per_s": streamed_rows / trigger_s if trigger_s else 0.0,
        "stream_processed_over_batch": (streamed_rows / trigger_s) / (args.rows / batch_s) if trigger_s else 0.0,
        "stream_start_stop_s": stream_s - trigger_s,
        "sink_rows_per_s": args.rows / sink_s,
        "producer_rows_per_s": args.rows / twin_s,
        "sink_over_producer": twin_s / sink_s,
        "first_producer_rows_per_s": args.rows / producer_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-seconds", type=float, default=30.0)
    parser.add_argument("--output", default=RESULT.name, help="file name under bench/results/")
    args = parser.parse_args()
    header = result_header("streaming_bench")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="floe-streaming-bench-") as directory:
        work = Path(directory)
        stack = LocalStack(directory=work / "stack", brokers=1,
                           overrides={"remote.log.manager.task.interval.ms": "1000"})
        stack.start()
        spark = (SparkSession.builder.master("local[2]").appName("floe-streaming-bench")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.driver.memory", "1g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(FloeDataSource)
        try:
            options = {"stack": str(stack.directory / STACK_FILE)}
            runs = [one_run(spark, stack, options, run, args, work) for run in range(args.runs)]
        finally:
            spark.stop()
            stack.stop(save_state=False)
    medians = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
    result = {**header, "rows": args.rows, "latency_seconds": args.latency_seconds, "runs": runs, "median": medians}
    write_result(RESULT.parent / args.output, result)
    for name, value in medians.items():
        print(f"{name:28} {value:12.3f}")


if __name__ == "__main__":
    main()
