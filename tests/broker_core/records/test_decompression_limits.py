"""Every codec stops decompressing at its limit: a bomb raises DecompressionLimitError, never inflates."""

from __future__ import annotations

import resource

import pytest

from broker_core.records import (
    Compression,
    CorruptCompressionError,
    CorruptRecordError,
    SimpleRecord,
    build_batch,
    compress,
    decode_batch,
    decompress,
)
from broker_core.records.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, decompressed_size
from broker_core.records.errors import DecompressionLimitError
from broker_core.settings import TOPIC_SETTINGS
from tests.support.bombs import bomb_batch, bomb_payload

CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
MIB = 1024 * 1024


@pytest.mark.parametrize("codec", CODECS)
def test_data_exactly_at_the_limit_decompresses_and_one_byte_more_does_not(codec: Compression) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    compressed = compress(codec, data)
    assert decompress(codec, compressed, limit=len(data)) == data
    assert decompressed_size(codec, compressed, limit=len(data)) == len(data)
    with pytest.raises(DecompressionLimitError) as raised:
        decompress(codec, compressed, limit=len(data) - 1)
    assert raised.value.limit == len(data) - 1
    with pytest.raises(DecompressionLimitError):
        decompressed_size(codec, compressed, limit=len(data) - 1)


@pytest.mark.parametrize("codec", CODECS)
def test_a_bomb_is_refused_without_growing_the_process(codec: Compression) -> None:
    payload = bomb_payload(codec, 512 * MIB)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DecompressionLimitError):
        decompress(codec, payload, limit=8 * MIB)
    with pytest.raises(DecompressionLimitError):
        decompressed_size(codec, payload, limit=8 * MIB)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 64 * 1024  # ru_maxrss is in KiB; 512 MiB inflated would show


@pytest.mark.parametrize("codec", CODECS)
def test_decode_batch_names_the_base_offset_and_the_limit(codec: Compression) -> None:
    batch = bytearray(bomb_batch(codec, bomb_payload(codec, 256 * MIB)))
    batch[:8] = (4242).to_bytes(8, "big")  # baseOffset is outside the CRC
    with pytest.raises(DecompressionLimitError) as raised:
        decode_batch(bytes(batch), max_decompressed_bytes=4 * MIB)
    assert raised.value.base_offset == 4242
    assert "base offset 4242" in str(raised.value)
    assert str(4 * MIB) in str(raised.value)


def test_the_default_limit_refuses_a_bomb_past_64_mib() -> None:
    batch = bomb_batch(Compression.ZSTD, bomb_payload(Compression.ZSTD, 65 * MIB))
    with pytest.raises(DecompressionLimitError) as raised:
        decode_batch(batch)
    assert raised.value.limit == 64 * MIB


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_declaring_more_records_than_it_holds_is_corrupt(codec: Compression) -> None:
    batch = bytearray(build_batch([SimpleRecord(value=b"v")] * 3, compression=codec))
    honest = bomb_batch(codec, bytes(batch[61:]), records_count=4)  # 3 records' bytes, 4 declared
    with pytest.raises(CorruptRecordError):
        decode_batch(honest)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_a_truncated_stream_is_still_corrupt_under_a_limit(codec: Compression) -> None:
    compressed = compress(codec, bytes(range(256)) * 1024)
    with pytest.raises(CorruptCompressionError):
        decompress(codec, compressed[:-9], limit=MIB)


def test_the_registry_default_is_the_limit_readers_apply() -> None:
    setting = TOPIC_SETTINGS["floe.message.max.decompressed.bytes"]
    assert int(setting.default) == DEFAULT_MAX_DECOMPRESSED_BYTES
    assert not setting.public  # a broker setting in effect: topics cannot raise it for themselves
