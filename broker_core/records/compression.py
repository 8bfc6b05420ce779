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

Decompression is bounded: every codec runs as a stream that hands out its output in chunks of at
most ``CHUNK_BYTES`` (1 MiB; zstd 16 MiB, see below) and stops with DecompressionLimitError as soon
as the total passes the caller's ``limit`` (`DEFAULT_MAX_DECOMPRESSED_BYTES` unless given). So a
decompression bomb costs at most the limit plus one chunk of memory, never its declared size;
`decompressed_size` runs the same stream and keeps nothing, so it costs one chunk (the produce
path uses it). zstd's streaming object returns all it can from the input it is given, so its input
is fed in pieces small enough that one call cannot yield more than 16 MiB. A snappy block declares
its size up front, and that declaration is checked before the library allocates it.

Decompression failures (corrupt or truncated streams, trailing garbage) raise CorruptCompressionError
with a position relative to the data handed in (0 when the library does not say where); callers that
know where that data sits re-raise with the real position. An unknown codec number raises UnknownCodecError.
"""

from __future__ import annotations

import gzip
import struct
import threading
import zlib
from collections.abc import Iterator

import cramjam
import lz4.frame
import zstandard

from .errors import CorruptCompressionError, DecompressionLimitError, UnknownCodecError
from .header import Compression

Buffer = bytes | bytearray | memoryview

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, minimum compatible version
_XERIAL_VERSION = 1
_XERIAL_COMPATIBLE_VERSION = 1
_XERIAL_BLOCK_LENGTH = struct.Struct(">i")
XERIAL_BLOCK_SIZE = 32 * 1024  # SnappyOutputStream's default block size

# The registry default of floe.message.max.decompressed.bytes (64 x Kafka's message.max.bytes rounded to
# MiB): what a records section may decompress to when the caller names no other limit.
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
# Largest piece of output held at once by a bounded decompression, beyond what the caller keeps.
CHUNK_BYTES = 1024 * 1024
# zstd: a block decompresses to at most 128 KiB and takes at least 4 bytes of input (an RLE block),
# so fed n bytes, one call outputs at most n * 32768 bytes plus the block in progress. Input is fed
# so that one call yields at most 16 MiB: 512-byte pieces, measured as fast as one call for the
# whole input on JSON-like records (128-byte pieces, a 4 MiB bound, cost 40% more on 1 MiB batches).
_ZSTD_BLOCK_MAX = 128 * 1024
_ZSTD_MAX_EXPANSION = _ZSTD_BLOCK_MAX // 4
_ZSTD_CALL_OUTPUT_MAX = 16 * 1024 * 1024
# A ZstdDecompressor holds a decompression context that costs ~15 us to create and may be used by
# one thread at a time: one per thread.
_zstd_per_thread = threading.local()

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


def decompress(codec: Compression | int, data: Buffer, *, limit: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress a records section written with ``codec``; DecompressionLimitError past ``limit`` bytes."""
    codec = as_codec(codec)
    if codec is Compression.NONE:
        return bytes(data)
    return b"".join(_bounded_chunks(codec, data, limit))


def decompressed_size(codec: Compression | int, data: Buffer, *, limit: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> int:
    """How many bytes ``data`` decompresses to, checked as `decompress` checks it, keeping none of them."""
    codec = as_codec(codec)
    if codec is Compression.NONE:
        return len(data)
    return sum(len(chunk) for chunk in _bounded_chunks(codec, data, limit))


def _bounded_chunks(codec: Compression, data: Buffer, limit: int) -> Iterator[bytes]:
    if not len(data):  # every codec writes at least a header, even for no data
        raise CorruptCompressionError(f"empty {codec.name.lower()} stream", position=0, codec=codec)
    view = memoryview(data).cast("B")
    chunks = (
        _gzip_chunks(view, limit) if codec is Compression.GZIP
        else _snappy_chunks(view, limit) if codec is Compression.SNAPPY
        else _lz4_chunks(view, limit) if codec is Compression.LZ4
        else _zstd_chunks(view, limit)
    )
    total = 0
    try:
        for chunk in chunks:
            total += len(chunk)
            if total > limit:
                raise DecompressionLimitError(codec=codec, limit=limit, position=0)
            yield chunk
    except (CorruptCompressionError, DecompressionLimitError):
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


def _gzip_chunks(view: memoryview, limit: int) -> Iterator[bytes]:
    # As gzip.decompress: members back to back, zero padding after a member ignored.
    remaining: Buffer = view
    while remaining:
        stream = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip wrapper only
        pending: Buffer = remaining
        while pending and not stream.eof:
            yield stream.decompress(pending, min(CHUNK_BYTES, limit + 1))
            pending = stream.unconsumed_tail
        while not stream.eof:
            chunk = stream.decompress(b"", min(CHUNK_BYTES, limit + 1))
            if not chunk:
                raise CorruptCompressionError("gzip member is truncated", position=0, codec=Compression.GZIP)
            yield chunk
        remaining = stream.unused_data.lstrip(b"\x00")


def _snappy_chunks(view: memoryview, limit: int) -> Iterator[bytes]:
    if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        yield _snappy_block(view, limit, limit)
        return
    if len(view) < _XERIAL_HEADER.size:
        raise CorruptCompressionError(
            "xerial snappy header is truncated", position=0, codec=Compression.SNAPPY
        )
    # The version fields are not checked: there has only ever been one xerial block format, and some
    # writers are known to put these two fields in little-endian order.
    cursor = _XERIAL_HEADER.size
    end = len(view)
    produced = 0
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
        block = _snappy_block(view[cursor : cursor + block_length], limit - produced, limit)
        produced += len(block)
        yield block
        cursor += block_length


def _snappy_block(block: memoryview, room: int, limit: int) -> bytes:
    # A raw snappy block starts with its decompressed length; checked against the room left under
    # ``limit`` before the library allocates it.
    declared = cramjam.snappy.decompress_raw_len(block)
    if declared > room:
        raise DecompressionLimitError(codec=Compression.SNAPPY, limit=limit, position=0)
    return bytes(cramjam.snappy.decompress_raw(block))


def _lz4_chunks(view: memoryview, limit: int) -> Iterator[bytes]:
    remaining: Buffer = view
    while True:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        yield decompressor.decompress(remaining, max_length=min(CHUNK_BYTES, limit + 1))
        while not decompressor.eof and not decompressor.needs_input:
            yield decompressor.decompress(b"", max_length=min(CHUNK_BYTES, limit + 1))
        if not decompressor.eof:
            raise CorruptCompressionError("lz4 frame is truncated", position=0, codec=Compression.LZ4)
        remaining = decompressor.unused_data
        if not remaining:
            return


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor = getattr(_zstd_per_thread, "decompressor", None)
    if decompressor is None:
        decompressor = _zstd_per_thread.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def _zstd_chunks(view: memoryview, limit: int) -> Iterator[bytes]:
    decompressor = _zstd_decompressor()
    cursor = 0
    end = len(view)
    produced = 0
    while cursor < end:
        stream = decompressor.decompressobj()
        while not stream.eof:
            if cursor >= end:
                raise CorruptCompressionError("zstd frame is truncated", position=0, codec=Compression.ZSTD)
            # Fed this much, one call yields at most min(room left, 16 MiB) and a block or two.
            piece = max(4, min(limit - produced, _ZSTD_CALL_OUTPUT_MAX) // _ZSTD_MAX_EXPANSION)
            chunk = stream.decompress(view[cursor : cursor + piece])
            cursor = min(cursor + piece, end)
            produced += len(chunk)
            yield chunk
        cursor -= len(stream.unused_data)
