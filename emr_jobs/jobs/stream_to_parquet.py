"""Stream a topic into Parquet, partitioned by the date of each record's timestamp, with a checkpoint.

The same file runs locally against `floe local up` and as an EMR Serverless streaming job::

    python -m emr_jobs.jobs.stream_to_parquet --stack .floe/local --topic clicks \\
        --output out/clicks --checkpoint out/_checkpoints/clicks --available-now
    # on EMR Serverless (emr_jobs.submit run --mode streaming): --topic clicks --bucket my-floe-bucket \\
    #     --bootstrap-servers b1:9092 --output s3://lake/clicks --checkpoint s3://lake/_checkpoints/clicks

Spark's file sink and the checkpoint make the output exactly-once: a restarted job continues where
the last one stopped, with no record lost or written twice. ``--available-now`` reads what is there
and stops (a catch-up run); otherwise the job runs micro-batches every ``--trigger-seconds`` until
stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from emr_jobs import FloeDataSource

_SOURCE_FLAGS = {
    "topic": "subscribe",
    "subscribe_pattern": "subscribePattern",
    "stack": "stack",
    "bootstrap_servers": "kafka.bootstrap.servers",
    "region": "region",
    "bucket": "bucket",
    "table_prefix": "tablePrefix",
    "endpoint_url": "endpointUrl",
    "starting_offsets": "startingOffsets",
    "max_offsets_per_trigger": "maxOffsetsPerTrigger",
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    topics = parser.add_mutually_exclusive_group(required=True)
    topics.add_argument("--topic", help="a topic, or several separated by commas")
    topics.add_argument("--subscribe-pattern", help="a regular expression over topic names")
    parser.add_argument("--output", required=True, help="a directory or s3:// prefix for the Parquet dataset")
    parser.add_argument("--checkpoint", required=True, help="a directory or s3:// prefix for the query's checkpoint")
    parser.add_argument("--stack", help="local stack directory (or its stack.json), for `floe local up`")
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--region")
    parser.add_argument("--bucket")
    parser.add_argument("--table-prefix")
    parser.add_argument("--endpoint-url")
    parser.add_argument("--starting-offsets", default="earliest", help='"earliest", "latest" or JSON (first run only)')
    parser.add_argument("--max-offsets-per-trigger")
    parser.add_argument("--trigger-seconds", type=float, default=10.0)
    parser.add_argument("--available-now", action="store_true", help="read what is there, then stop")
    return parser.parse_args(argv)


def source_options(args: argparse.Namespace) -> dict[str, str]:
    return {option: str(getattr(args, flag)) for flag, option in _SOURCE_FLAGS.items() if getattr(args, flag) is not None}


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    """Start the query (the caller waits for it)."""
    spark.dataSource.register(FloeDataSource)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    records = spark.readStream.format("floe").options(**source_options(args)).load()
    writer = (
        records.withColumn("date", F.to_date("timestamp"))
        .writeStream.format("parquet")
        .partitionBy("date")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
    )
    return writer.trigger(**trigger(args)).start()


def trigger(args: argparse.Namespace) -> dict[str, object]:
    """The writeStream.trigger arguments for --available-now / --trigger-seconds."""
    return {"availableNow": True} if args.available_now else {"processingTime": f"{args.trigger_seconds} seconds"}


def run_until_stopped(app_name: str, start_query: Callable[[SparkSession], StreamingQuery]) -> None:
    """Start a session and the query, and wait until the query ends (AvailableNow) or is stopped."""
    # Locally, Spark's Python workers must be this interpreter (the one with Floe installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.appName(app_name).getOrCreate()
    try:
        start_query(spark).awaitTermination()
    finally:
        spark.stop()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    run_until_stopped("floe-stream-to-parquet", lambda spark: start(spark, args))


if __name__ == "__main__":
    main()
