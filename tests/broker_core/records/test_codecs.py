from __future__ import annotations

import gzip
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from broker_core.records.compression import XERIAL_MAGIC, compress, decompress
from broker_core.records.errors import CorruptCompressionError, UnknownCodecError
from broker_core.records.header import Compression

COMPRESSED = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
# Compressible and long enough to span several xerial snappy blocks and lz4 blocks.
LONG_DATA = b"".join(b"record %d of a long batch;" % i for i in range(20_000))


@given(st.sampled_from(list(Compression)), st.binary(max_size=4096))
def test_every_codec_round_trips_arbitrary_bytes(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", list(Compression))
def test_every_codec_round_trips_data_spanning_many_blocks(codec: Compression) -> None:
    compressed = compress(codec, LONG_DATA)
    assert decompress(codec, memoryview(compressed)) == LONG_DATA
    if codec is not Compression.NONE:
        assert len(compressed) < len(LONG_DATA) // 4


def test_snappy_is_written_in_xerial_framing_with_32k_blocks() -> None:
    compressed = compress(Compression.SNAPPY, LONG_DATA)
    assert compressed[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    cursor, restored = 16, b""
    while cursor < len(compressed):
        (block_length,) = struct.unpack_from(">i", compressed, cursor)
        block = bytes(cramjam.snappy.decompress_raw(compressed[cursor + 4 : cursor + 4 + block_length]))
        assert len(block) <= 32 * 1024
        restored += block
        cursor += 4 + block_length
    assert restored == LONG_DATA


def test_plain_raw_snappy_is_accepted_on_decompress() -> None:
    raw = bytes(cramjam.snappy.compress_raw(LONG_DATA))
    assert decompress(Compression.SNAPPY, raw) == LONG_DATA


def test_xerial_snappy_with_little_endian_version_fields_is_accepted() -> None:
    framed = compress(Compression.SNAPPY, LONG_DATA)
    relabelled = XERIAL_MAGIC + struct.pack("<ii", 1, 1) + framed[16:]
    assert decompress(Compression.SNAPPY, relabelled) == LONG_DATA


def test_lz4_is_one_frame_of_independent_64k_blocks_with_no_content_size() -> None:
    compressed = compress(Compression.LZ4, LONG_DATA)
    assert compressed[:4] == b"\x04\x22\x4d\x18"
    flags, block_descriptor = compressed[4], compressed[5]
    assert flags >> 6 == 0b01  # frame format version 1
    assert flags & 0x20  # blocks independent: Kafka's reader refuses linked blocks
    assert not flags & 0x08  # no content size
    assert not flags & 0x04  # no content checksum
    assert (block_descriptor >> 4) & 0x7 == 4  # 64 KiB maximum block size
    # lz4's own reader checks the frame header checksum, which Kafka before 0.10 got wrong.
    assert lz4.frame.decompress(compressed) == LONG_DATA


def test_zstd_frames_without_a_content_size_decompress() -> None:
    compressed = zstandard.ZstdCompressor(write_content_size=False).compress(LONG_DATA)
    assert decompress(Compression.ZSTD, compressed) == LONG_DATA


def test_a_streamed_zstd_frame_decompresses() -> None:
    streamer = zstandard.ZstdCompressor().compressobj()
    compressed = b"".join(streamer.compress(LONG_DATA[i : i + 1000]) for i in range(0, len(LONG_DATA), 1000))
    compressed += streamer.flush()
    assert decompress(Compression.ZSTD, compressed) == LONG_DATA


@pytest.mark.parametrize(
    ("codec", "compress_one"),
    [
        (Compression.GZIP, gzip.compress),
        (Compression.LZ4, lz4.frame.compress),
        (Compression.ZSTD, zstandard.ZstdCompressor().compress),
    ],
)
def test_concatenated_frames_decompress_to_the_concatenated_data(codec: Compression, compress_one) -> None:
    assert (
        decompress(codec, compress_one(b"first half, ") + compress_one(b"second half"))
        == b"first half, second half"
    )


@pytest.mark.parametrize("codec", [5, 6, 7, 8])
def test_an_unknown_codec_is_refused_both_ways(codec: int) -> None:
    with pytest.raises(UnknownCodecError) as raised:
        compress(codec, b"data")
    assert raised.value.codec == codec
    with pytest.raises(UnknownCodecError):
        decompress(codec, b"data")


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_raises_corrupt_compression_for_every_codec(codec: Compression) -> None:
    with pytest.raises(CorruptCompressionError) as raised:
        decompress(codec, b"\x00not compressed data at all\xff" * 3)
    assert raised.value.codec == codec


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("kept", [0.0, 0.5, 0.99])
def test_a_truncated_stream_raises_corrupt_compression_for_every_codec(
    codec: Compression, kept: float
) -> None:
    compressed = compress(codec, LONG_DATA)
    with pytest.raises(CorruptCompressionError):
        decompress(codec, compressed[: int(len(compressed) * kept)])


def test_a_xerial_block_longer_than_the_data_left_raises_at_its_length_field() -> None:
    framed = compress(Compression.SNAPPY, b"payload")
    lying = framed[:16] + struct.pack(">i", 1000) + framed[20:]
    with pytest.raises(CorruptCompressionError) as raised:
        decompress(Compression.SNAPPY, lying)
    assert raised.value.position == 16


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_garbage_after_the_last_frame_raises(codec: Compression) -> None:
    with pytest.raises(CorruptCompressionError):
        decompress(codec, compress(codec, b"payload") + b"trailing garbage")
