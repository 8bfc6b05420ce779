"""The example job: a topic's tiered records land in Parquet partitioned by date, locally and via the CLI."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from broker_core.aws import AwsSettings
from broker_core.metadata.store import MetadataStore
from emr_jobs.jobs.topic_to_parquet import parse_args, run
from tests.emr_jobs.tiered_log import (
    BASE_TIMESTAMP_MS,
    create_topic,
    expected_rows,
    record_batches,
    tier_segments,
    write_log,
)
from tests.support.stack import running_stack
from tests.support.waiting import wait_until
from tiered_storage.manifest import ManifestStore

# Spark jobs end to end, about 105 s: in `make faults`, outside CI's 20-minute budget
pytestmark = pytest.mark.faults

HOUR_MS = 3_600_000


def utc_date(timestamp_ms: int) -> datetime.date:
    return datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.UTC).date()


def parquet_rows(directory: Path) -> list[tuple]:
    """(offset, key, value, date) of every row of the dataset, with date taken from the directory names."""
    table = ds.dataset(directory, format="parquet", partitioning="hive").to_table()
    rows = zip(*(table.column(name).to_pylist() for name in ("offset", "key", "value", "date")), strict=True)
    return sorted((offset, key, value, datetime.date.fromisoformat(str(date))) for offset, key, value, date in rows)


def test_the_job_writes_every_record_under_the_date_of_its_timestamp(
    spark: SparkSession, cluster: AwsSettings, tmp_path: Path
) -> None:
    topic = create_topic(cluster, "visits", 1)
    # One record an hour: the 600 records span 25 days.
    batches = record_batches(30, 20, timestamp_of=lambda index: BASE_TIMESTAMP_MS + index * HOUR_MS)
    log = write_log(tmp_path / "visits-0", batches, segment_bytes=8000)
    tier_segments(cluster, log, topic, 0)
    expected = [(offset, key, value, utc_date(ms)) for offset, key, value, ms, _, _ in expected_rows(log)]
    output = tmp_path / "lake"
    aws = ["--region", cluster.region, "--bucket", cluster.bucket, "--table-prefix", cluster.table_prefix]
    aws += ["--endpoint-url", cluster.endpoint_url]

    job = ["--topic", "visits", "--output", str(output), *aws]

    assert run(spark, parse_args(job)) == len(expected) == 600
    assert parquet_rows(output) == expected
    assert len(list(output.glob("date=*"))) == len({row[3] for row in expected}) > 20

    # Incremental runs: overwrite with the first 500 records, then append the rest.
    assert run(spark, parse_args([*job, "--ending-offsets", '{"visits": {"0": 500}}'])) == 500
    assert parquet_rows(output) == expected[:500]
    assert run(spark, parse_args([*job, "--starting-offsets", '{"visits": {"0": 500}}', "--mode", "append"])) == 100
    assert parquet_rows(output) == expected


@pytest.mark.slow
def test_the_documented_local_command_runs_against_a_local_stack(tmp_path: Path) -> None:
    overrides = {"remote.log.manager.task.interval.ms": "200"}
    with running_stack(tmp_path / "stack", overrides=overrides) as stack:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        configs = {"remote.storage.enable": "true", "segment.bytes": str(8 * 1024)}
        for future in admin.create_topics([NewTopic("pageviews", 2, 1, config=configs)]).values():
            future.result(timeout=30)
        # Batches of at most 50 records: one batch never spans segments, so small batches make segments roll.
        producer = Producer(
            {"bootstrap.servers": stack.bootstrap_servers, "acks": "all", "compression.type": "zstd", "batch.num.messages": 50}
        )
        for number in range(2000):
            value = f"view {number} ".encode() + os.urandom(60).hex().encode()  # zstd must not shrink it below a segment
            producer.produce("pageviews", key=f"page-{number % 13}".encode(), value=value, partition=number % 2)
        assert producer.flush(60) == 0
        topic_id = MetadataStore(stack.aws).get_topic("pageviews").topic_id
        manifest = ManifestStore(stack.aws)
        wait_until(lambda: all(manifest.list_segments(topic_id, p) for p in (0, 1)),
                   "a tiered segment in each partition", 120, interval_s=0.2)
        def tiered_ends() -> dict[int, int]:
            return {p: manifest.list_segments(topic_id, p)[-1].end_offset + 1 for p in (0, 1)}

        before = tiered_ends()
        output = tmp_path / "out" / "pageviews"

        result = subprocess.run(
            [sys.executable, "-m", "emr_jobs.jobs.topic_to_parquet", "--stack", str(stack.directory),
             "--topic", "pageviews", "--output", str(output)],
            capture_output=True, text=True, timeout=300,
        )

        assert result.returncode == 0, result.stderr[-3000:]
        after = tiered_ends()
        table = ds.dataset(output, format="parquet", partitioning="hive").to_table()
        # With the stack's brokers the job reads to the high watermark: tiered segments and the tail.
        for partition in (0, 1):
            offsets = sorted(o for o, p in zip(table["offset"].to_pylist(), table["partition"].to_pylist(), strict=True) if p == partition)
            assert offsets == list(range(1000))
            assert before[partition] <= after[partition] < 1000  # some records were only on the broker
        assert f"wrote {table.num_rows} records of topic pageviews" in result.stdout
        assert {str(date) for date in table["date"].to_pylist()} == {str(datetime.datetime.now(datetime.UTC).date())}
