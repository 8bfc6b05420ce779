"""The checked-in batches were written by kafka-python (fixtures/make_fixtures.py); they pin the format."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.records import Compression, Record, SimpleRecord, build_batch, decode_batch, parse_header

FIXTURES = Path(__file__).parent / "fixtures"

EXPECTED_RECORDS = [
    Record(
        0, 1_700_000_000_000, b"key-0", b"value-" * 20, (("trace", b"abc"), ("empty", b""), ("null", None))
    ),
    Record(1, 1_700_000_000_005, None, b"", ()),
    Record(3, 1_699_999_999_990, b"", None, (("\u00e9t\u00e9", b"\x00\xff"),)),
    Record(4, 1_700_000_000_001, b"key-4", b"value-" * 20, ()),
]

# file -> (codec, is_transactional, producer id, producer epoch, base sequence)
FIXTURE_HEADERS = {
    "kafka_python_uncompressed.bin": (Compression.NONE, False, -1, -1, -1),
    "kafka_python_gzip_transactional.bin": (Compression.GZIP, True, 4242, 7, 100),
    "kafka_python_snappy.bin": (Compression.SNAPPY, False, 4242, 7, 104),
    "kafka_python_lz4.bin": (Compression.LZ4, False, -1, -1, -1),
    "kafka_python_zstd.bin": (Compression.ZSTD, False, -1, -1, -1),
}


@pytest.mark.parametrize("name", sorted(FIXTURE_HEADERS))
def test_each_pinned_batch_decodes_to_the_records_it_was_written_with(name: str) -> None:
    decoded = decode_batch((FIXTURES / name).read_bytes())
    assert decoded.records == EXPECTED_RECORDS
    codec, is_transactional, producer_id, producer_epoch, base_sequence = FIXTURE_HEADERS[name]
    header = decoded.header
    assert header.compression is codec
    assert header.is_transactional is is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        producer_id,
        producer_epoch,
        base_sequence,
    )
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (0, 4, 4)
    assert (header.base_timestamp, header.max_timestamp) == (1_700_000_000_000, 1_700_000_000_005)


def test_the_pinned_snappy_batch_is_xerial_framed() -> None:
    batch = (FIXTURES / "kafka_python_snappy.bin").read_bytes()
    assert batch[61:69] == b"\x82SNAPPY\x00"


def test_floe_writes_the_uncompressed_fixture_byte_for_byte() -> None:
    pinned = (FIXTURES / "kafka_python_uncompressed.bin").read_bytes()
    records = [
        SimpleRecord(r.key, r.value, r.headers, r.timestamp, offset_delta=r.offset) for r in EXPECTED_RECORDS
    ]
    # kafka-python writes partitionLeaderEpoch 0 where the Java client writes -1 (the broker sets it).
    assert build_batch(records, partition_leader_epoch=0) == pinned
    assert parse_header(pinned).partition_leader_epoch == 0
