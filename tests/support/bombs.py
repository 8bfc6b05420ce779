"""Decompression bombs: compressed record batches whose records section inflates far past any limit.

Each is built by streaming zeros through the codec's compressor, so making one never holds its
decompressed size in memory. `bomb_batch` puts such a payload in an otherwise well-formed batch
(header fields from Floe's builder, batchLength and CRC-32C recomputed), so the CRC check passes and
only the decompression limit can refuse it.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import cramjam
import lz4.frame
import zstandard

from broker_core.log.config import LogConfig
from broker_core.log.partition_log import PartitionLog
from broker_core.records import SimpleRecord, build_batch
from broker_core.records.compression import XERIAL_MAGIC
from broker_core.records.header import CRC_OFFSET, HEADER_SIZE, LOG_OVERHEAD, Compression, compute_crc

_ZEROS = bytes(1024 * 1024)
# The CreateTime of the bomb `log_holding_a_bomb` writes; its neighbours are a second either side.
BOMB_TIMESTAMP_MS = 1_700_000_000_000


def gzip_bomb(size: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [compressor.compress(_ZEROS) for _ in range(size // len(_ZEROS))]
    return b"".join(parts) + compressor.flush()


def zstd_bomb(size: int) -> bytes:
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    parts = [compressor.compress(_ZEROS) for _ in range(size // len(_ZEROS))]
    return b"".join(parts) + compressor.flush()


def lz4_bomb(size: int) -> bytes:
    compressor = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
    parts = [compressor.begin()]
    parts += [compressor.compress(_ZEROS) for _ in range(size // len(_ZEROS))]
    return b"".join(parts) + compressor.flush()


def snappy_bomb(declared: int = 2**31) -> bytes:
    """One xerial snappy block whose raw snappy preamble declares ``declared`` bytes of output.

    Snappy cannot compress more than about 21:1, so a real snappy bomb small enough for a produce
    request does not exist; what does is a block that claims a huge size, which a decompressor that
    trusts the claim allocates before it finds the body short.
    """
    block = bytearray()
    value = declared
    while value >= 0x80:
        block.append(value & 0x7F | 0x80)
        value >>= 7
    block.append(value)
    block += bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))[5:]
    return XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + bytes(block)


BOMBS = {
    Compression.GZIP: gzip_bomb,
    Compression.ZSTD: zstd_bomb,
    Compression.LZ4: lz4_bomb,
}


def bomb_payload(codec: Compression, size: int) -> bytes:
    """A records section of ``codec`` that decompresses to ``size`` bytes (snappy: claims ``size``)."""
    if codec is Compression.SNAPPY:
        return snappy_bomb(size)
    return BOMBS[codec](size)


def bomb_batch(codec: Compression, payload: bytes, *, records_count: int = 1, timestamp: int | None = None) -> bytes:
    """A batch with ``payload`` as its records section, ``records_count`` declared, and a valid CRC."""
    records = [SimpleRecord(value=b"x", timestamp=timestamp)] * records_count
    template = bytearray(build_batch(records, compression=codec))
    batch = template[:HEADER_SIZE] + payload
    struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def log_holding_a_bomb(directory: Path, codec: Compression, size: int = 100 * 1024 * 1024) -> PartitionLog:
    """A sealed segment holding a good batch (offset 0), a ``codec`` bomb (offset 1) and a good batch.

    Appended without the leader's decompression check (validated as a follower validates), as a
    broker with a higher limit, or a version without the check, would have written it; readers with
    the default limit must refuse it.
    """
    log = PartitionLog.open(directory, LogConfig(), topic="t", partition=0)
    for batch in (build_batch([SimpleRecord(value=b"before", timestamp=BOMB_TIMESTAMP_MS - 1000)], compression=codec),
                  bomb_batch(codec, bomb_payload(codec, size), timestamp=BOMB_TIMESTAMP_MS),
                  build_batch([SimpleRecord(value=b"after", timestamp=BOMB_TIMESTAMP_MS + 1000)], compression=codec)):
        # The log's clock is the records' time, so segment.ms does not roll a segment per batch.
        log.append(log.validate(batch, as_leader=False), leader_epoch=0, now_ms=BOMB_TIMESTAMP_MS + 2000)
    log.roll(BOMB_TIMESTAMP_MS + 2000)
    return log
