from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.records import (
    HEADER_SIZE,
    Compression,
    CorruptBatchError,
    CorruptCompressedRecordError,
    CorruptCompressionError,
    CorruptCrcError,
    CorruptRecordError,
    SimpleRecord,
    TruncatedBatchError,
    UnknownCodecError,
    UnsupportedMagicError,
    build_batch,
    compress,
    compute_crc,
    decode_batch,
    encode_varint,
    iter_batches,
)
from broker_core.records.header import ATTRIBUTES_OFFSET, BATCH_HEADER, CRC_OFFSET, MAGIC_OFFSET

SMALL_BATCH = build_batch(
    [SimpleRecord(b"key", b"value", [("h", b"1")], timestamp=10), SimpleRecord(None, b"v2", timestamp=11)],
    base_offset=5,
)
# Where the batch under test sits in the buffer handed to the decoder, so positions are seen to be
# relative to the buffer, not to the batch.
LEAD = 9


def record_bytes(key: bytes | None = b"k", value: bytes | None = b"v", offset_delta: int = 0) -> bytes:
    """One well-formed record, as the records section of an uncompressed batch holds it."""
    return build_batch([SimpleRecord(key, value, timestamp=0, offset_delta=offset_delta)])[HEADER_SIZE:]


def batch_around(section: bytes, records_count: int, codec: Compression = Compression.NONE) -> bytes:
    """A batch with a valid header and CRC around an arbitrary (possibly malformed) records section."""
    payload = section if codec is Compression.NONE else compress(codec, section)
    batch = bytearray(HEADER_SIZE + len(payload))
    BATCH_HEADER.pack_into(
        batch, 0, 0, len(batch) - 12, -1, 2, 0, codec, records_count - 1, 0, 0, -1, -1, -1, records_count
    )
    batch[HEADER_SIZE:] = payload
    return bytes(refresh_crc(batch))


def refresh_crc(batch: bytearray) -> bytearray:
    batch[CRC_OFFSET : CRC_OFFSET + 4] = compute_crc(batch, 0, len(batch)).to_bytes(4, "big")
    return batch


def decode_at_lead(batch: bytes, **kwargs):
    return decode_batch(b"\xaa" * LEAD + batch, LEAD, **kwargs)


@given(st.data())
def test_flipping_any_byte_under_the_crc_raises_corrupt_crc_at_the_batch(data: st.DataObject) -> None:
    index = data.draw(st.integers(ATTRIBUTES_OFFSET, len(SMALL_BATCH) - 1))
    flip = data.draw(st.integers(1, 255))
    corrupted = bytearray(SMALL_BATCH)
    corrupted[index] ^= flip
    try:
        decode_at_lead(bytes(corrupted))
    except CorruptCrcError as error:
        assert error.position == LEAD
        assert error.expected != error.actual
    except (UnknownCodecError, CorruptBatchError) as error:
        # A flip in the codec bits, lastOffsetDelta or record count is caught by the header checks,
        # which run before the CRC.
        assert error.position == LEAD
        assert index < HEADER_SIZE
    else:
        raise AssertionError(f"flipping byte {index} went unnoticed")


def test_a_corrupt_crc_field_itself_is_caught() -> None:
    corrupted = bytearray(SMALL_BATCH)
    corrupted[CRC_OFFSET] ^= 0x01
    with pytest.raises(CorruptCrcError) as raised:
        decode_at_lead(bytes(corrupted))
    assert raised.value.position == LEAD


def test_base_offset_and_leader_epoch_are_outside_the_crc() -> None:
    rewritten = bytearray(SMALL_BATCH)
    rewritten[0:8] = (123).to_bytes(8, "big")
    rewritten[12:16] = (7).to_bytes(4, "big")
    decoded = decode_batch(bytes(rewritten))
    assert [r.offset for r in decoded.records] == [123, 124]
    assert decoded.header.partition_leader_epoch == 7


@pytest.mark.parametrize("cut", range(len(SMALL_BATCH)))
def test_a_batch_cut_at_any_byte_raises_truncated_with_what_it_needs(cut: int) -> None:
    with pytest.raises(TruncatedBatchError) as raised:
        decode_at_lead(SMALL_BATCH[:cut])
    assert raised.value.position == LEAD
    assert raised.value.available == cut
    assert raised.value.needed == (HEADER_SIZE if cut < HEADER_SIZE else len(SMALL_BATCH))


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_a_magic_other_than_2_raises_unsupported_magic(magic: int) -> None:
    changed = bytearray(SMALL_BATCH)
    changed[MAGIC_OFFSET] = magic & 0xFF
    with pytest.raises(UnsupportedMagicError) as raised:
        decode_at_lead(bytes(changed))
    assert (raised.value.position, raised.value.magic) == (LEAD, magic)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_bits_raise_unknown_codec(codec: int) -> None:
    changed = bytearray(SMALL_BATCH)
    changed[ATTRIBUTES_OFFSET + 1] |= codec
    with pytest.raises(UnknownCodecError) as raised:
        decode_at_lead(bytes(refresh_crc(changed)))
    assert (raised.value.position, raised.value.codec) == (LEAD, codec)


def test_a_corrupt_compressed_section_raises_corrupt_compression_at_the_section() -> None:
    batch = bytearray(
        build_batch([SimpleRecord(value=b"x" * 100, timestamp=0)], compression=Compression.ZSTD)
    )
    batch[HEADER_SIZE : HEADER_SIZE + 4] = b"nope"
    with pytest.raises(CorruptCompressionError) as raised:
        decode_at_lead(bytes(refresh_crc(batch)))
    assert raised.value.position == LEAD + HEADER_SIZE
    assert raised.value.codec == Compression.ZSTD


def test_an_overlong_varint_in_a_record_raises_with_the_record_index_and_position() -> None:
    first = record_bytes()
    batch = batch_around(first + b"\xff" * 6, records_count=2)
    with pytest.raises(CorruptRecordError) as raised:
        decode_at_lead(batch)
    assert raised.value.record_index == 1
    assert raised.value.position == LEAD + HEADER_SIZE + len(first)


def test_a_varint_cut_by_the_end_of_the_batch_raises_at_its_first_byte() -> None:
    first = record_bytes()
    second = record_bytes(offset_delta=1)
    batch = batch_around(
        first + second[:-1] + b"\x80", records_count=2
    )  # header count becomes an open varint
    with pytest.raises(CorruptRecordError) as raised:
        decode_at_lead(batch)
    assert raised.value.record_index == 1
    assert raised.value.position == LEAD + HEADER_SIZE + len(first) + len(second) - 1


def test_fewer_records_than_the_header_counts_raise_for_the_first_missing_one() -> None:
    section = record_bytes() + record_bytes(offset_delta=1)
    with pytest.raises(CorruptRecordError) as raised:
        decode_at_lead(batch_around(section, records_count=3))
    assert raised.value.record_index == 2
    assert raised.value.position == LEAD + HEADER_SIZE + len(section)


def test_bytes_after_the_counted_records_raise() -> None:
    section = record_bytes()
    with pytest.raises(CorruptRecordError, match="1 bytes left") as raised:
        decode_at_lead(batch_around(section + b"\x00", records_count=1))
    assert raised.value.record_index == 1
    assert raised.value.position == LEAD + HEADER_SIZE + len(section)


def test_a_record_length_past_the_end_of_the_batch_raises() -> None:
    record = record_bytes()
    with pytest.raises(CorruptRecordError, match="record length") as raised:
        decode_at_lead(batch_around(encode_varint(len(record) + 50) + record[1:], records_count=1))
    assert (raised.value.record_index, raised.value.position) == (0, LEAD + HEADER_SIZE)


def test_a_record_longer_than_its_fields_raises() -> None:
    record = record_bytes()
    padded = encode_varint(len(record)) + record[1:] + b"\x00"  # declares one byte more than it holds
    with pytest.raises(CorruptRecordError, match="declares") as raised:
        decode_at_lead(batch_around(padded, records_count=1))
    assert (raised.value.record_index, raised.value.position) == (0, LEAD + HEADER_SIZE)


def record_with_body(body: bytes) -> bytes:
    """A record whose fields after the attributes, timestamp delta and offset delta are ``body``."""
    fields = b"\x00" + encode_varint(0) + encode_varint(0) + body
    return encode_varint(len(fields)) + fields


FIELDS_START = 4  # length, attributes, timestamp delta, offset delta: one byte each here


@pytest.mark.parametrize(
    ("body", "message", "field_position"),
    [
        (encode_varint(-2) + b"\x01\x00", "key length -2", FIELDS_START),
        (b"\x01" + encode_varint(40) + b"\x00", "value length 40", FIELDS_START + 1),
        (b"\x01\x01" + encode_varint(-1), "negative header count", FIELDS_START + 2),
        (b"\x01\x01\x02" + encode_varint(-1) + b"\x01", "header key length -1", FIELDS_START + 3),
        (b"\x01\x01\x02\x02\xff\x01", "not UTF-8", FIELDS_START + 4),
        (b"\x01\x01\x02\x04hi" + encode_varint(-3), "header value length -3", FIELDS_START + 6),
    ],
)
def test_each_malformed_record_field_raises_at_that_field(
    body: bytes, message: str, field_position: int
) -> None:
    first = record_bytes()
    bad = record_with_body(body)
    with pytest.raises(CorruptRecordError, match=message) as raised:
        decode_at_lead(batch_around(first + bad, records_count=2))
    assert raised.value.record_index == 1
    assert raised.value.position == LEAD + HEADER_SIZE + len(first) + field_position


def test_a_malformed_record_in_a_compressed_batch_names_its_place_in_the_decompressed_records() -> None:
    first = record_bytes()
    section = first + record_with_body(encode_varint(-2) + b"\x01\x00")
    with pytest.raises(CorruptCompressedRecordError) as raised:
        decode_at_lead(batch_around(section, records_count=2, codec=Compression.GZIP))
    assert raised.value.record_index == 1
    assert raised.value.position == LEAD + HEADER_SIZE
    assert raised.value.decompressed_position == len(first) + FIELDS_START
    assert isinstance(raised.value, CorruptRecordError)


def test_decoding_without_crc_checks_still_finds_malformed_records() -> None:
    batch = bytearray(batch_around(record_bytes() + b"\xff" * 6, records_count=2))
    batch[CRC_OFFSET] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_at_lead(bytes(batch), verify_crc=False)


def test_iter_batches_stops_at_the_first_bad_batch_with_its_position() -> None:
    good = build_batch([SimpleRecord(value=b"a", timestamp=0)])
    bad = bytearray(build_batch([SimpleRecord(value=b"b", timestamp=0)], base_offset=1))
    bad[-1] ^= 0x10
    batches = iter_batches(good + bytes(bad))
    assert next(batches).records[0].value == b"a"
    with pytest.raises(CorruptCrcError) as raised:
        next(batches)
    assert raised.value.position == len(good)
