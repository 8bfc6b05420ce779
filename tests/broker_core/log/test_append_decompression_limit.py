"""A leader append refuses a compressed batch that decompresses past floe.message.max.decompressed.bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.log import LogConfig, PartitionLog
from broker_core.records import Compression, SimpleRecord, build_batch, iter_records
from broker_core.records.errors import CorruptBatchError, DecompressionLimitError
from tests.support.bombs import BOMB_TIMESTAMP_MS, bomb_batch, bomb_payload, log_holding_a_bomb

MIB = 1024 * 1024
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def open_log(path: Path, **settings: object) -> PartitionLog:
    return PartitionLog.open(path / "topic-0", LogConfig(**settings), topic="topic", partition=0)


@pytest.mark.parametrize("codec", CODECS)
def test_a_bomb_after_a_good_batch_writes_neither(tmp_path: Path, codec: Compression) -> None:
    with open_log(tmp_path, max_decompressed_bytes=4 * MIB) as log:
        good = build_batch([SimpleRecord(value=b"kept")], compression=codec)
        log.append(good)
        bomb = bomb_batch(codec, bomb_payload(codec, 64 * MIB))
        with pytest.raises(DecompressionLimitError) as raised:
            log.append(good + bomb)
        assert "4194304" in str(raised.value)
        assert log.log_end_offset == 1
        assert [r.value for r in iter_records(log.read_bytes(0, 10 * MIB))] == [b"kept"]


def test_a_compressed_batch_within_the_limit_is_appended(tmp_path: Path) -> None:
    with open_log(tmp_path, max_decompressed_bytes=MIB) as log:
        records = [SimpleRecord(value=bytes(1000)) for _ in range(1000)]  # ~1 MB of records
        info = log.append(build_batch(records, compression=Compression.ZSTD))
        assert info.last_offset == 999


def test_a_batch_too_short_for_its_declared_records_is_refused(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        payload = build_batch([SimpleRecord(value=b"v")], compression=Compression.LZ4)[61:]
        with pytest.raises(CorruptBatchError):
            log.append(bomb_batch(Compression.LZ4, payload, records_count=1000))
        assert log.log_end_offset == 0


def test_a_follower_append_does_not_decompress_again(tmp_path: Path) -> None:
    with open_log(tmp_path, max_decompressed_bytes=MIB) as log:
        batch = build_batch([SimpleRecord(value=bytes(2 * MIB))], compression=Compression.ZSTD)
        assert log.append_as_follower(batch).last_offset == 0


def test_list_offsets_by_timestamp_stops_at_the_limit_of_the_log_reading_it(tmp_path: Path) -> None:
    written = log_holding_a_bomb(tmp_path / "t-0", Compression.ZSTD)
    written.close()
    with PartitionLog.open(tmp_path / "t-0", LogConfig(max_decompressed_bytes=4 * MIB), topic="t",
                           partition=0) as log:
        assert log.offset_for_timestamp(0) == (0, BOMB_TIMESTAMP_MS - 1000)  # the good first batch
        with pytest.raises(DecompressionLimitError, match="base offset 1"):
            log.offset_for_timestamp(BOMB_TIMESTAMP_MS - 500)
