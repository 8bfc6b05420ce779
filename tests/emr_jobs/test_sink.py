"""The floe sink against a real broker: rows land where Kafka's default partitioner puts their keys.

Spark writes a DataFrame with df.write.format("floe"); a confluent-kafka producer (librdkafka with
Java's murmur2 partitioner) writes the same keys to a twin topic. A consumer then reads both: every
row arrives once, with its key, value and headers, in the partition librdkafka chose for its key.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, StructField, StructType

from broker_core.local_stack import STACK_FILE, LocalStack
from emr_jobs.errors import InvalidOptionError
from emr_jobs.sink import parse_sink_options
from tests.support.stack import running_stack

pytestmark = [pytest.mark.slow, pytest.mark.faults]  # Spark writes through the sink, about 75 s: in `make faults`, outside CI's 20-minute budget

PARTITIONS = 3
ROWS = 500


def consume_all(stack: LocalStack, topic: str, expected: int) -> dict[bytes, tuple[int, bytes, list]]:
    """key -> (partition, value, headers) of every record of ``topic``."""
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": f"check-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0) for partition in range(PARTITIONS)])
    found: dict[bytes, tuple[int, bytes, list]] = {}
    seen = 0
    deadline = time.monotonic() + 60
    try:
        while seen < expected and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            seen += 1
            found[message.key()] = (message.partition(), message.value(), message.headers() or [])
    finally:
        consumer.close()
    assert seen == expected
    return found


def test_a_dataframe_written_to_floe_lands_where_librdkafka_puts_each_key(spark: SparkSession, tmp_path: Path) -> None:
    with running_stack(tmp_path) as stack:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in ("written", "columns", "twin")]).values():
            future.result(timeout=30)
        frame = spark.createDataFrame(
            [(f"key-{n}", f"value-{n}".encode(), [("n", str(n).encode())]) for n in range(ROWS)],
            "key string, value binary, headers array<struct<key: string, value: binary>>",
        ).repartition(3)
        frame.write.format("floe").options(topic="written", stack=str(stack.directory / STACK_FILE)).mode(
            "append"
        ).save()
        # Without headers, the rows take the sink's column path (native partitioner and encoding).
        frame.select("key", "value").write.format("floe").options(
            topic="columns", stack=str(stack.directory / STACK_FILE)).mode("append").save()

        producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "partitioner": "murmur2_random"})
        for n in range(ROWS):
            producer.produce("twin", key=f"key-{n}".encode(), value=b"")
        assert producer.flush(60) == 0

        written, twin = consume_all(stack, "written", ROWS), consume_all(stack, "twin", ROWS)
        columns = consume_all(stack, "columns", ROWS)
        for n in range(ROWS):
            key = f"key-{n}".encode()
            partition, value, headers = written[key]
            assert (value, headers) == (f"value-{n}".encode(), [("n", str(n).encode())])
            assert partition == twin[key][0]
            assert columns[key] == (twin[key][0], f"value-{n}".encode(), [])


def test_the_sink_refuses_a_dataframe_without_a_topic_or_a_value(spark: SparkSession) -> None:
    frame = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception, match="topic option or a topic column"):
        frame.write.format("floe").options(**{"kafka.bootstrap.servers": "127.0.0.1:1"}).mode("append").save()
    with pytest.raises(Exception, match="value column"):
        frame.select("key").write.format("floe").options(
            topic="t", **{"kafka.bootstrap.servers": "127.0.0.1:1"}
        ).mode("append").save()


def test_a_stream_written_to_floe_copies_every_record_of_its_source(spark: SparkSession, tmp_path: Path) -> None:
    with running_stack(tmp_path / "stack") as stack:
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in ("source", "copy")]).values():
            future.result(timeout=30)
        producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all"})
        for n in range(ROWS):
            producer.produce("source", key=f"key-{n}".encode(), value=f"value-{n}".encode())
        assert producer.flush(60) == 0
        stack_file = str(stack.directory / STACK_FILE)
        query = (
            spark.readStream.format("floe").options(subscribe="source", stack=stack_file, startingOffsets="earliest")
            .load().select("key", "value")
            .writeStream.format("floe").options(topic="copy", stack=stack_file)
            .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
        )
        query.awaitTermination(180)
        assert query.exception() is None
        copied = consume_all(stack, "copy", ROWS)
        for n in range(ROWS):
            _, value, _ = copied[f"key-{n}".encode()]
            assert value == f"value-{n}".encode()


def test_stream_writes_are_exactly_once_unless_told_and_batch_writes_take_no_transaction_options() -> None:
    schema = StructType([StructField("value", BinaryType())])
    servers = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"}
    stream = parse_sink_options(servers, schema, streaming=True)
    assert (stream.exactly_once, stream.transactional_id_prefix, stream.transaction_timeout_ms) == (True, None, 60_000)
    relaxed = parse_sink_options({**servers, "exactlyOnce": "false", "transactionalIdPrefix": "copy",
                                  "transactionTimeoutMs": "120000"}, schema, streaming=True)
    assert (relaxed.exactly_once, relaxed.transactional_id_prefix, relaxed.transaction_timeout_ms) == (
        False, "copy", 120_000)
    assert parse_sink_options(servers, schema).exactly_once is False
    with pytest.raises(InvalidOptionError, match="unknown option"):
        parse_sink_options({**servers, "exactlyOnce": "true"}, schema)
    with pytest.raises(InvalidOptionError, match="transactionTimeoutMs"):
        parse_sink_options({**servers, "transactionTimeoutMs": "0"}, schema, streaming=True)
