from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core.records import (
    HEADER_SIZE,
    Compression,
    Record,
    SimpleRecord,
    TimestampType,
    TruncatedBatchError,
    UnknownCodecError,
    build_batch,
    decode_batch,
    iter_batches,
    iter_records,
    parse_header,
    verify_crc,
)

INT64 = st.integers(-(2**63), 2**63 - 1)
nullable_bytes = st.none() | st.binary(max_size=64)
record_headers = st.lists(st.tuples(st.text(max_size=12), nullable_bytes), max_size=4).map(tuple)
# Timestamps within a few years of each other, so deltas from the first always fit a varlong.
timestamps = st.integers(0, 2**42)
simple_records = st.builds(
    SimpleRecord, key=nullable_bytes, value=nullable_bytes, headers=record_headers, timestamp=timestamps
)


@st.composite
def batch_settings(draw: st.DrawFn) -> dict:
    has_producer = draw(st.booleans())
    return {
        "compression": draw(st.sampled_from(list(Compression))),
        "base_offset": draw(st.integers(0, 2**62)),
        "partition_leader_epoch": draw(st.integers(-1, 2**31 - 1)),
        "producer_id": draw(st.integers(0, 2**63 - 1)) if has_producer else -1,
        "producer_epoch": draw(st.integers(0, 2**15 - 1)) if has_producer else -1,
        "base_sequence": draw(st.integers(0, 2**31 - 1)) if has_producer else -1,
        "is_transactional": has_producer and draw(st.booleans()),
        "timestamp_type": draw(st.sampled_from(list(TimestampType))),
    }


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(simple_records, min_size=1, max_size=30), batch_settings(), timestamps)
def test_any_records_round_trip_with_any_codec_timestamp_type_and_producer_fields(
    records: list[SimpleRecord], options: dict, append_time: int
) -> None:
    log_append = options["timestamp_type"] is TimestampType.LOG_APPEND_TIME
    batch = build_batch(records, log_append_time=append_time if log_append else None, **options)
    decoded = decode_batch(batch)

    base_offset = options["base_offset"]
    expected_timestamps = [append_time if log_append else r.timestamp for r in records]
    assert decoded.records == [
        Record(base_offset + i, expected_timestamps[i], r.key, r.value, r.headers)
        for i, r in enumerate(records)
    ]
    header = decoded.header
    assert header.size == len(batch)
    assert header.compression is options["compression"]
    assert header.timestamp_type is options["timestamp_type"]
    assert header.is_transactional is options["is_transactional"]
    assert not header.is_control
    assert header.records_count == len(records)
    assert header.last_offset == base_offset + len(records) - 1
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == (append_time if log_append else max(r.timestamp for r in records))
    for field in ("partition_leader_epoch", "producer_id", "producer_epoch", "base_sequence"):
        assert getattr(header, field) == options[field]


@given(st.lists(simple_records, min_size=1, max_size=10), batch_settings())
def test_the_header_only_parse_agrees_with_the_full_decode(
    records: list[SimpleRecord], options: dict
) -> None:
    batch = build_batch(records, **options)
    header = parse_header(batch)
    verify_crc(batch, header)
    assert decode_batch(batch).header == header


@pytest.mark.parametrize("codec", list(Compression))
def test_a_batch_of_many_records_round_trips(codec: Compression) -> None:
    records = [
        SimpleRecord(key=b"k%d" % i, value=b"v" * (i % 300), timestamp=1_000 + i) for i in range(5_000)
    ]
    decoded = decode_batch(build_batch(records, compression=codec, base_offset=7))
    assert [r.offset for r in decoded.records] == list(range(7, 5_007))
    assert [(r.key, r.value, r.timestamp) for r in decoded.records] == [
        (r.key, r.value, r.timestamp) for r in records
    ]


def test_null_and_empty_stay_distinct_for_keys_values_and_header_values() -> None:
    records = [
        SimpleRecord(key=None, value=b"", headers=[("h", None), ("h", b"")], timestamp=1),
        SimpleRecord(key=b"", value=None, headers=[], timestamp=1),
    ]
    decoded = decode_batch(build_batch(records)).records
    assert (decoded[0].key, decoded[0].value, decoded[0].headers) == (None, b"", (("h", None), ("h", b"")))
    assert (decoded[1].key, decoded[1].value, decoded[1].headers) == (b"", None, ())


def test_explicit_offset_deltas_may_leave_gaps_and_set_the_last_offset() -> None:
    records = [
        SimpleRecord(value=b"a", offset_delta=0),
        SimpleRecord(value=b"b", offset_delta=5),
        SimpleRecord(),
    ]
    decoded = decode_batch(build_batch(records, base_offset=100))
    assert [r.offset for r in decoded.records] == [100, 105, 106]
    assert decoded.header.last_offset_delta == 6


def test_decoded_records_written_back_keep_their_offsets_and_bytes() -> None:
    original = build_batch(
        [
            SimpleRecord(b"k", b"v", [("a", b"1")], 50, offset_delta=0),
            SimpleRecord(None, b"w", (), 40, offset_delta=3),
        ],
        base_offset=1_000,
        compression=Compression.ZSTD,
    )
    rebuilt = build_batch(decode_batch(original).records, base_offset=1_000, compression=Compression.ZSTD)
    assert rebuilt == original


def test_a_record_without_a_timestamp_gets_the_build_time() -> None:
    before = time.time_ns() // 1_000_000
    decoded = decode_batch(build_batch([SimpleRecord(value=b"now")]))
    after = time.time_ns() // 1_000_000
    assert before <= decoded.records[0].timestamp <= after


def test_an_explicit_base_timestamp_is_kept_and_deltas_are_taken_from_it() -> None:
    decoded = decode_batch(
        build_batch([SimpleRecord(timestamp=500), SimpleRecord(timestamp=400)], base_timestamp=0)
    )
    assert decoded.header.base_timestamp == 0
    assert decoded.header.max_timestamp == 500
    assert [r.timestamp for r in decoded.records] == [500, 400]


def test_a_log_append_time_batch_reports_the_append_time_for_every_record() -> None:
    batch = build_batch(
        [SimpleRecord(timestamp=1), SimpleRecord(timestamp=2)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=9_999,
    )
    assert [r.timestamp for r in decode_batch(batch).records] == [9_999, 9_999]


def test_decoding_reads_a_batch_in_the_middle_of_a_larger_buffer() -> None:
    batch = build_batch([SimpleRecord(b"k", b"v", timestamp=3)], base_offset=42)
    buffer = bytearray(b"\xee" * 13 + batch + b"\xee" * 5)
    decoded = decode_batch(memoryview(buffer), 13)
    assert decoded.position == 13
    assert decoded.records == [Record(42, 3, b"k", b"v", ())]


def test_iter_batches_and_iter_records_walk_concatenated_batches_in_order() -> None:
    first = build_batch([SimpleRecord(value=b"a", timestamp=1), SimpleRecord(value=b"b", timestamp=1)])
    second = build_batch([SimpleRecord(value=b"c", timestamp=2)], base_offset=2, compression=Compression.LZ4)
    third = build_batch([SimpleRecord(value=b"d", timestamp=3)], base_offset=3, compression=Compression.GZIP)
    buffer = first + second + third
    batches = list(iter_batches(buffer))
    assert [b.position for b in batches] == [0, len(first), len(first) + len(second)]
    assert [(r.offset, r.value) for r in iter_records(buffer)] == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


def test_a_partial_batch_at_the_end_raises_unless_told_it_is_a_fetch_tail() -> None:
    first = build_batch([SimpleRecord(value=b"a", timestamp=1)])
    second = build_batch([SimpleRecord(value=b"b", timestamp=1)], base_offset=1)
    for cut in (5, HEADER_SIZE + 2, len(second) - 1):
        buffer = first + second[:cut]
        with pytest.raises(TruncatedBatchError) as raised:
            list(iter_records(buffer))
        assert raised.value.position == len(first)
        assert [r.value for r in iter_records(buffer, ignore_truncated_tail=True)] == [b"a"]


def test_building_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])


@pytest.mark.parametrize("deltas", [[1, 1], [3, 2], [-1], [0, 2**31]])
def test_offset_deltas_that_do_not_strictly_increase_from_zero_are_refused(deltas: list[int]) -> None:
    with pytest.raises(ValueError, match="offset delta"):
        build_batch([SimpleRecord(offset_delta=d, timestamp=0) for d in deltas])


def test_a_log_append_time_on_a_create_time_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="log_append_time"):
        build_batch([SimpleRecord(timestamp=0)], log_append_time=5)


@pytest.mark.parametrize(
    "field",
    [
        {"producer_epoch": 2**15},
        {"base_sequence": 2**31},
        {"base_offset": 2**63},
        {"producer_id": -(2**63) - 1},
    ],
)
def test_header_fields_outside_their_types_are_refused(field: dict) -> None:
    with pytest.raises(ValueError, match="out of range"):
        build_batch([SimpleRecord(timestamp=0)], **field)


def test_an_unknown_codec_is_refused_when_building() -> None:
    with pytest.raises(UnknownCodecError):
        build_batch([SimpleRecord(timestamp=0)], compression=6)
