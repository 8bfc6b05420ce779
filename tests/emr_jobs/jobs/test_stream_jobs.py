"""The streaming example jobs against a local stack: topic -> Parquet with a checkpoint, and counts topic -> topic."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import SparkSession

from broker_core.local_stack import STACK_FILE
from emr_jobs.jobs import stream_counts, stream_to_parquet
from tests.emr_jobs.test_tail_reads import create_tiered_topic
from tests.support.stack import running_stack

pytestmark = [pytest.mark.slow, pytest.mark.faults]  # streaming Spark jobs, about 70 s: in `make faults`, outside CI's 20-minute budget

WAIT_S = 180.0


def test_the_streaming_jobs_write_parquet_and_counts_back_to_floe(spark: SparkSession, tmp_path: Path) -> None:
    with running_stack(tmp_path / "stack") as stack:
        create_tiered_topic(stack, "views", 2)
        create_tiered_topic(stack, "views-per-minute", 1)
        producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all"})
        pages = [f"page-{number % 3}" for number in range(90)]
        now_ms = int(time.time() * 1000) // 60_000 * 60_000 + 30_000  # every record in one minute window
        for number, page in enumerate(pages):
            producer.produce("views", key=page.encode(), value=str(number).encode(), timestamp=now_ms)
        assert producer.flush(60) == 0
        stack_file = str(stack.directory / STACK_FILE)

        output = tmp_path / "lake" / "views"
        parquet_args = stream_to_parquet.parse_args([
            "--stack", stack_file, "--topic", "views", "--output", str(output),
            "--checkpoint", str(tmp_path / "checkpoints" / "views"), "--available-now",
        ])
        stream_to_parquet.start(spark, parquet_args).awaitTermination(WAIT_S)
        table = ds.dataset(output, format="parquet", partitioning="hive", exclude_invalid_files=True).to_table()
        assert sorted(int(value) for value in table["value"].to_pylist()) == list(range(90))
        assert set(table.column_names) >= {"key", "value", "partition", "offset", "date"}

        counts_args = stream_counts.parse_args([
            "--stack", stack_file, "--topic", "views", "--output-topic", "views-per-minute",
            "--checkpoint", str(tmp_path / "checkpoints" / "counts"), "--available-now",
        ])
        stream_counts.start(spark, counts_args).awaitTermination(WAIT_S)
        consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "check",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("views-per-minute", 0, 0)])
        latest: dict[str, int] = {}
        deadline = time.monotonic() + 60
        while len(latest) < 3 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                record = json.loads(message.value())
                latest[record["key"]] = record["count"]
        consumer.close()
        assert latest == dict(Counter(pages))
