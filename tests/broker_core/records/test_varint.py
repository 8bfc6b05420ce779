from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.util import encode_varint as kafka_python_encode_varint

from broker_core.records.errors import CorruptVarintError
from broker_core.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    write_varint,
)

# Vectors from Kafka's ByteUtilsTest.
KNOWN_VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]


@pytest.mark.parametrize(("value", "encoded"), KNOWN_VARINTS)
def test_varints_encode_as_kafka_does(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


def test_varlong_extremes_take_ten_bytes() -> None:
    assert encode_varlong(INT64_MAX).hex() == "feffffffffffffffff01"
    assert encode_varlong(INT64_MIN).hex() == "ffffffffffffffffff01"


@given(st.integers(INT32_MIN, INT32_MAX))
def test_every_int32_round_trips_through_a_varint_of_at_most_five_bytes(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) <= 5
    assert decode_varint(encoded, 0) == (value, len(encoded))


@given(st.integers(INT64_MIN, INT64_MAX))
def test_every_int64_round_trips_through_a_varlong_of_at_most_ten_bytes(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) <= 10
    assert decode_varlong(encoded, 0) == (value, len(encoded))


@given(st.integers(INT32_MIN, INT32_MAX))
def test_varints_match_kafka_python_byte_for_byte(value: int) -> None:
    theirs = bytearray()
    kafka_python_encode_varint(value, theirs.append)
    assert encode_varint(value) == bytes(theirs)


@given(st.binary(max_size=8), st.integers(INT64_MIN, INT64_MAX), st.binary(max_size=8))
def test_decoding_reads_in_place_from_a_memoryview_and_returns_the_next_position(
    before: bytes, value: int, after: bytes
) -> None:
    view = memoryview(bytearray(before + encode_varlong(value) + after))
    decoded, next_position = decode_varlong(view, len(before))
    assert decoded == value
    assert view[next_position:] == after


def test_a_varint_cut_short_raises_at_its_first_byte() -> None:
    buf = b"\x00\x00" + encode_varint(INT32_MAX)[:-1]
    with pytest.raises(CorruptVarintError) as raised:
        decode_varint(buf, 2)
    assert raised.value.position == 2


def test_reading_past_the_end_raises() -> None:
    with pytest.raises(CorruptVarintError) as raised:
        decode_varint(b"\x02", 1)
    assert raised.value.position == 1


def test_a_varint_longer_than_five_bytes_raises() -> None:
    with pytest.raises(CorruptVarintError) as raised:
        decode_varint(b"\x01" + b"\xff" * 5 + b"\x01", 1)
    assert raised.value.position == 1
    assert "longer than 5 bytes" in str(raised.value)


def test_a_varlong_longer_than_ten_bytes_raises() -> None:
    with pytest.raises(CorruptVarintError):
        decode_varlong(b"\xff" * 10 + b"\x01", 0)


def test_bits_past_int32_in_the_fifth_byte_are_dropped_as_java_does() -> None:
    # 0x7f in the fifth byte carries bits 28-34; Java's int keeps bits 28-31 only.
    assert decode_varint(b"\xfe\xff\xff\xff\x7f", 0) == (INT32_MAX, 5)


@pytest.mark.parametrize("value", [INT32_MAX + 1, INT32_MIN - 1])
def test_writing_a_value_outside_int32_as_a_varint_is_refused(value: int) -> None:
    with pytest.raises(ValueError, match="outside int32"):
        write_varint(bytearray(), value)


def test_writing_a_value_outside_int64_as_a_varlong_is_refused() -> None:
    with pytest.raises(ValueError, match="outside int64"):
        encode_varlong(INT64_MAX + 1)
