"""The floe reader without Spark: planning from the manifest and reading segments from S3 (moto server).

The segments are real ones, written by Floe's partition log and tiered into moto as the uploader
does; the expected rows come from decoding the same files with the reference codec.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import boto3
import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from broker_core.aws import AwsSettings
from broker_core.metadata.errors import UnknownTopicError
from broker_core.metadata.store import MetadataStore
from broker_core.records import Compression
from broker_core.records.compression import DEFAULT_MAX_DECOMPRESSED_BYTES
from emr_jobs import FloeDataSource, FloeReader
from emr_jobs.arrow_records import arrow_schema
from emr_jobs.errors import (
    CorruptSegmentError,
    InvalidOptionError,
    OffsetNotTieredError,
    SegmentGoneError,
    UnknownPartitionError,
)
from emr_jobs.options import parse_options
from emr_jobs.planning import SegmentRead
from emr_jobs.schema import kafka_schema
from tests.emr_jobs.conftest import aws_options
from tests.emr_jobs.tiered_log import (
    BASE_TIMESTAMP_MS,
    create_topic,
    expected_rows,
    record_batches,
    tier_segments,
    write_log,
)
from tests.support.bombs import log_holding_a_bomb
from tests.support.transactions import log_with_transactions
from tiered_storage.manifest import ManifestStore

SEGMENT_BYTES = 6000


def scattered_timestamp(index: int) -> int:
    """Timestamps that rise 10 ms per record but jitter up and down, as CreateTime from many producers does."""
    return BASE_TIMESTAMP_MS + 10 * index + (index * 7919) % 97 - 48


@pytest.fixture
def tiered(cluster: AwsSettings, tmp_path: Path):
    """Topic "events" with two partitions tiered from real partition logs, and the logs themselves."""
    topic = create_topic(cluster, "events", 3)
    logs = {}
    for partition in (0, 1):
        batches = record_batches(40, 15, partition=partition, timestamp_of=scattered_timestamp)
        log = write_log(tmp_path / f"events-{partition}", batches, segment_bytes=SEGMENT_BYTES, index_interval_bytes=300)
        tier_segments(cluster, log, topic, partition)
        logs[partition] = log
    return cluster, logs


def reader(settings: AwsSettings, **options: str) -> FloeReader:
    return FloeReader(parse_options({"topic": "events", "includeHeaders": "true", **aws_options(settings), **options}, {}))


def read_all(floe: FloeReader) -> dict[int, list[tuple]]:
    """Rows per partition, in the order the input partitions return them."""
    rows: dict[int, list[tuple]] = {}
    for read in floe.partitions():
        table = pa.Table.from_batches(list(floe.read(read)), schema=arrow_schema(True))
        micros = table.column("timestamp").cast(pa.int64()).to_pylist()
        for row, timestamp in zip(table.to_pylist(), micros, strict=True):
            headers = None if row["headers"] is None else tuple((h["key"], h["value"]) for h in row["headers"])
            rows.setdefault(row["partition"], []).append(
                (row["offset"], row["key"], row["value"], timestamp // 1000, row["timestampType"], headers)
            )
    return rows


def reference(logs, partition: int) -> list[tuple]:
    return [row[:5] + (row[5] or None,) for row in expected_rows(logs[partition])]


def test_every_tiered_record_is_read_once_in_offset_order(tiered) -> None:
    settings, logs = tiered
    rows = read_all(reader(settings))
    assert set(rows) == {0, 1}
    for partition in (0, 1):
        assert rows[partition] == reference(logs, partition)


def test_by_default_there_is_one_input_partition_per_segment(tiered) -> None:
    settings, logs = tiered
    reads = reader(settings).partitions()
    for partition in (0, 1):
        sealed = logs[partition].segments[:-1]
        mine = [r for r in reads if r.partition == partition]
        assert len(mine) == len(sealed) > 3
        assert [(r.byte_start, r.byte_end) for r in mine] == [(0, s.log_path.stat().st_size) for s in sealed]


def test_max_bytes_per_partition_cuts_segments_at_indexed_batch_boundaries(tiered) -> None:
    settings, logs = tiered
    floe = reader(settings, maxBytesPerPartition="1000")
    reads = [r for r in floe.partitions() if r.partition == 0]
    for segment in logs[0].segments[:-1]:
        name = f"/{segment.base_offset:020d}-"
        pieces = [r for r in reads if name in r.log_key]
        boundaries = [p.byte_start for p in pieces] + [pieces[-1].byte_end]
        index = segment.offset_index.path.read_bytes()
        positions = {position for _, position in struct.iter_unpack(">ii", index)}
        assert boundaries[0] == 0 and boundaries[-1] == segment.log_path.stat().st_size
        assert set(boundaries[1:-1]) <= positions
        for start, end in zip(boundaries, boundaries[1:], strict=False):
            # A piece is longer than the limit only when the index offers no cut within it.
            assert end - start <= 1000 or not any(start < p <= start + 1000 for p in positions)
        assert len(pieces) > 2
    assert read_all(floe) == read_all(reader(settings))


def test_offset_ranges_start_and_end_inside_segments(tiered) -> None:
    settings, logs = tiered
    floe = reader(
        settings,
        startingOffsets=json.dumps({"events": {"0": 37, "1": -2}}),
        endingOffsets=json.dumps({"events": {"0": 411}}),
        maxBytesPerPartition="2000",
    )
    rows = read_all(floe)
    assert rows[0] == [row for row in reference(logs, 0) if 37 <= row[0] < 411]
    assert rows[1] == reference(logs, 1)


@pytest.mark.parametrize(("start", "end"), [(2003, 4507), (5001, None), (None, 707)])
def test_timestamps_resolve_to_the_first_offset_reaching_them_as_list_offsets_does(tiered, start, end) -> None:
    settings, logs = tiered
    options = {}
    if start is not None:
        options["startingTimestamp"] = str(BASE_TIMESTAMP_MS + start)
    if end is not None:
        options["endingTimestamp"] = str(BASE_TIMESTAMP_MS + end)
    rows = read_all(reader(settings, **options))
    for partition in (0, 1):
        expected = reference(logs, partition)
        first = _first_offset_reaching(expected, int(options.get("startingTimestamp", 0)))
        stop = _first_offset_reaching(expected, int(options.get("endingTimestamp", 2**62)))
        wanted = [row for row in expected if first <= row[0] < stop]
        assert rows.get(partition, []) == wanted
        assert 0 < len(wanted) < len(expected)


def _first_offset_reaching(rows: list[tuple], timestamp: int) -> int:
    return next((row[0] for row in rows if row[3] >= timestamp), rows[-1][0] + 1)


def test_a_partition_with_nothing_tiered_reads_no_rows(tiered) -> None:
    settings, _ = tiered
    assert 2 not in read_all(reader(settings))
    assert read_all(reader(settings, startingTimestamp=str(2**50))) == {}


def test_offsets_beyond_the_tiered_data_are_refused(tiered) -> None:
    settings, logs = tiered
    latest = logs[0].segments[-1].base_offset
    with pytest.raises(OffsetNotTieredError) as raised:
        reader(settings, endingOffsets=json.dumps({"events": {"0": latest + 1}})).partitions()
    assert (raised.value.partition, raised.value.earliest, raised.value.latest) == (0, 0, latest)
    with pytest.raises(OffsetNotTieredError):
        reader(settings, startingOffsets=json.dumps({"events": {"2": 5}})).partitions()


def test_offsets_naming_a_partition_the_topic_lacks_are_refused(tiered) -> None:
    settings, _ = tiered
    with pytest.raises(UnknownPartitionError):
        reader(settings, startingOffsets=json.dumps({"events": {"7": 0}})).partitions()


def test_an_unknown_topic_is_refused(cluster: AwsSettings) -> None:
    with pytest.raises(UnknownTopicError):
        reader(cluster).partitions()


def test_a_read_spark_hands_no_partition_returns_nothing(cluster: AwsSettings) -> None:
    assert list(reader(cluster).read(None)) == []


def test_input_partitions_survive_pickling_as_spark_ships_them(tiered) -> None:
    import pickle

    settings, _ = tiered
    reads = reader(settings).partitions()
    assert all(isinstance(r, SegmentRead) for r in reads)
    assert pickle.loads(pickle.dumps(reads)) == reads


def test_a_segment_deleted_after_planning_fails_its_read_with_a_named_error(tiered) -> None:
    settings, _ = tiered
    floe = reader(settings)
    first = floe.partitions()[0]
    boto3.client("s3", **settings.boto3_kwargs()).delete_object(Bucket=settings.bucket, Key=first.log_key)
    with pytest.raises(SegmentGoneError) as raised:
        list(floe.read(first))
    assert raised.value.object_key == first.log_key


def test_a_user_schema_other_than_the_kafka_schema_is_refused() -> None:
    source = FloeDataSource({"topic": "events", "bucket": "b"})
    with pytest.raises(InvalidOptionError, match="schema"):
        source.reader(StructType([StructField("value", StringType())]))
    assert isinstance(source.reader(kafka_schema(False)), FloeReader)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD],
                         ids=lambda codec: codec.name.lower())
def test_a_decompression_bomb_in_a_segment_fails_the_read_naming_the_segment_and_offset(
        cluster: AwsSettings, tmp_path: Path, codec: Compression) -> None:
    topic = create_topic(cluster, "events", 1)
    log = log_holding_a_bomb(tmp_path / "events-0", codec)
    (segment,) = tier_segments(cluster, log, topic, 0)
    floe = reader(cluster)
    with pytest.raises(CorruptSegmentError) as raised:
        for read in floe.partitions():
            list(floe.read(read))
    assert raised.value.object_key == segment.log_key
    assert "base offset 1" in raised.value.reason
    assert str(DEFAULT_MAX_DECOMPRESSED_BYTES) in raised.value.reason


def test_read_committed_leaves_out_aborted_transactions_and_read_uncommitted_keeps_them(
        cluster: AwsSettings, tmp_path: Path) -> None:
    topic = create_topic(cluster, "events", 1)
    tier_segments(cluster, log_with_transactions(tmp_path / "events-0"), topic, 0)
    committed = read_all(reader(cluster, isolationLevel="read_committed"))
    assert [(offset, value) for offset, _, value, *_ in committed[0]] == [(3, b"plain"), (4, b"c1")]
    everything = read_all(reader(cluster))
    assert [offset for offset, *_ in everything[0]] == [0, 1, 3, 4, 6]
    with pytest.raises(InvalidOptionError, match="isolationLevel"):
        reader(cluster, isolationLevel="serializable")


@pytest.mark.faults  # its fixture tiers two partitions into moto, several seconds: in `make faults`, outside CI's 20-minute budget
def test_reads_start_at_the_log_start_delete_records_set_and_skip_the_segments_below_it(tiered) -> None:
    settings, logs = tiered
    topic_id = MetadataStore(settings).get_topic("events").topic_id
    first, second = logs[0].segments[0], logs[0].segments[1]
    log_start = second.base_offset + 5  # inside the second segment, not on a batch boundary
    ManifestStore(settings).advance_log_start(topic_id, 0, log_start)

    reads = [r for r in reader(settings).partitions() if r.partition == 0]
    assert not any(f"/{first.base_offset:020d}-" in r.log_key for r in reads)
    rows = read_all(reader(settings))
    assert rows[0] == [row for row in reference(logs, 0) if row[0] >= log_start]
    assert rows[1] == reference(logs, 1)

    # A timestamp that records below the log start reach resolves to a record at or above it.
    timestamp = BASE_TIMESTAMP_MS + 10 * (log_start - 20)
    after_start = [row for row in reference(logs, 0) if row[0] >= log_start]
    rows = read_all(reader(settings, startingTimestamp=str(timestamp)))
    assert rows[0] == [row for row in after_start if row[0] >= _first_offset_reaching(after_start, timestamp)]
    assert rows[0][0][0] >= log_start

    with pytest.raises(OffsetNotTieredError) as raised:
        reader(settings, startingOffsets=json.dumps({"events": {"0": log_start - 1}})).partitions()
    assert raised.value.earliest == log_start
