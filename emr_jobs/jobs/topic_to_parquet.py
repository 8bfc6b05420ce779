"""Copy a topic's tiered records into Parquet, partitioned by the date of each record's timestamp.

The same file runs locally against `floe local up` and as an EMR Serverless entry point::

    python -m emr_jobs.jobs.topic_to_parquet --stack .floe/local --topic clicks --output out/clicks
    # on EMR Serverless (see emr_jobs.submit): --topic clicks --bucket my-floe-bucket --output s3://lake/clicks

The output has the floe source's columns (key, value, topic, partition, offset, timestamp,
timestampType, and headers with --include-headers) plus ``date`` (UTC), under
``<output>/date=YYYY-MM-DD/``. ``--mode overwrite`` (the default) replaces the dataset;
``--mode append`` adds to it, for incremental runs over consecutive offset ranges (each run's
``--starting-offsets`` being the previous run's ``--ending-offsets``). Tiered data is read from S3
and, with the brokers known (``--bootstrap-servers``, or the local stack's), the rest up to the high
watermark from the partitions' leaders; ``--tiered-only`` reads S3 only.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from emr_jobs import FloeDataSource

# Command-line flags of the job and the floe options they set.
_SOURCE_FLAGS = {
    "stack": "stack",
    "region": "region",
    "bucket": "bucket",
    "table_prefix": "tablePrefix",
    "endpoint_url": "endpointUrl",
    "starting_offsets": "startingOffsets",
    "ending_offsets": "endingOffsets",
    "starting_timestamp": "startingTimestamp",
    "ending_timestamp": "endingTimestamp",
    "max_bytes_per_partition": "maxBytesPerPartition",
    "bootstrap_servers": "kafka.bootstrap.servers",
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True, help="a directory or s3:// prefix for the Parquet dataset")
    parser.add_argument("--stack", help="local stack directory (or its stack.json), for `floe local up`")
    parser.add_argument("--region")
    parser.add_argument("--bucket", help="the cluster's S3 bucket (EMR)")
    parser.add_argument("--table-prefix", help="the cluster's DynamoDB table prefix (EMR)")
    parser.add_argument("--endpoint-url")
    parser.add_argument("--starting-offsets", help='"earliest" or JSON, as Spark\'s Kafka source')
    parser.add_argument("--ending-offsets", help='"latest" or JSON, as Spark\'s Kafka source')
    parser.add_argument("--starting-timestamp", help="milliseconds since the epoch")
    parser.add_argument("--ending-timestamp", help="milliseconds since the epoch")
    parser.add_argument("--max-bytes-per-partition")
    parser.add_argument("--include-headers", action="store_true")
    parser.add_argument("--bootstrap-servers", help="brokers to read the records not tiered yet from")
    parser.add_argument("--tiered-only", action="store_true", help="read tiered data only, never contact a broker")
    parser.add_argument("--mode", choices=("overwrite", "append"), default="overwrite")
    return parser.parse_args(argv)


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """The floe options for the job's arguments."""
    options = {"topic": args.topic, "includeHeaders": "true" if args.include_headers else "false"}
    if args.tiered_only:
        options["tieredOnly"] = "true"
    for flag, option in _SOURCE_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            options[option] = str(value)
    return options


def with_date(frame: DataFrame) -> DataFrame:
    """The records with a ``date`` column: the calendar date of their timestamp in the session time zone."""
    return frame.withColumn("date", F.to_date("timestamp"))


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    """Read the topic, write the Parquet dataset; return the number of records written."""
    spark.dataSource.register(FloeDataSource)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    written = Observation("written")
    records = with_date(spark.read.format("floe").options(**source_options(args)).load())
    records.observe(written, F.count(F.lit(1)).alias("records")).write.mode(args.mode).partitionBy("date").parquet(
        args.output
    )
    return written.get["records"]


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    # Locally, Spark's Python workers must be this interpreter (the one with Floe installed); on
    # EMR Serverless the submission sets PYSPARK_PYTHON to the packaged environment already.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.appName(f"floe-topic-to-parquet-{args.topic}").getOrCreate()
    try:
        written = run(spark, args)
    finally:
        spark.stop()
    print(f"wrote {written} records of topic {args.topic} to {args.output}")


if __name__ == "__main__":
    main()
