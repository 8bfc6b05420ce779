"""The sink's column path: Kafka's partitioner and record encoding in native kernels, checked against
the Python partitioner and batch builder, and how a task's Arrow batches are cut into produce batches."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.partitioner import partition_for_key
from broker_core.records import EncodedRecords, SimpleRecord, build_batch, decode_batch
from emr_jobs import sink
from emr_jobs.record_kernels import encode_records, key_partitions
from emr_jobs.sink import SinkOptions, _binary_column, _produce_rows

optional_bytes = st.one_of(st.none(), st.binary(max_size=300))


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(optional_bytes, min_size=1, max_size=40), count=st.integers(1, 1000))
def test_the_partition_kernel_is_kafkas_default_partitioner(keys: list[bytes | None], count: int) -> None:
    column = _binary_column(pa.array(keys, pa.binary()))
    partitions = np.full(len(keys), -1, np.int32)
    key_partitions(*column, count, partitions)
    assert partitions.tolist() == [-1 if key is None else partition_for_key(key, count) for key in keys]


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(optional_bytes, optional_bytes), min_size=1, max_size=40), data=st.data())
def test_encoded_records_make_the_same_batch_as_the_python_builder(rows: list, data: st.DataObject) -> None:
    keys = _binary_column(pa.array([k for k, _ in rows], pa.binary()))
    values = _binary_column(pa.array([v for _, v in rows], pa.binary()))
    chosen = data.draw(st.lists(st.integers(0, len(rows) - 1), min_size=1, max_size=len(rows)))
    section = encode_records(np.array(chosen, np.int64), *keys, *values)
    timestamp = 1_790_000_000_000
    producer = {"producer_id": 7, "producer_epoch": 1, "base_sequence": 42}
    encoded = build_batch(EncodedRecords(section.tobytes(), len(chosen), timestamp), **producer)
    built = build_batch([SimpleRecord(key=rows[i][0], value=rows[i][1], timestamp=timestamp) for i in chosen],
                        **producer)
    assert encoded == built
    decoded = decode_batch(encoded)
    assert [(r.key, r.value) for r in decoded.records] == [rows[i] for i in chosen]


def test_string_columns_and_sliced_arrays_are_read_where_they_start() -> None:
    column = pa.array(["skip", "ab", None, "", "xyz"]).slice(1)
    offsets, data, valid = _binary_column(column)
    assert valid.tolist() == [True, False, True, True]
    assert [bytes(data[offsets[i]:offsets[i + 1]]) for i in range(4)] == [b"ab", b"", b"", b"xyz"]


class PartitionCount:
    """What `_produce_rows` asks of its client: the topic's partition count."""

    def __init__(self, count: int) -> None:
        self.count = count

    async def num_partitions(self, topic: str) -> int:
        return self.count


def produce(frame: pa.Table, options: SinkOptions, count: int) -> tuple[dict, list]:
    sent: list[tuple[str, int, list[tuple]]] = []

    async def send(topic: str, partition: int, records) -> None:  # noqa: ANN001
        batch = decode_batch(build_batch(records))
        sent.append((topic, partition, [(r.key, r.value, r.headers) for r in batch.records]))

    written = asyncio.run(_produce_rows(options, iter(frame.to_batches(max_chunksize=5000)),
                                       PartitionCount(count), send))  # type: ignore[arg-type]
    return written, sent


def options(**columns: bool) -> SinkOptions:
    fields = {"key_column": False, "headers_column": False, "topic_column": False, "partition_column": False}
    return SinkOptions(topic="t", bootstrap_servers="unused:9092", **{**fields, **columns})


def test_keyed_rows_go_where_kafka_puts_them_in_order_and_in_bounded_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink, "COLUMN_BATCH_RECORDS", 300)
    monkeypatch.setattr(sink, "COLUMN_BATCH_BYTES", 20_000)
    rows = 12_000
    keys = [f"key-{n % 997}".encode() for n in range(rows)]
    values = [(b"v" * (n % 90)) if n % 13 else None for n in range(rows)]
    written, sent = produce(pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}),
                            options(key_column=True), 5)
    assert written == {"t": rows}
    by_partition: dict[int, list] = {}
    for topic, partition, records in sent:
        assert topic == "t" and 1 <= len(records) <= 300
        assert len(records) == 1 or sum(len(k) + len(v or b"") + 20 for k, v, _ in records) <= 20_000
        by_partition.setdefault(partition, []).extend(records)
    for partition, records in by_partition.items():
        assert all(partition_for_key(key, 5) == partition for key, _, _ in records)
    expected = {p: [(k, v, ()) for k, v in zip(keys, values, strict=True) if partition_for_key(k, 5) == p]
                for p in by_partition}
    assert by_partition == expected  # every row once, in the DataFrame's order within its partition


def test_a_partition_column_wins_and_null_keys_stick_to_one_partition_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink, "COLUMN_BATCH_RECORDS", 100)
    random.seed(5)
    rows = 1000
    keys = [None if n % 2 else f"k{n}".encode() for n in range(rows)]
    given_partition = [n % 3 if n % 4 == 0 else None for n in range(rows)]
    frame = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array([b"x"] * rows),
                      "partition": pa.array(given_partition, pa.int32())})
    written, sent = produce(frame, options(key_column=True, partition_column=True), 7)
    assert written == {"t": rows}
    where = {}
    for _, partition, records in sent:
        for key, _, _ in records:
            where.setdefault(key, []).append(partition)
    for n, key in enumerate(keys):
        if key is not None:
            expected = given_partition[n] if given_partition[n] is not None else partition_for_key(key, 7)
            assert where[key] == [expected]
    unkeyed = [p for _, p, records in sent for k, _, _ in records if k is None]
    assert len(unkeyed) == sum(1 for n in range(rows) if keys[n] is None and given_partition[n] is None)
    assert len(set(unkeyed)) <= -(-len(unkeyed) // 100)  # at most one partition per 100 such rows


def test_rows_with_headers_or_a_topic_column_take_the_row_path() -> None:
    frame = pa.table({
        "value": pa.array([b"a", b"b", b"c"]),
        "topic": pa.array(["t", "u", "t"]),
        "headers": pa.array([[{"key": "h", "value": b"1"}], [], None],
                            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    })
    no_topic = SinkOptions(topic=None, bootstrap_servers="unused:9092", key_column=False, headers_column=True,
                           topic_column=True, partition_column=False)
    written, sent = produce(frame, no_topic, 1)
    assert written == {"t": 2, "u": 1}
    records = sorted((topic, value, headers) for topic, _, batch in sent for _, value, headers in batch)
    assert records == [("t", b"a", (("h", b"1"),)), ("t", b"c", ()), ("u", b"b", ())]


def test_rows_handed_over_as_spark_rows_take_the_row_path() -> None:
    """What a Spark version that gives the stream writer Rows rather than Arrow batches would send."""
    from pyspark.sql import Row

    sent: list[tuple[str, int, list]] = []

    async def send(topic: str, partition: int, records) -> None:  # noqa: ANN001
        sent.append((topic, partition, [(r.key, r.value) for r in decode_batch(build_batch(records)).records]))

    rows = [Row(key=f"k{n}".encode(), value=f"v{n}".encode()) for n in range(50)]
    written = asyncio.run(_produce_rows(options(key_column=True), iter(rows), PartitionCount(4), send))  # type: ignore[arg-type]
    assert written == {"t": 50}
    assert sorted(record for _, _, batch in sent for record in batch) == sorted((r.key, r.value) for r in rows)
    assert all(partition_for_key(key, 4) == partition for _, partition, batch in sent for key, _ in batch)
