"""Control batches: the transaction markers (COMMIT / ABORT) a transaction coordinator appends.

A control batch has the control and transactional attribute bits set, the producer id and epoch of
the transaction it ends, and exactly one record with no headers, laid out as Kafka's
ControlRecordType and EndTransactionMarker write it (big-endian):

    key:   version int16 (0), type int16 (0 ABORT, 1 COMMIT)
    value: version int16 (0), coordinatorEpoch int32

As in Kafka, a higher version than the one written here is read by its known prefix (later versions
may only append fields); a negative version, a short key or value, or an unknown type raises
CorruptControlRecordError, positioned relative to the key or value bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from .batch import Record, SimpleRecord, build_batch
from .errors import CorruptControlRecordError
from .header import NO_PARTITION_LEADER_EPOCH

Buffer = bytes | bytearray | memoryview

CONTROL_KEY = struct.Struct(
    ">h"  # version
    "h"  # type
)
END_TRANSACTION_MARKER = struct.Struct(
    ">h"  # version
    "i"  # coordinatorEpoch
)
CURRENT_CONTROL_KEY_VERSION = 0
CURRENT_END_TRANSACTION_MARKER_VERSION = 0


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """What a transaction marker says: how the transaction ended and which coordinator epoch ended it."""

    type: ControlRecordType
    coordinator_epoch: int


def build_control_key(control_type: ControlRecordType) -> bytes:
    return CONTROL_KEY.pack(CURRENT_CONTROL_KEY_VERSION, ControlRecordType(control_type))


def parse_control_key(key: Buffer | None) -> ControlRecordType:
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptControlRecordError(
            f"control record key needs {CONTROL_KEY.size} bytes, has {0 if key is None else len(key)}",
            position=0,
        )
    version, type_id = CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptControlRecordError(f"negative control record key version {version}", position=0)
    try:
        return ControlRecordType(type_id)
    except ValueError:
        raise CorruptControlRecordError(f"unknown control record type {type_id}", position=2) from None


def build_control_value(coordinator_epoch: int) -> bytes:
    return END_TRANSACTION_MARKER.pack(CURRENT_END_TRANSACTION_MARKER_VERSION, coordinator_epoch)


def parse_control_value(value: Buffer | None) -> int:
    """The coordinator epoch an end-transaction marker's value carries."""
    if value is None or len(value) < END_TRANSACTION_MARKER.size:
        raise CorruptControlRecordError(
            f"end transaction marker needs {END_TRANSACTION_MARKER.size} bytes, has {0 if value is None else len(value)}",
            position=0,
        )
    version, coordinator_epoch = END_TRANSACTION_MARKER.unpack_from(value)
    if version < 0:
        raise CorruptControlRecordError(f"negative end transaction marker version {version}", position=0)
    return coordinator_epoch


def parse_end_transaction_marker(record: Record) -> EndTransactionMarker:
    """Read the marker a control batch's record holds."""
    return EndTransactionMarker(parse_control_key(record.key), parse_control_value(record.value))


def build_control_batch(
    control_type: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp: int | None = None,
) -> bytes:
    """One transaction marker batch, as Kafka's MemoryRecords.withEndTransactionMarker builds it.

    ``timestamp`` None means now.
    """
    marker = SimpleRecord(
        key=build_control_key(control_type), value=build_control_value(coordinator_epoch), timestamp=timestamp
    )
    return build_batch(
        [marker],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )
