"""A bounds walk over a request frame, done before kio decodes it.

kio's native reader reserves memory for an array's declared element count before reading the
elements; when a client declares billions of elements in a tiny frame that reservation fails and the
process aborts. This walk follows the same schema (kio's dataclass field metadata) without building
anything and refuses a frame in which any declared length (array count, string, bytes, records,
tagged field) exceeds the bytes left, so the decoder is only ever handed frames whose lengths fit.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import cache

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from broker_core.records.errors import CorruptVarintError
from broker_core.records.varint import decode_unsigned_varint

_FIXED_SIZES = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_VARIABLE = {"string", "bytes", "records"}
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class LengthOutOfBoundsError(ValueError):
    """A declared length in the frame reaches past its end; ``position`` is where it was declared."""

    def __init__(self, what: str, declared: int, remaining: int, position: int, *, reason: str | None = None) -> None:
        super().__init__(f"{what}: {reason} (at byte {position})" if reason is not None else
                         f"{what} declares {declared} but only {remaining} bytes remain (at byte {position})")
        self.position = position


@cache
def _plan(cls: type) -> tuple[tuple, ...]:
    """(kind, kafka_type or nested class, optional, name) for each untagged field, in wire order."""
    steps = []
    for field in dataclasses.fields(cls):
        if "tag" in field.metadata:
            continue  # tagged fields travel in the tagged section, walked generically
        kind = classify_field(field)
        optional = is_optional(field)
        if isinstance(kind, EntityTupleField):
            steps.append(("entity_array", kind.type_, optional, field.name))
        elif isinstance(kind, EntityField):
            steps.append(("entity", kind.type_, optional, field.name))
        elif isinstance(kind, PrimitiveTupleField):
            steps.append(("primitive_array", field.metadata["kafka_type"], optional, field.name))
        else:
            steps.append(("primitive", field.metadata["kafka_type"], optional, field.name))
    return tuple(steps)


class _Walker:
    def __init__(self, buf: bytes, position: int) -> None:
        self.buf = buf
        self.pos = position

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def take(self, size: int, what: str) -> None:
        if size > self.remaining():
            raise LengthOutOfBoundsError(what, size, self.remaining(), self.pos)
        self.pos += size

    def uvarint(self, what: str) -> int:
        try:
            value, self.pos = decode_unsigned_varint(self.buf, self.pos)
        except CorruptVarintError as exc:  # past the frame's end, or longer than Kafka's 5 bytes
            raise LengthOutOfBoundsError(what, 1, self.remaining(), self.pos, reason=exc.reason) from None
        return value

    def length(self, flexible: bool, wide: bool, what: str) -> int:
        """A length prefix; -1 (null) comes back as 0 bytes to skip."""
        if flexible:
            return max(self.uvarint(what) - 1, 0)
        fmt = _INT32 if wide else _INT16
        start = self.pos
        self.take(fmt.size, what)
        return max(fmt.unpack_from(self.buf, start)[0], 0)

    def primitive(self, kafka_type: str, flexible: bool, what: str) -> None:
        size = _FIXED_SIZES.get(kafka_type)
        if size is not None:
            self.take(size, what)
        elif kafka_type in _VARIABLE:
            declared = self.length(flexible, kafka_type != "string", what)
            self.take(declared, what)
        else:
            raise LengthOutOfBoundsError(f"{what} of unknown type {kafka_type}", 0, self.remaining(), self.pos)

    def count(self, flexible: bool, what: str) -> int:
        declared = self.length(flexible, True, what)
        # Every element takes at least one byte, so no honest count exceeds the bytes left.
        if declared > self.remaining():
            raise LengthOutOfBoundsError(f"{what} count", declared, self.remaining(), self.pos)
        return declared

    def entity(self, cls: type, *, legacy_client_id: bool = False) -> None:
        flexible = bool(cls.__flexible__)
        for kind, detail, optional, name in _plan(cls):
            if kind == "primitive":
                wide_flex = flexible and not (legacy_client_id and name == "client_id")
                self.primitive(detail, wide_flex, name)
            elif kind == "primitive_array":
                for _ in range(self.count(flexible, name)):
                    self.primitive(detail, flexible, name)
            elif kind == "entity_array":
                for _ in range(self.count(flexible, name)):
                    self.entity(detail)
            else:
                if optional:
                    self.take(1, name)
                    if self.buf[self.pos - 1] == 0xFF:  # KIP-893 null marker (-1)
                        continue
                self.entity(detail)
        if flexible:
            for _ in range(self._tag_count()):
                self.uvarint("tag")
                self.take(self.uvarint("tagged field size"), "tagged field")

    def _tag_count(self) -> int:
        declared = self.uvarint("tagged field count")
        if declared > self.remaining():
            raise LengthOutOfBoundsError("tagged field count", declared, self.remaining(), self.pos)
        return declared


def check_lengths(header_cls: type, body_cls: type, frame: bytes) -> None:
    """Raise LengthOutOfBoundsError unless every declared length in ``frame`` fits inside it."""
    walker = _Walker(frame, 0)
    walker.entity(header_cls, legacy_client_id=True)
    walker.entity(body_cls)
