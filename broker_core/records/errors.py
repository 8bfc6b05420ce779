"""Exceptions raised while decoding Kafka RecordBatch v2 bytes.

Every exception carries the byte position (relative to the start of the buffer the caller handed in)
at which the problem was found, as a structured field, so callers can report and truncate precisely.
"""

from __future__ import annotations


class RecordsError(Exception):
    """Base class of every record-format error."""

    def __init__(self, message: str, *, position: int) -> None:
        super().__init__(f"{message} (at byte {position})")
        self.position = position


class TruncatedBatchError(RecordsError):
    """The buffer ends before the batch it starts does."""

    def __init__(self, *, position: int, needed: int, available: int) -> None:
        super().__init__(f"truncated batch: needs {needed} bytes, {available} available", position=position)
        self.needed = needed
        self.available = available


class CorruptBatchError(RecordsError):
    """The batch header is self-inconsistent (negative or too-small length, bad counts)."""


class CorruptCrcError(RecordsError):
    """The CRC-32C stored in the batch does not match the bytes it covers."""

    def __init__(self, *, position: int, expected: int, actual: int) -> None:
        super().__init__(f"CRC-32C mismatch: stored {expected:#010x}, computed {actual:#010x}", position=position)
        self.expected = expected
        self.actual = actual


class UnsupportedMagicError(RecordsError):
    """The batch uses a message format other than v2 (magic 2)."""

    def __init__(self, *, position: int, magic: int) -> None:
        super().__init__(f"unsupported magic {magic}, only RecordBatch v2 (magic 2) is accepted", position=position)
        self.magic = magic


class UnknownCodecError(RecordsError):
    """The compression bits of the attributes name no known codec."""

    def __init__(self, *, position: int, codec: int) -> None:
        super().__init__(f"unknown compression codec {codec}", position=position)
        self.codec = codec


class CorruptRecordError(RecordsError):
    """A record inside a batch cannot be decoded (bad varint, length past the end, bad count)."""

    def __init__(self, message: str, *, position: int, record_index: int) -> None:
        super().__init__(f"record {record_index}: {message}", position=position)
        self.record_index = record_index


class CorruptVarintError(RecordsError):
    """A zigzag varint or varlong runs past the end of its buffer or past its maximum encoded length."""

    def __init__(self, reason: str, *, position: int) -> None:
        super().__init__(reason, position=position)
        self.reason = reason


class CorruptCompressionError(RecordsError):
    """A compressed records section cannot be decompressed with the codec its batch names."""

    def __init__(self, reason: str, *, position: int, codec: int) -> None:
        super().__init__(reason, position=position)
        self.reason = reason
        self.codec = codec


class DecompressionLimitError(RecordsError):
    """A compressed records section decompresses to more than the limit allowed (a decompression bomb).

    Decompression stops at the limit, so the full size is never known. ``base_offset`` is the batch's
    (None when the caller decompressed a bare records section).
    """

    def __init__(self, *, codec: int, limit: int, position: int, base_offset: int | None = None) -> None:
        name = _codec_name(codec)
        where = "records section" if base_offset is None else f"records of the batch at base offset {base_offset}"
        super().__init__(
            f"{name} {where} decompress to more than {limit} bytes"
            " (floe.message.max.decompressed.bytes)",
            position=position,
        )
        self.codec = codec
        self.limit = limit
        self.base_offset = base_offset


def _codec_name(codec: int) -> str:
    return {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}.get(codec, f"codec {codec}")


class CorruptCompressedRecordError(CorruptRecordError):
    """A record inside a compressed batch cannot be decoded.

    ``position`` is where the compressed records section starts in the caller's buffer (a byte inside
    the decompressed stream has no place there); ``decompressed_position`` is where the problem was
    found within the decompressed records.
    """

    def __init__(self, message: str, *, position: int, record_index: int, decompressed_position: int) -> None:
        super().__init__(
            f"{message} (at byte {decompressed_position} of the decompressed records)",
            position=position,
            record_index=record_index,
        )
        self.decompressed_position = decompressed_position


class CorruptControlRecordError(RecordsError):
    """A control record's key or value is too short or carries an unknown type or negative version.

    ``position`` is relative to the start of the key or value bytes that were handed in.
    """
