"""The floe source through Spark: the DataFrame holds exactly the tiered records, typed as Spark's Kafka source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from broker_core.aws import AwsSettings
from emr_jobs.schema import kafka_schema
from tests.emr_jobs.conftest import aws_options
from tests.emr_jobs.tiered_log import create_topic, expected_rows, record_batches, tier_segments, write_log

# Runs in `make faults`, not in `make test`: a Spark session over a tiered stack (about 40 s on CI); tests/emr_jobs/test_reader.py keeps the Spark reader in the default suite; the default suite must stay under CI's 20-minute budget.
pytestmark = pytest.mark.faults


@pytest.fixture
def tiered(cluster: AwsSettings, tmp_path: Path):
    topic = create_topic(cluster, "orders", 2)
    logs = {}
    for partition in (0, 1):
        log = write_log(tmp_path / f"orders-{partition}", record_batches(30, 20, partition=partition), segment_bytes=5000)
        tier_segments(cluster, log, topic, partition)
        logs[partition] = log
    return cluster, logs


def load(spark: SparkSession, settings: AwsSettings, **options: str) -> DataFrame:
    return spark.read.format("floe").options(topic="orders", **aws_options(settings), **options).load()


def collected(frame: DataFrame) -> list[tuple]:
    """Rows as (partition, offset, key, value, timestamp ms, timestamp type, headers), in Spark's order."""
    columns = ["partition", "offset", "key", "value", F.unix_millis("timestamp").alias("ms"), "timestampType"]
    has_headers = "headers" in frame.columns
    rows = frame.select(*columns, *(["headers"] if has_headers else [])).collect()
    return [
        (
            r["partition"],
            r["offset"],
            None if r["key"] is None else bytes(r["key"]),
            None if r["value"] is None else bytes(r["value"]),
            r["ms"],
            r["timestampType"],
            (None if r["headers"] is None else tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]))
            if has_headers
            else None,
        )
        for r in rows
    ]


def reference(logs, with_headers: bool) -> list[tuple]:
    return [
        (partition, offset, key, value, ms, kind, (headers or None) if with_headers else None)
        for partition in sorted(logs)
        for offset, key, value, ms, kind, headers in expected_rows(logs[partition])
    ]


def test_the_dataframe_holds_every_tiered_record_of_every_codec_with_headers(spark: SparkSession, tiered) -> None:
    settings, logs = tiered
    frame = load(spark, settings, includeHeaders="true")
    assert frame.schema == kafka_schema(True)
    assert collected(frame) == reference(logs, with_headers=True)
    assert {r["topic"] for r in frame.select("topic").distinct().collect()} == {"orders"}


def test_without_include_headers_the_schema_has_no_headers_column(spark: SparkSession, tiered) -> None:
    settings, logs = tiered
    frame = load(spark, settings, maxBytesPerPartition="1500")
    assert frame.schema == kafka_schema(False)
    assert collected(frame) == reference(logs, with_headers=False)
    assert frame.rdd.getNumPartitions() > sum(len(log.segments) - 1 for log in logs.values())


def test_offset_and_timestamp_options_select_the_same_rows_as_a_consumer_would(spark: SparkSession, tiered) -> None:
    settings, logs = tiered
    everything = reference(logs, with_headers=False)
    by_offsets = load(
        spark,
        settings,
        startingOffsets=json.dumps({"orders": {"0": 45, "1": -2}}),
        endingOffsets=json.dumps({"orders": {"0": 333, "1": 100}}),
    )
    assert collected(by_offsets) == [
        row for row in everything if (row[0] == 0 and 45 <= row[1] < 333) or (row[0] == 1 and row[1] < 100)
    ]
    start_ms, end_ms = everything[100][4], everything[400][4]
    by_time = load(spark, settings, startingTimestamp=str(start_ms), endingTimestamp=str(end_ms))
    expected = []
    for partition in (0, 1):
        rows = [row for row in everything if row[0] == partition]
        first = next(row[1] for row in rows if row[4] >= start_ms)
        stop = next(row[1] for row in rows if row[4] >= end_ms)
        expected += [row for row in rows if first <= row[1] < stop]
    assert collected(by_time) == expected


def test_a_bad_option_fails_the_load_with_its_name(spark: SparkSession, cluster: AwsSettings) -> None:
    with pytest.raises(PySparkException, match="startingOffsets"):
        load(spark, cluster, startingOffsets="latest").collect()
