"""The five RecordBatch v2 codecs, written the way Kafka's Java client writes them.

A compressed batch compresses its whole records section (everything after the 61-byte header) as one
stream. What each codec puts there:

- gzip: one or more gzip members (RFC 1952), as java.util.zip.GZIPOutputStream writes.
- snappy: xerial framing, as org.xerial.snappy.SnappyOutputStream writes: a 16-byte header
  (b"\\x82SNAPPY\\x00", int32 version, int32 minimum compatible version), then blocks of
  [int32 big-endian compressed length][raw snappy block], each block at most 32 KiB uncompressed.
  Decompression also accepts one plain raw snappy block, which some non-Java clients write.
- lz4: the LZ4 frame format with the header checksum computed correctly (Kafka 0.10+, KIP-57),
  independent 64 KiB blocks, no content size, no content checksum.
- zstd: one or more zstd frames; frames written by streaming compressors carry no content size,
  so decompression streams rather than trusting a declared size.

Decompression failures (corrupt or truncated streams, trailing garbage) raise CorruptCompressionError
with a position relative to the data handed in (0 when the library does not say where); callers that
know where that data sits re-raise with the real position. An unknown codec number raises UnknownCodecError.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from .errors import CorruptCompressionError, UnknownCodecError
from .header import Compression

Buffer = bytes | bytearray | memoryview

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, minimum compatible version
_XERIAL_VERSION = 1
_XERIAL_COMPATIBLE_VERSION = 1
_XERIAL_BLOCK_LENGTH = struct.Struct(">i")
XERIAL_BLOCK_SIZE = 32 * 1024  # SnappyOutputStream's default block size

GZIP_DEFAULT_LEVEL = 6  # java.util.zip.Deflater.DEFAULT_COMPRESSION, Kafka's default
ZSTD_DEFAULT_LEVEL = 3  # Kafka's compression.zstd.level default
LZ4_DEFAULT_LEVEL = 0  # fast mode; Kafka's producer defaults to 9 (high compression), much slower

# What the libraries raise on bad input: gzip BadGzipFile (an OSError), EOFError or zlib.error;
# lz4 RuntimeError; cramjam DecompressionError; zstandard ZstdError.
_DECOMPRESSION_ERRORS = (
    OSError,
    EOFError,
    zlib.error,
    RuntimeError,
    cramjam.DecompressionError,
    zstandard.ZstdError,
)


def compress(codec: Compression | int, data: Buffer, *, level: int | None = None) -> bytes:
    """Compress a records section with ``codec``; ``level`` overrides the codec's default level."""
    codec = as_codec(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return gzip.compress(data, compresslevel=GZIP_DEFAULT_LEVEL if level is None else level, mtime=0)
    if codec is Compression.SNAPPY:
        return _xerial_snappy_compress(memoryview(data))
    if codec is Compression.LZ4:
        return lz4.frame.compress(
            data,
            compression_level=LZ4_DEFAULT_LEVEL if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    return zstandard.ZstdCompressor(level=ZSTD_DEFAULT_LEVEL if level is None else level).compress(data)


def decompress(codec: Compression | int, data: Buffer) -> bytes:
    """Decompress a records section written with ``codec``."""
    codec = as_codec(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if not len(data):  # every codec writes at least a header, even for no data
        raise CorruptCompressionError(f"empty {codec.name.lower()} stream", position=0, codec=codec)
    try:
        if codec is Compression.GZIP:
            return gzip.decompress(data)
        if codec is Compression.SNAPPY:
            return _snappy_decompress(memoryview(data))
        if codec is Compression.LZ4:
            return _lz4_decompress(memoryview(data))
        return _zstd_decompress(memoryview(data))
    except CorruptCompressionError:
        raise
    except _DECOMPRESSION_ERRORS as error:
        raise CorruptCompressionError(
            f"corrupt {codec.name.lower()} data: {error}", position=0, codec=codec
        ) from error


def as_codec(codec: Compression | int) -> Compression:
    """The Compression member for ``codec``; UnknownCodecError (at position 0) when there is none."""
    try:
        return Compression(codec)
    except ValueError:
        raise UnknownCodecError(position=0, codec=int(codec)) from None


def _xerial_snappy_compress(view: memoryview) -> bytes:
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_COMPATIBLE_VERSION)]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_XERIAL_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(view: memoryview) -> bytes:
    if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    if len(view) < _XERIAL_HEADER.size:
        raise CorruptCompressionError(
            "xerial snappy header is truncated", position=0, codec=Compression.SNAPPY
        )
    # The version fields are not checked: there has only ever been one xerial block format, and some
    # writers are known to put these two fields in little-endian order.
    parts = []
    cursor = _XERIAL_HEADER.size
    end = len(view)
    while cursor < end:
        if end - cursor < _XERIAL_BLOCK_LENGTH.size:
            raise CorruptCompressionError(
                "xerial snappy block length is truncated", position=cursor, codec=Compression.SNAPPY
            )
        (block_length,) = _XERIAL_BLOCK_LENGTH.unpack_from(view, cursor)
        cursor += _XERIAL_BLOCK_LENGTH.size
        if block_length < 0 or block_length > end - cursor:
            raise CorruptCompressionError(
                f"xerial snappy block of {block_length} bytes does not fit in the {end - cursor} left",
                position=cursor - _XERIAL_BLOCK_LENGTH.size,
                codec=Compression.SNAPPY,
            )
        parts.append(bytes(cramjam.snappy.decompress_raw(view[cursor : cursor + block_length])))
        cursor += block_length
    return b"".join(parts)


def _lz4_decompress(view: memoryview) -> bytes:
    parts = []
    remaining: Buffer = view
    while True:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        parts.append(decompressor.decompress(remaining))
        if not decompressor.eof:
            raise CorruptCompressionError("lz4 frame is truncated", position=0, codec=Compression.LZ4)
        remaining = decompressor.unused_data
        if not remaining:
            return b"".join(parts)


def _zstd_decompress(view: memoryview) -> bytes:
    parts = []
    remaining: Buffer = view
    decompressor = zstandard.ZstdDecompressor()
    while True:
        stream = decompressor.decompressobj()
        parts.append(stream.decompress(remaining))
        if not stream.eof:
            raise CorruptCompressionError("zstd frame is truncated", position=0, codec=Compression.ZSTD)
        remaining = stream.unused_data
        if not remaining:
            return b"".join(parts)
