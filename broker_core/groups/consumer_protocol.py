"""Decoding the consumer protocol's bytes, which the coordinator itself passes through untouched.

Kafka consumers put a ConsumerProtocolSubscription in JoinGroup metadata and the leader sends a
ConsumerProtocolAssignment per member in SyncGroup; both are an int16 version followed by that
version's struct (kio generates the structs). Only tools that show groups to people decode them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from importlib import import_module

from kio.serial import entity_reader
from kio.serial.errors import SerialError

_VERSION = struct.Struct(">h")
_LATEST_ASSIGNMENT_VERSION = 3
_LATEST_SUBSCRIPTION_VERSION = 3
CONSUMER_PROTOCOL_TYPE = "consumer"


class ConsumerProtocolError(ValueError):
    """The bytes are not a consumer-protocol struct; carries the byte offset where decoding stopped."""

    def __init__(self, what: str, position: int, reason: str) -> None:
        super().__init__(f"cannot decode {what} at byte {position}: {reason}")
        self.what = what
        self.position = position
        self.reason = reason


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    owned_partitions: tuple[tuple[str, int], ...]


def _read(data: bytes, what: str, package: str, class_name: str, latest: int) -> object:
    if len(data) < _VERSION.size:
        raise ConsumerProtocolError(what, 0, f"{len(data)} bytes is shorter than the version field")
    (version,) = _VERSION.unpack_from(data, 0)
    if version < 0:
        raise ConsumerProtocolError(what, 0, f"negative version {version}")
    # Newer versions only append fields, so an unknown newer version reads as the latest we know.
    module = import_module(f"kio.schema.{package}.v{min(version, latest)}.data")
    try:
        entity, _ = entity_reader(getattr(module, class_name))(data, _VERSION.size)
    except (SerialError, ValueError, TypeError, UnicodeDecodeError, IndexError) as exc:
        raise ConsumerProtocolError(what, _VERSION.size, str(exc)) from exc
    return entity


def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """(topic, partition) pairs of a member's assignment; empty bytes mean no assignment."""
    if not data:
        return []
    entity = _read(data, "consumer protocol assignment", "consumer_protocol_assignment",
                   "ConsumerProtocolAssignment", _LATEST_ASSIGNMENT_VERSION)
    return sorted((tp.topic, int(p)) for tp in entity.assigned_partitions for p in tp.partitions)


def decode_subscription(data: bytes) -> Subscription:
    entity = _read(data, "consumer protocol subscription", "consumer_protocol_subscription",
                   "ConsumerProtocolSubscription", _LATEST_SUBSCRIPTION_VERSION)
    owned = getattr(entity, "owned_partitions", ())
    return Subscription(
        topics=tuple(entity.topics),
        owned_partitions=tuple(sorted((tp.topic, int(p)) for tp in owned for p in tp.partitions)),
    )
