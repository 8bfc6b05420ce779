"""A streaming aggregation topic -> topic: records per key per minute of event time, written back to Floe.

    python -m emr_jobs.jobs.stream_counts --stack .floe/local --topic clicks --output-topic clicks-per-minute \\
        --checkpoint out/_checkpoints/clicks-per-minute

Each output record's key is ``<key>@<window start, ISO 8601>`` and its value the JSON
``{"key": ..., "window_start": ..., "count": n}``; in update mode a window's record is written again
each time its count changes, and the state of windows older than the watermark (``--late-seconds``
behind the latest event time) is dropped. The floe sink is at-least-once: after a restart a
micro-batch may be written twice, which a reader keeping the last value per key absorbs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from emr_jobs import FloeDataSource
from emr_jobs.jobs.stream_to_parquet import run_until_stopped, trigger


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output-topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--stack")
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--region")
    parser.add_argument("--bucket")
    parser.add_argument("--table-prefix")
    parser.add_argument("--endpoint-url")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--late-seconds", type=int, default=60)
    parser.add_argument("--trigger-seconds", type=float, default=10.0)
    parser.add_argument("--available-now", action="store_true")
    return parser.parse_args(argv)


def connection_options(args: argparse.Namespace) -> dict[str, str]:
    names = {"stack": "stack", "bootstrap_servers": "kafka.bootstrap.servers", "region": "region", "bucket": "bucket",
             "table_prefix": "tablePrefix", "endpoint_url": "endpointUrl"}
    return {option: getattr(args, flag) for flag, option in names.items() if getattr(args, flag) is not None}


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    spark.dataSource.register(FloeDataSource)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    records = (
        spark.readStream.format("floe")
        .options(subscribe=args.topic, startingOffsets=args.starting_offsets, **connection_options(args))
        .load()
    )
    counts = (
        records.withWatermark("timestamp", f"{args.late_seconds} seconds")
        .groupBy(F.col("key").cast("string").alias("key"), F.window("timestamp", "1 minute"))
        .count()
    )
    window_start = F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'")
    output = counts.select(
        F.concat_ws("@", F.coalesce("key", F.lit("")), window_start).alias("key"),
        F.to_json(F.struct("key", window_start.alias("window_start"), "count")).alias("value"),
    )
    sink_options = {"topic": args.output_topic,
                    **{k: v for k, v in connection_options(args).items() if k in ("stack", "kafka.bootstrap.servers")}}

    def write_counts(batch: DataFrame, _batch_id: int) -> None:
        batch.write.format("floe").options(**sink_options).mode("append").save()

    # Spark 4.0 Python stream sinks take append mode only: update mode goes through foreachBatch,
    # each micro-batch's changed counts written by the floe batch sink.
    writer = (
        output.writeStream.outputMode("update")
        .foreachBatch(write_counts)
        .option("checkpointLocation", args.checkpoint)
    )
    return writer.trigger(**trigger(args)).start()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    run_until_stopped("floe-stream-counts", lambda spark: start(spark, args))


if __name__ == "__main__":
    main()
