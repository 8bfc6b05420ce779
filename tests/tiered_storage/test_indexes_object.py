"""The .indexes object: round trip, lookups, corruption detection."""

from __future__ import annotations

import struct

import crc32c
import pytest

from broker_core.log.transaction_index import AbortedTxn
from tiered_storage.indexes import (
    INDEXES_HEADER,
    CorruptIndexesObjectError,
    decode_indexes,
    encode_indexes,
)

BASE = 1000
# Batches of 10 records: the batch at position 4096*k ends at offset BASE + 10*k + 9.
OFFSET_INDEX = b"".join(struct.pack(">ii", 10 * k + 9, 4096 * k) for k in range(1, 5))
TIME_INDEX = b"".join(struct.pack(">qi", 5000 + 100 * k, 10 * k + 9) for k in range(1, 5))


def encoded() -> bytes:
    return encode_indexes(BASE, OFFSET_INDEX, TIME_INDEX, [(2, 990), (3, 1025)], b"snap")


def test_round_trip_keeps_every_section() -> None:
    indexes = decode_indexes(encoded())
    assert indexes.base_offset == BASE
    assert indexes.index_entries() == [(BASE + 10 * k + 9, 4096 * k) for k in range(1, 5)]
    assert indexes.timestamps == (5100, 5200, 5300, 5400)
    assert indexes.time_offsets == (1019, 1029, 1039, 1049)
    assert indexes.epoch_entries == ((2, 990), (3, 1025))
    assert indexes.producer_snapshot == b"snap"


def test_an_empty_segment_index_decodes() -> None:
    indexes = decode_indexes(encode_indexes(0, b"", b"", []))
    assert indexes.position_for_offset(123) == 0
    assert indexes.offset_for_timestamp(5) == 0


@pytest.mark.parametrize(
    ("offset", "position"),
    [
        (BASE, 0),
        (BASE + 18, 0),
        (BASE + 19, 4096),
        (BASE + 25, 4096),
        (BASE + 49, 4 * 4096),
        (BASE + 999, 4 * 4096),
    ],
)
def test_offset_lookup_lands_at_or_before_the_batch_holding_the_offset(offset: int, position: int) -> None:
    assert decode_indexes(encoded()).position_for_offset(offset) == position


@pytest.mark.parametrize(
    ("timestamp", "offset"),
    [(0, BASE), (5100, BASE), (5101, BASE + 20), (5300, BASE + 30), (9999, BASE + 50)],
)
def test_timestamp_lookup_skips_only_batches_entirely_before_it(timestamp: int, offset: int) -> None:
    assert decode_indexes(encoded()).offset_for_timestamp(timestamp) == offset


def test_a_flipped_byte_is_reported_as_a_crc_mismatch() -> None:
    data = bytearray(encoded())
    data[INDEXES_HEADER.size + 3] ^= 0x01
    with pytest.raises(CorruptIndexesObjectError, match="CRC"):
        decode_indexes(bytes(data))


@pytest.mark.parametrize("cut", [0, 10, INDEXES_HEADER.size, len(encoded()) - 1])
def test_a_truncated_object_is_rejected(cut: int) -> None:
    with pytest.raises(CorruptIndexesObjectError):
        decode_indexes(encoded()[:cut])


def test_a_wrong_magic_is_rejected() -> None:
    with pytest.raises(CorruptIndexesObjectError, match="magic"):
        decode_indexes(b"XXXX" + encoded()[4:])


def test_index_sections_must_be_whole_entries() -> None:
    with pytest.raises(ValueError):
        encode_indexes(0, b"\x00" * 7, b"", [])


def test_the_transaction_index_section_round_trips_in_kafkas_entry_format() -> None:
    aborted = [AbortedTxn(7, 1001, 1012, 1013), AbortedTxn(8, 1005, 1030, 1020)]
    data = encode_indexes(BASE, OFFSET_INDEX, TIME_INDEX, [(2, 990)], aborted_transactions=aborted)
    assert decode_indexes(data).aborted_transactions == tuple(aborted)
    # Section 5 is the .txnindex bytes as is: 34-byte entries at the end of the object.
    assert data[-68:] == struct.pack(">hqqqq", 0, 7, 1001, 1012, 1013) + struct.pack(">hqqqq", 0, 8, 1005, 1030, 1020)


def test_a_version_1_object_written_before_transactions_still_decodes_with_no_aborted_transactions() -> None:
    epochs = b"0\n1\n2 990\n"
    sections = OFFSET_INDEX + TIME_INDEX + epochs
    header = struct.pack(">4shhqiiiiI", b"FLXI", 1, 0, BASE, len(OFFSET_INDEX), len(TIME_INDEX), len(epochs), 0,
                         crc32c.crc32c(sections))
    indexes = decode_indexes(header + sections)
    assert indexes.epoch_entries == ((2, 990),)
    assert indexes.aborted_transactions == ()
    assert indexes.position_for_offset(BASE + 25) == 4096


def test_a_torn_transaction_index_section_is_corrupt() -> None:
    data = bytearray(encode_indexes(BASE, b"", b"", [], aborted_transactions=[AbortedTxn(7, 1001, 1012, 1013)]))
    # The transaction index section claims 33 bytes: not a whole number of 34-byte entries.
    struct.pack_into(">i", data, 32, 33)
    with pytest.raises(CorruptIndexesObjectError):
        decode_indexes(bytes(data))
