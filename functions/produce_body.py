"""A produce body decoded in one pass by msgspec, for the requests the pydantic models would accept as they are.

`functions.models` defines the produce body (its rules, its OpenAPI schema, its field errors); this
module is a faster reader of the same body. msgspec decodes the JSON text straight into Structs
that carry the same rules wherever msgspec can say them (unknown fields refused, the type enum,
partition_id and timestamp ranges, at least one and at most MAX_RECORDS_PER_REQUEST records,
header names of at most 32,767 characters), and `decode_records` checks what it cannot (data of the
right kind for its type, base64) while it turns each record into the bytes that are appended. It
accepts only bodies the pydantic models also accept, and reads them to the same records; for
anything else (a body with one record rather than ``{"records": [...]}``, an ISO-8601 timestamp, a
number where pydantic would coerce, NaN, a field error of any kind) it returns None and the caller
validates the body with the pydantic models, which then give the answer and its field errors. So
every error body stays pydantic's, and the fast reader only ever changes how fast a valid body is read.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

import msgspec
from pydantic_core import to_json

from functions.models import INT32_MAX, MAX_RECORDS_PER_REQUEST, MAX_TIMESTAMP_MS, DataType

# (partition_id or None, key, value, timestamp ms or None, headers): a record ready to be placed and encoded.
RecordFields = tuple[int | None, bytes | None, bytes | None, int | None, tuple[tuple[str, bytes | None], ...]]


class _Data(msgspec.Struct, forbid_unknown_fields=True):
    type: DataType
    data: Any = None


class _Header(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(max_length=32767)]
    value: str | None = None


class _Record(msgspec.Struct, forbid_unknown_fields=True):
    partition_id: Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)] | None = None
    headers: list[_Header] = []
    key: _Data | None = None
    value: _Data | None = None
    timestamp: Annotated[int, msgspec.Meta(ge=0, le=MAX_TIMESTAMP_MS)] | None = None


class _Records(msgspec.Struct, forbid_unknown_fields=True):
    records: Annotated[list[_Record], msgspec.Meta(min_length=1, max_length=MAX_RECORDS_PER_REQUEST)]


_DECODER = msgspec.json.Decoder(_Records)
_BINARY, _JSON, _STRING = DataType.BINARY, DataType.JSON, DataType.STRING


class _NotFast(Exception):
    """The body needs the pydantic models: they accept it differently, or refuse it."""


def _base64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise _NotFast
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _NotFast from None


def _bytes_of(typed: _Data | None) -> bytes | None:
    """The bytes `functions.models.TypedData.to_bytes` gives for the same key or value."""
    if typed is None:
        return None
    data = typed.data
    if data is None:
        return None
    kind = typed.type
    if kind is _JSON:
        return to_json(data, inf_nan_mode="constants")
    if not isinstance(data, str):
        raise _NotFast
    if kind is _STRING:
        return data.encode("utf-8")
    return _base64(data)


def decode_records(body: str | bytes) -> list[RecordFields] | None:
    """The records of a ``{"records": [...]}`` body the pydantic models accept as they are; None for
    any other body (the caller then validates it with `functions.models`)."""
    try:
        decoded = _DECODER.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    try:
        return [
            (record.partition_id, _bytes_of(record.key), _bytes_of(record.value), record.timestamp,
             tuple((header.name, None if header.value is None else _base64(header.value))
                   for header in record.headers) if record.headers else ())
            for record in decoded.records
        ]
    except (_NotFast, UnicodeEncodeError):
        return None
