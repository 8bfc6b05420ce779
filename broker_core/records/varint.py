"""Zigzag varints and varlongs, the variable-length integers inside RecordBatch v2 records.

Kafka's ByteUtils writes a signed integer as its zigzag mapping ((n << 1) ^ (n >> width-1), so small
magnitudes of either sign stay short) in little-endian groups of 7 bits, the high bit of each byte
saying another byte follows. A varint holds an int32 in at most 5 bytes, a varlong an int64 in at
most 10. Decoders read straight from bytes, bytearray or memoryview at a position, never copy, and
raise CorruptVarintError (with the position where the varint starts) when the buffer ends inside a
varint or the varint runs past its maximum length. One- and two-byte varints (values within
+-8191: most lengths, deltas and counts in a batch) take a fast path. As in Java, bits past the
type's width in the last byte are dropped rather than rejected.
"""

from __future__ import annotations

from .errors import CorruptVarintError

Buffer = bytes | bytearray | memoryview

MAX_VARINT_SIZE = 5
MAX_VARLONG_SIZE = 10
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT32_MASK = (1 << 32) - 1
_UINT64_MASK = (1 << 64) - 1


def write_varint(out: bytearray, value: int) -> None:
    """Append the zigzag varint of the int32 ``value`` to ``out``."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint value {value} is outside int32")
    write_unsigned_varint(out, (value << 1) ^ (value >> 31))


def write_varlong(out: bytearray, value: int) -> None:
    """Append the zigzag varlong of the int64 ``value`` to ``out``."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong value {value} is outside int64")
    write_unsigned_varint(out, (value << 1) ^ (value >> 63))


def encode_varint(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def encode_varlong(value: int) -> bytes:
    out = bytearray()
    write_varlong(out, value)
    return bytes(out)


def decode_varint(buf: Buffer, position: int) -> tuple[int, int]:
    """Decode the varint at ``position``; return (value, position just after it)."""
    try:
        byte = buf[position]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), position + 1
        second = buf[position + 1]
        if second < 0x80:
            unsigned = (byte & 0x7F) | (second << 7)
            return (unsigned >> 1) ^ -(unsigned & 1), position + 2
    except IndexError:
        raise CorruptVarintError("varint runs past the end of the buffer", position=position) from None
    return _decode_long_zigzag(buf, position, MAX_VARINT_SIZE, _UINT32_MASK)


def decode_varlong(buf: Buffer, position: int) -> tuple[int, int]:
    """Decode the varlong at ``position``; return (value, position just after it)."""
    try:
        byte = buf[position]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), position + 1
        second = buf[position + 1]
        if second < 0x80:
            unsigned = (byte & 0x7F) | (second << 7)
            return (unsigned >> 1) ^ -(unsigned & 1), position + 2
    except IndexError:
        raise CorruptVarintError("varint runs past the end of the buffer", position=position) from None
    return _decode_long_zigzag(buf, position, MAX_VARLONG_SIZE, _UINT64_MASK)


def write_unsigned_varint(out: bytearray, unsigned: int) -> None:
    """Append ``unsigned`` as a plain (not zigzag) unsigned varint: the encoding under both the
    record varints here and the protocol's compact lengths (UNSIGNED_VARINT)."""
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)


def decode_unsigned_varint(buf: Buffer, position: int, max_size: int = MAX_VARINT_SIZE) -> tuple[int, int]:
    """Decode the plain (not zigzag) unsigned varint at ``position``, at most ``max_size`` bytes long:
    the encoding under the record varints here and the protocol's compact lengths. Returns (value,
    position just after it)."""
    unsigned = 0
    shift = 0
    cursor = position
    try:
        while True:
            byte = buf[cursor]
            cursor += 1
            unsigned |= (byte & 0x7F) << shift
            if byte < 0x80:
                return unsigned, cursor
            if cursor - position >= max_size:
                raise CorruptVarintError(f"varint longer than {max_size} bytes", position=position)
            shift += 7
    except IndexError:
        raise CorruptVarintError("varint runs past the end of the buffer", position=position) from None


def _decode_long_zigzag(buf: Buffer, position: int, max_size: int, mask: int) -> tuple[int, int]:
    """The varint at ``position`` whose first byte has its continuation bit set."""
    unsigned, cursor = decode_unsigned_varint(buf, position, max_size)
    unsigned &= mask
    return (unsigned >> 1) ^ -(unsigned & 1), cursor
