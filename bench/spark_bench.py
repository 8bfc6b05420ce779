"""Spark reading tiered segments against Spark reading the same rows from Parquet, in the same session.

Setup (not timed): a moto server; a topic whose partitions are written by Floe's partition log
(RecordBatch v2 batches of 500 records, 16-byte keys, random values of 50 to 150 bytes, one codec
per run) and tiered into moto exactly as the uploader lays them out (objects under the manifest's
keys, indexes object, COPY_FINISHED rows). The floe DataFrame is written once to local Parquet
(snappy, Spark's default), so both sides hold the same rows.

Timed, ``--runs`` times, each side back to back in every run with the order alternating: a full
scan of every column of every row into Spark's "noop" sink (``df.write.format("noop")``), which
materialises rows without writing them, for ``spark.read.format("floe")`` and for
``spark.read.parquet``. Reported: rows/s medians and the median of the per-run ratios (goal >= 0.5).

To show what bounds the ratio, the same run also measures, inside Spark, a Python data source that
only replays Arrow batches already in memory, with the same per-task worker preparation as the
floe source (emr_jobs.python_worker): the cost of Spark's Python data source path itself; and,
for each side, the CPU time per row spent in Spark's JVM and in its Python workers; outside Spark,
the decoder alone (one core, segment bytes already in memory), the record-at-a-time
reference codec of broker_core.records on the same bytes, and one ranged GET stream from moto.

    .venv/bin/python bench/spark_bench.py [--rows 2000000] [--partitions 4] [--runs 5] [--codec none]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import boto3  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

from bench.machine import cpu_pressure, machine_info, result_header, write_result  # noqa: E402
from broker_core.aws import AwsSettings  # noqa: E402
from broker_core.local_moto import start_moto_server  # noqa: E402
from broker_core.log.config import LogConfig  # noqa: E402
from broker_core.log.partition_log import PartitionLog  # noqa: E402
from broker_core.metadata.store import MetadataStore  # noqa: E402
from broker_core.records import Compression, SimpleRecord, build_batch, iter_records  # noqa: E402
from emr_jobs import FloeDataSource  # noqa: E402
from emr_jobs.arrow_records import RecordRange, arrow_schema, iter_arrow_batches  # noqa: E402
from emr_jobs.python_worker import prepare_python_worker  # noqa: E402
from emr_jobs.remote import read_range  # noqa: E402
from emr_jobs.schema import kafka_schema  # noqa: E402
from tiered_storage.indexes import encode_indexes  # noqa: E402
from tiered_storage.layout import new_segment_id  # noqa: E402
from tiered_storage.manifest import ManifestStore  # noqa: E402

RECORDS_PER_BATCH = 500
KEY_BYTES = 16
VALUE_BYTES = (50, 150)
WARM_UP_SCANS = 3
DISTINCT_BATCHES = 32
SEGMENT_BYTES = 64 * 1024 * 1024
TOPIC = "bench"
MIB = 1024 * 1024


def build_batches(codec: Compression) -> list[bytes]:
    """DISTINCT_BATCHES producer batches, built before any timing: hex keys, random (incompressible)
    values of varying size."""
    now_ms = time.time_ns() // 1_000_000
    sizes = random.Random(7)
    batches = []
    for number in range(DISTINCT_BATCHES):
        records = [
            SimpleRecord(
                key=os.urandom(KEY_BYTES // 2).hex().encode(),
                value=os.urandom(sizes.randint(*VALUE_BYTES)),
                timestamp=now_ms + i,
            )
            for i in range(RECORDS_PER_BATCH)
        ]
        batches.append(build_batch(records, compression=codec, base_timestamp=now_ms + number))
    return batches


def tier_topic(settings: AwsSettings, directory: Path, rows: int, partitions: int, codec: Compression) -> int:
    """Write and tier ``rows`` records spread over ``partitions``; return the bytes tiered."""
    store = MetadataStore(settings)
    store.ensure_tables()
    manifest = ManifestStore(settings)
    manifest.ensure_table()
    s3 = boto3.client("s3", **settings.boto3_kwargs())
    s3.create_bucket(Bucket=settings.bucket)
    store.register_broker(1, "127.0.0.1", 9092)
    topic = store.create_topic(TOPIC, partitions, 1)
    batches = build_batches(codec)
    tiered_bytes = 0
    for partition in range(partitions):
        config = LogConfig(segment_bytes=SEGMENT_BYTES)
        log = PartitionLog.open(directory / f"{TOPIC}-{partition}", config, topic=TOPIC, partition=partition)
        for number in range(rows // partitions // RECORDS_PER_BATCH):
            log.append(batches[number % DISTINCT_BATCHES])
        log.roll()
        for segment in log.segments[:-1]:
            data = segment.log_path.read_bytes()
            row = manifest.start_copy(
                topic=TOPIC,
                topic_id=topic.topic_id,
                partition=partition,
                segment_id=new_segment_id(),
                base_offset=segment.base_offset,
                end_offset=segment.next_offset - 1,
                max_timestamp_ms=segment.max_timestamp,
                size_bytes=len(data),
                leader_epoch=0,
                epoch_entries=[(0, segment.base_offset)],
            )
            indexes = encode_indexes(
                segment.base_offset, segment.offset_index.path.read_bytes(), segment.time_index.path.read_bytes(), [(0, 0)]
            )
            s3.put_object(Bucket=settings.bucket, Key=row.log_key, Body=data)
            s3.put_object(Bucket=settings.bucket, Key=row.indexes_key, Body=indexes)
            manifest.finish_copy(row)
            tiered_bytes += len(data)
        log.close()
    return tiered_bytes


class ArrowReplaySource(DataSource):
    """A Python data source that yields Arrow batches already in memory: Spark's Python source path alone."""

    @classmethod
    def name(cls) -> str:
        return "arrow_replay"

    def schema(self):
        return kafka_schema(False)

    def reader(self, schema):
        return ArrowReplayReader(int(self.options["path"]), int(self.options["tasks"]))


class ArrowReplayReader(DataSourceReader):
    def __init__(self, rows: int, tasks: int) -> None:
        self.rows = rows
        self.tasks = tasks

    def partitions(self):
        return [InputPartition(task) for task in range(self.tasks)]

    def read(self, partition):
        prepare_python_worker()  # as the floe source does, so that only the Arrow path itself is left
        now = time.time_ns() // 1_000_000
        batch_rows = 32_768
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([os.urandom(KEY_BYTES // 2).hex().encode()] * batch_rows, pa.binary()),
                pa.array([os.urandom(sum(VALUE_BYTES) // 2)] * batch_rows, pa.binary()),
                pa.array([TOPIC] * batch_rows, pa.string()),
                pa.array([partition.value] * batch_rows, pa.int32()),
                pa.array(range(batch_rows), pa.int64()),
                pa.array([now * 1000] * batch_rows, pa.int64()).view(pa.timestamp("us", tz="UTC")),
                pa.array([0] * batch_rows, pa.int32()),
            ],
            schema=arrow_schema(False),
        )
        for _ in range(self.rows // self.tasks // batch_rows):
            yield batch


def spark_cpu_seconds(moto_pid: int) -> tuple[float, float]:
    """CPU seconds used so far by Spark's JVM and by its Python workers (moto excluded)."""
    jvm = python = 0.0
    for process in psutil.Process().children(recursive=True):
        try:
            times = process.cpu_times()
            used = times.user + times.system
            if process.name() == "java":
                jvm += used
            elif process.pid != moto_pid:
                python += used
        except psutil.Error:
            continue
    return jvm, python


def timed_scan(frame) -> float:
    start = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def decoder_rows_per_s(settings: AwsSettings, key: str, size: int) -> tuple[float, float, float]:
    """(rows/s of the decoder alone on one core, rows/s of the record-at-a-time reference codec on the
    same bytes, MiB/s of one ranged GET stream from moto), best of three each."""
    get_rates = []
    for _ in range(3):
        start = time.perf_counter()
        data = b"".join(read_range(settings, key, 0, size))
        get_rates.append(len(data) / MIB / (time.perf_counter() - start))
    records = RecordRange(TOPIC, 0, 0, 2**62, False)
    rates = []
    for _ in range(3):  # the first pass also pays for imports
        start = time.perf_counter()
        rows = sum(batch.num_rows for batch in iter_arrow_batches([data], records, object_key=key))
        rates.append(rows / (time.perf_counter() - start))
    reference_rates = []
    for _ in range(3):
        start = time.perf_counter()
        rows = sum(1 for _ in iter_records(data))
        reference_rates.append(rows / (time.perf_counter() - start))
    return max(rates), max(reference_rates), max(get_rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--codec", choices=[c.name.lower() for c in Compression], default="none")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    codec = Compression[args.codec.upper()]
    output = args.output or REPO_ROOT / "bench" / "results" / f"spark_{args.codec}.json"

    for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
        os.environ.setdefault(name, value)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    workdir = Path(tempfile.mkdtemp(prefix="floe-spark-bench-"))
    moto = start_moto_server("127.0.0.1", 0, log_path=workdir / "moto.log")
    spark = None
    try:
        settings = AwsSettings(endpoint_url=moto.endpoint_url, region="us-east-1", bucket="bench", table_prefix="bench-")
        print(f"writing and tiering {args.rows} rows ({args.codec}) ...", flush=True)
        tiered_bytes = tier_topic(settings, workdir / "logs", args.rows, args.partitions, codec)
        segments = ManifestStore(settings).list_segments(MetadataStore(settings).get_topic(TOPIC).topic_id, 0)
        decode_rate, reference_rate, get_rate = decoder_rows_per_s(settings, segments[0].log_key, segments[0].size_bytes)

        spark = (
            SparkSession.builder.master("local[2]")
            .appName("floe-spark-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "4g")
            .getOrCreate()
        )
        spark.dataSource.register(FloeDataSource)
        spark.dataSource.register(ArrowReplaySource)
        options = {
            "topic": TOPIC,
            "region": settings.region,
            "bucket": settings.bucket,
            "tablePrefix": settings.table_prefix,
            "endpointUrl": settings.endpoint_url,
        }
        floe = spark.read.format("floe").options(**options).load()
        parquet_dir = workdir / "parquet"
        floe.write.parquet(str(parquet_dir))
        parquet = spark.read.parquet(str(parquet_dir))
        rows = parquet.count()
        assert rows == floe.count() == args.rows // args.partitions // RECORDS_PER_BATCH * RECORDS_PER_BATCH * args.partitions
        tasks = floe.rdd.getNumPartitions()
        replay = spark.read.format("arrow_replay").option("path", str(rows)).option("tasks", str(tasks)).load()

        frames = {"floe": floe, "parquet": parquet, "arrow_replay": replay}
        for _ in range(WARM_UP_SCANS):  # Python workers, the JVM's JIT, moto's object cache
            for frame in frames.values():
                timed_scan(frame)
        timings: dict[str, list[float]] = {side: [] for side in frames}
        moto_process = psutil.Process(moto.pid)
        moto_cpu_s = []
        cpu_us_per_row: dict[str, dict[str, list[float]]] = {side: {"jvm": [], "python": []} for side in frames}
        pressure = []
        for run in range(args.runs):
            pressure.append(cpu_pressure())
            order = ["floe", "parquet", "arrow_replay"] if run % 2 == 0 else ["parquet", "arrow_replay", "floe"]
            for side in order:
                before = moto_process.cpu_times()
                jvm_before, python_before = spark_cpu_seconds(moto.pid)
                seconds = timed_scan(frames[side])
                jvm_after, python_after = spark_cpu_seconds(moto.pid)
                after = moto_process.cpu_times()
                cpu_us_per_row[side]["jvm"].append((jvm_after - jvm_before) / rows * 1e6)
                cpu_us_per_row[side]["python"].append((python_after - python_before) / rows * 1e6)
                if side == "floe":
                    moto_cpu_s.append(after.user + after.system - before.user - before.system)
                timings[side].append(rows / seconds)
                print(f"run {run} {side}: {rows / seconds:,.0f} rows/s", flush=True)
        medians = {side: statistics.median(values) for side, values in timings.items()}
        # Each run measures every side back to back, so a run's ratio sees the same background load.
        paired = [f / p for f, p in zip(timings["floe"], timings["parquet"], strict=True)]
        replay_paired = [r / p for r, p in zip(timings["arrow_replay"], timings["parquet"], strict=True)]
        parquet_bytes = sum(f.stat().st_size for f in parquet_dir.glob("*.parquet"))
        result = {
            **result_header("spark", {**machine_info(), "spark_master": "local[2]"}),
            "workload": {
                "rows": rows,
                "partitions": args.partitions,
                "codec": args.codec,
                "records_per_batch": RECORDS_PER_BATCH,
                "key_bytes": KEY_BYTES,
                "value_bytes": list(VALUE_BYTES),
                "tiered_bytes": tiered_bytes,
                "parquet_bytes": parquet_bytes,
                "floe_input_partitions": tasks,
                "parquet_input_partitions": parquet.rdd.getNumPartitions(),
                "runs": args.runs,
                "scan": 'df.write.format("noop"): every column of every row materialised',
            },
            "rows_per_s": {side: [round(v) for v in values] for side, values in timings.items()},
            "median_rows_per_s": {side: round(v) for side, v in medians.items()},
            "paired_ratios_floe_to_parquet": [round(r, 3) for r in paired],
            "ratio_floe_to_parquet": round(statistics.median(paired), 3),
            "ratio_of_medians_floe_to_parquet": round(medians["floe"] / medians["parquet"], 3),
            "goal": 0.5,
            "cpu_pressure_some_avg10_percent_per_run": pressure,
            "bounds": {
                "decoder_alone_rows_per_s_one_core": round(decode_rate),
                "reference_codec_rows_per_s_one_core": round(reference_rate),
                "moto_ranged_get_mib_per_s_one_stream": round(get_rate, 1),
                "python_source_replaying_arrow_rows_per_s": round(medians["arrow_replay"]),
                "ratio_arrow_replay_to_parquet": round(statistics.median(replay_paired), 3),
                "moto_cpu_s_per_floe_scan": round(statistics.median(moto_cpu_s), 2),
                "cpu_us_per_row_median": {
                    side: {where: round(statistics.median(values), 3) for where, values in split.items()}
                    for side, split in cpu_us_per_row.items()
                },
            },
        }
        write_result(output, result)
        print(json.dumps({k: result[k] for k in ("median_rows_per_s", "ratio_floe_to_parquet", "bounds")}, indent=2))
    finally:
        if spark is not None:
            spark.stop()
        moto.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
