"""The floe stream source against a real broker: tail within seconds, restart from checkpoint exact.

A query streams a tiered topic into Spark's file sink (exactly-once) while records are produced;
it is stopped, more records are produced, and a second query on the same checkpoint with
Trigger.AvailableNow catches up. The Parquet output then holds every produced record exactly once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from broker_core.local_stack import STACK_FILE
from emr_jobs.errors import InvalidOptionError
from emr_jobs.stream import parse_stream_options, rate_limited
from tests.emr_jobs.test_tail_reads import create_tiered_topic, produce, tiered_end
from tests.support.stack import running_stack
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.faults]  # Spark streaming queries, minutes: in `make faults`, outside CI's 20-minute budget

TOPIC = "stream"
PARTITIONS = 2
WAIT_S = 180.0


def written_offsets(spark: SparkSession, output: Path) -> list[tuple[int, int, bytes]]:
    if not (output / "_spark_metadata" / "0").exists():  # the file sink commits its first batch there
        return []
    rows = spark.read.parquet(str(output)).select("partition", "offset", "value").collect()
    return sorted((row["partition"], row["offset"], bytes(row["value"])) for row in rows)


def expected_rows(values: list[bytes]) -> list[tuple[int, int, bytes]]:
    rows = []
    for partition in range(PARTITIONS):
        for index, number in enumerate(range(partition, len(values), PARTITIONS)):
            rows.append((partition, index, values[number]))
    return sorted(rows)


def test_a_stream_reads_the_tail_and_restarts_from_its_checkpoint_exactly(spark: SparkSession, tmp_path: Path) -> None:
    with running_stack(tmp_path / "stack", overrides={"remote.log.manager.task.interval.ms": "200"}) as stack:
        topic_id = create_tiered_topic(stack, TOPIC, PARTITIONS)
        values = [f"first-{number}-".encode() * 8 for number in range(400)]
        produce(stack, TOPIC, values, PARTITIONS)
        wait_until(lambda: tiered_end(stack, topic_id, 0) > 0, "a tiered segment", WAIT_S)
        stack_file = str(stack.directory / STACK_FILE)
        output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

        def stream():  # noqa: ANN202
            frame = (
                spark.readStream.format("floe")
                .options(subscribe=TOPIC, stack=stack_file, startingOffsets="earliest")
                .load()
            )
            return frame.writeStream.format("parquet").option("path", str(output)).option(
                "checkpointLocation", str(checkpoint)
            )

        query = stream().trigger(processingTime="1 second").start()
        try:
            wait_until(lambda: written_offsets(spark, output) == expected_rows(values), "the first records", WAIT_S)
            more = [f"second-{number}-".encode() for number in range(100)]
            produced_at = time.monotonic()
            produce(stack, TOPIC, more, PARTITIONS)
            values_then = values + more
            wait_until(lambda: len(written_offsets(spark, output)) == len(values_then), "the records produced live",
                       WAIT_S)
            assert time.monotonic() - produced_at < 60
            first_batch = json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[-1])
        finally:
            query.stop()
        assert query.exception() is None
        assert first_batch == {TOPIC: {"0": 200, "1": 200}}  # Spark's Kafka source's offsets JSON
        values = values_then + [f"third-{number}-".encode() for number in range(60)]
        produce(stack, TOPIC, values[len(values_then):], PARTITIONS)
        stream().trigger(availableNow=True).start().awaitTermination(WAIT_S)
        assert written_offsets(spark, output) == expected_rows(values)


def test_stream_options_are_checked_before_any_query_runs() -> None:
    base = {"kafka.bootstrap.servers": "localhost:9092", "bucket": "b", "tablePrefix": "p", "region": "us-east-1"}
    with pytest.raises(InvalidOptionError, match="exactly one of"):
        parse_stream_options({**base, "subscribe": "a", "subscribePattern": "a.*"}, {})
    with pytest.raises(InvalidOptionError, match="does not subscribe"):
        parse_stream_options({**base, "subscribe": "a,b", "startingOffsets": '{"c": {"0": 1}}'}, {})
    with pytest.raises(InvalidOptionError, match="maxOffsetsPerTrigger"):
        parse_stream_options({**base, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, {})
    with pytest.raises(InvalidOptionError, match="bootstrap"):
        parse_stream_options({k: v for k, v in base.items() if k != "kafka.bootstrap.servers"} | {"subscribe": "a"}, {})
    parsed = parse_stream_options({**base, "subscribe": "a, b", "startingOffsets": '{"a": {"0": 5, "1": -2}}'}, {})
    assert parsed.topics == ("a", "b")
    assert parsed.starting_offsets == {"a": {0: 5, 1: -2}}


def test_max_offsets_per_trigger_is_shared_by_what_each_partition_has_waiting() -> None:
    state = {"a": {0: (0, 1000, []), 1: (0, 1000, [])}, "b": {0: (0, 1000, [])}}
    position = {"a": {"0": 100, "1": 900}, "b": {"0": 0}}
    latest = {"a": {"0": 1000, "1": 1000}, "b": {"0": 1000}}
    # waiting: 900 + 100 + 1000 = 2000; a limit of 200 takes 90, 10 and 100
    assert rate_limited(position, latest, state, 200) == {"a": {"0": 190, "1": 910}, "b": {"0": 100}}
    # a partition new since the last batch (absent from the position) counts from its earliest offset
    assert rate_limited({"a": {"0": 1000, "1": 1000}}, latest, state, 10) == {"a": {"0": 1000, "1": 1000}, "b": {"0": 10}}
    assert rate_limited(position, latest, state, 5000) == latest
