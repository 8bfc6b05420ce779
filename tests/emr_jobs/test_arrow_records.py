"""The native (numba) decoder gives exactly the records the reference codec gives, as Arrow, and names bad bytes."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema

from broker_core.records import (
    Compression,
    ControlRecordType,
    SimpleRecord,
    TimestampType,
    build_batch,
    build_control_batch,
    iter_batches,
)
from broker_core.records.compression import DEFAULT_MAX_DECOMPRESSED_BYTES
from broker_core.records.errors import RecordsError
from broker_core.records.header import CRC_OFFSET, compute_crc
from emr_jobs.arrow_records import RecordRange, arrow_schema, iter_arrow_batches
from emr_jobs.errors import CorruptSegmentError
from emr_jobs.schema import kafka_schema
from tests.emr_jobs.tiered_log import record_batches
from tests.support.bombs import bomb_batch, bomb_payload

EVERYTHING = 2**62


def decode(chunks, start=0, end=EVERYTHING, include_headers=True, stream_position=0):
    records = RecordRange("events", 3, start, end, include_headers)
    batches = list(iter_arrow_batches(chunks, records, object_key="seg.log", stream_position=stream_position))
    return pa.Table.from_batches(batches, schema=arrow_schema(include_headers))


def rows_of(table: pa.Table) -> list[tuple]:
    rows = []
    micros = table.column("timestamp").cast(pa.int64()).to_pylist()
    for row, timestamp in zip(table.to_pylist(), micros, strict=True):
        millis = timestamp // 1000
        headers = row.get("headers")
        rows.append(
            (
                row["offset"],
                row["key"],
                row["value"],
                millis,
                row["timestampType"],
                None if headers is None else tuple((h["key"], h["value"]) for h in headers),
            )
        )
    return rows


def reference_rows(data: bytes, start=0, end=EVERYTHING) -> list[tuple]:
    rows = []
    for batch in iter_batches(data):
        if batch.header.is_control:
            continue
        for record in batch.records:
            if start <= record.offset < end:
                rows.append(
                    (
                        record.offset,
                        record.key,
                        record.value,
                        record.timestamp,
                        int(batch.header.timestamp_type),
                        record.headers or None,
                    )
                )
    return rows


def with_offsets(batches: list[bytes]) -> bytes:
    """Batches back to back with contiguous base offsets, as in a segment."""
    out = bytearray()
    next_offset = 0
    for batch in batches:
        buf = bytearray(batch)
        struct.pack_into(">q", buf, 0, next_offset)
        last_offset_delta = struct.unpack_from(">i", buf, 23)[0]
        next_offset += last_offset_delta + 1
        out += buf
    return bytes(out)


SEGMENT = with_offsets(record_batches(30, 25))


@pytest.mark.parametrize("include_headers", [True, False])
def test_every_codec_decodes_to_the_rows_of_the_reference_codec(include_headers: bool) -> None:
    table = decode([SEGMENT], include_headers=include_headers)
    expected = reference_rows(SEGMENT)
    if not include_headers:
        expected = [row[:5] + (None,) for row in expected]
    assert rows_of(table) == expected
    assert set(table.column("topic").to_pylist()) == {"events"}
    assert set(table.column("partition").to_pylist()) == {3}


def test_rows_outside_the_offset_range_are_left_out_even_inside_a_batch() -> None:
    assert rows_of(decode([SEGMENT], start=37, end=611)) == reference_rows(SEGMENT, 37, 611)


def test_a_log_append_time_batch_gives_every_record_its_max_timestamp() -> None:
    batch = build_batch(
        [SimpleRecord(value=b"a", timestamp=5), SimpleRecord(value=b"b", timestamp=9)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=1_234,
    )
    table = decode([batch])
    assert table.column("timestampType").to_pylist() == [1, 1]
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [1_234_000, 1_234_000]


def test_control_batches_are_skipped_like_a_consumer_does() -> None:
    data = with_offsets(
        [
            build_batch([SimpleRecord(value=b"in-txn")], producer_id=7, producer_epoch=0, is_transactional=True),
            build_control_batch(ControlRecordType.COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0),
            build_batch([SimpleRecord(value=b"after")]),
        ]
    )
    table = decode([data])
    assert table.column("offset").to_pylist() == [0, 2]
    assert table.column("value").to_pylist() == [b"in-txn", b"after"]


def test_null_and_empty_keys_values_and_header_values_stay_apart() -> None:
    batch = build_batch(
        [
            SimpleRecord(key=None, value=b"", headers=[("a", None), ("b", b"")]),
            SimpleRecord(key=b"", value=None),
        ]
    )
    rows = decode([batch]).to_pylist()
    assert (rows[0]["key"], rows[0]["value"], rows[0]["headers"]) == (
        None,
        b"",
        [{"key": "a", "value": None}, {"key": "b", "value": b""}],
    )
    assert (rows[1]["key"], rows[1]["value"], rows[1]["headers"]) == (b"", None, None)


def test_offset_gaps_inside_a_batch_are_kept_as_a_compacted_topic_has_them() -> None:
    batch = build_batch([SimpleRecord(value=b"a", offset_delta=0), SimpleRecord(value=b"b", offset_delta=5)], base_offset=10)
    assert decode([batch]).column("offset").to_pylist() == [10, 15]


@pytest.mark.parametrize("include_headers", [True, False])
def test_the_arrow_schema_is_the_one_spark_converts_the_kafka_schema_to(include_headers: bool) -> None:
    assert arrow_schema(include_headers) == to_arrow_schema(kafka_schema(include_headers))


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(SEGMENT)), max_size=12))
def test_chunks_may_cut_the_stream_anywhere(cuts: list[int]) -> None:
    edges = [0, *sorted(cuts), len(SEGMENT)]
    chunks = [SEGMENT[a:b] for a, b in zip(edges, edges[1:], strict=False)]
    assert rows_of(decode(chunks, start=100, end=500)) == reference_rows(SEGMENT, 100, 500)


header_values = st.one_of(st.none(), st.binary(max_size=20))
records_strategy = st.lists(
    st.builds(
        SimpleRecord,
        key=st.one_of(st.none(), st.binary(max_size=300)),
        value=st.one_of(st.none(), st.binary(max_size=300)),
        headers=st.lists(st.tuples(st.text(max_size=8), header_values), max_size=3),
        timestamp=st.integers(min_value=0, max_value=2**41),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.tuples(records_strategy, st.sampled_from(list(Compression))), min_size=1, max_size=4))
def test_any_records_in_any_codec_decode_as_the_reference_codec_decodes_them(batches) -> None:
    data = with_offsets([build_batch(records, compression=codec) for records, codec in batches])
    assert rows_of(decode([data])) == reference_rows(data)


def corrupt_second_batch_crc() -> tuple[bytes, int]:
    first, second = build_batch([SimpleRecord(value=b"a")]), build_batch([SimpleRecord(value=b"b")])
    data = bytearray(with_offsets([first, second]))
    data[-1] ^= 0xFF
    return bytes(data), len(first)


def test_a_bad_crc_is_reported_at_its_byte_in_the_segment() -> None:
    data, second_at = corrupt_second_batch_crc()
    with pytest.raises(CorruptSegmentError) as raised:
        decode([data[:30], data[30:]], stream_position=4096)
    assert raised.value.position == 4096 + second_at
    assert raised.value.object_key == "seg.log"
    assert "CRC" in raised.value.reason


def test_a_stream_ending_inside_a_batch_is_an_error() -> None:
    with pytest.raises(CorruptSegmentError, match="truncated"):
        decode([SEGMENT[:-5]])


def test_batches_at_or_after_the_end_offset_are_never_checked() -> None:
    data, second_at = corrupt_second_batch_crc()
    assert decode([data], end=1).column("value").to_pylist() == [b"a"]


def recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def test_a_record_whose_key_overruns_the_record_is_reported_with_its_index() -> None:
    good = build_batch([SimpleRecord(key=b"k", value=b"v")])
    batch = bytearray(build_batch([SimpleRecord(key=b"k", value=b"v"), SimpleRecord(key=b"k", value=b"v")]))
    # Record 1 starts after the 61-byte header and the 9 bytes of record 0; its key length is its 5th byte.
    key_length_at = 61 + 9 + 4
    assert batch[key_length_at] == 2  # zigzag(1)
    batch[key_length_at] = 8  # zigzag(4): runs past the record's end
    with pytest.raises(CorruptSegmentError, match="record 1") as raised:
        decode([with_offsets([good, recrc(batch)])])
    assert raised.value.position == len(good) + 61 + 9


def test_a_header_key_that_is_not_utf8_is_an_error() -> None:
    batch = bytearray(build_batch([SimpleRecord(value=b"v", headers=[("ab", b"x")])]))
    key_at = bytes(batch).index(b"ab")
    batch[key_at] = 0xFF
    with pytest.raises(CorruptSegmentError, match="record 0"):
        decode([recrc(batch)])


@pytest.mark.parametrize(
    ("length_byte", "reason"),
    [(0x03, "record 1: negative record length"), (0x7E, "record 2: starts past the end"), (0x10, "3 records take")],
)
def test_a_bad_record_length_is_reported_with_the_record_and_byte(length_byte: int, reason: str) -> None:
    batch = bytearray(build_batch([SimpleRecord(value=b"a"), SimpleRecord(value=b"b"), SimpleRecord(value=b"c")]))
    record_size = 8  # length byte + 7: attributes, timestamp, offset delta, null key, value length, value, headers
    batch[61 + record_size] = length_byte  # record 1's length
    with pytest.raises(CorruptSegmentError, match=reason) as raised:
        decode([recrc(batch)], stream_position=100)
    if "negative" in reason:
        assert raised.value.position == 100 + 61 + record_size


def test_a_bad_record_in_a_compressed_batch_names_its_place_in_the_decompressed_records() -> None:
    from broker_core.records.compression import compress

    records = bytearray(build_batch([SimpleRecord(value=b"a"), SimpleRecord(value=b"b")])[61:])
    records[8] = 0x03  # record 1: negative length
    payload = compress(Compression.LZ4, bytes(records))
    header = bytearray(build_batch([SimpleRecord(value=b"a"), SimpleRecord(value=b"b")], compression=Compression.LZ4)[:61])
    struct.pack_into(">i", header, 8, 61 - 12 + len(payload))
    with pytest.raises(CorruptSegmentError, match="at byte 8 of the decompressed records") as raised:
        decode([recrc(header + payload)])
    assert raised.value.position == 61


@settings(max_examples=200, deadline=None)
@given(
    records=records_strategy,
    edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=255)), min_size=1, max_size=4),
    include_headers=st.booleans(),
)
def test_records_mangled_behind_a_valid_crc_decode_as_the_reference_codec_does_or_are_an_error(
        records, edits, include_headers) -> None:
    """The native record walk must bound every read by the bytes it was given: bytes that pass the CRC
    but whose varints, lengths or headers lie give the reference codec's rows or a CorruptSegmentError,
    never a crash or other rows."""
    batch = bytearray(build_batch(records))
    for at, byte in edits:
        batch[61 + at % (len(batch) - 61)] = byte
    data = recrc(batch)
    try:
        expected = reference_rows(data)
    except RecordsError:
        expected = None
    try:
        got = rows_of(decode([data], include_headers=include_headers))
    except CorruptSegmentError:
        return
    if expected is None:
        # Without headers wanted only their count is read, so bytes the reference codec refuses for
        # their headers alone may still give rows; with headers wanted every byte is checked.
        assert not include_headers
        return
    assert got == (expected if include_headers else [row[:5] + (None,) for row in expected])


utf8_edge_cases = st.sampled_from([
    b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf0\x8f\xbf\xbf",
    b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xc2", b"\xe2\x82", b"\xf0\x9f\x98", b"\xf4\x8f\xbf\xbf",
    b"\xed\x9f\xbf", b"\xe0\xa0\x80", b"\xf0\x90\x80\x80", b"\xc2\x80", b"\xdf\xbf", b"\xef\xbf\xbf",
])


@settings(max_examples=300, deadline=None)
@given(key=st.one_of(st.binary(max_size=10), st.text(max_size=5).map(str.encode), utf8_edge_cases,
                     st.tuples(st.text(max_size=3), utf8_edge_cases).map(lambda t: t[0].encode() + t[1])))
def test_a_header_key_decodes_exactly_when_python_takes_it_as_utf8(key: bytes) -> None:
    batch = bytearray(build_batch([SimpleRecord(value=b"v", headers=[("k" * len(key), b"x")])]))
    at = len(batch) - 2 - len(key)  # the batch ends with the header: key, value length (1 byte), b"x"
    batch[at : at + len(key)] = key
    data = recrc(batch)
    try:
        expected = key.decode("utf-8")
    except UnicodeDecodeError:
        with pytest.raises(CorruptSegmentError, match="record 0: a header key that is not UTF-8"):
            decode([data])
    else:
        assert rows_of(decode([data]))[0][5] == ((expected, b"x"),)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_a_decompression_bomb_is_reported_with_its_segment_and_base_offset(codec: Compression) -> None:
    good = build_batch([SimpleRecord(value=b"a")])
    bomb = bytearray(bomb_batch(codec, bomb_payload(codec, 100 * 1024 * 1024)))
    bomb[:8] = (1).to_bytes(8, "big")  # the batch after the first record
    with pytest.raises(CorruptSegmentError) as raised:
        decode([good + bytes(bomb)], stream_position=8192)
    assert raised.value.object_key == "seg.log"
    assert raised.value.position == 8192 + len(good) + 61
    assert "base offset 1" in raised.value.reason
    assert str(DEFAULT_MAX_DECOMPRESSED_BYTES) in raised.value.reason


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_a_record_count_the_bytes_cannot_hold_is_refused_before_anything_is_sized_by_it(codec: Compression) -> None:
    honest = build_batch([SimpleRecord(value=b"v")] * 3, compression=codec)
    inflated = bytearray(honest)
    struct.pack_into(">i", inflated, 23, 2**31 - 2)  # lastOffsetDelta
    struct.pack_into(">i", inflated, 57, 2**31 - 1)  # recordsCount
    with pytest.raises(CorruptSegmentError) as raised:
        decode([recrc(inflated)])
    assert "declares 2147483647 records" in raised.value.reason
