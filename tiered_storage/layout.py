"""Where tiered segments live in S3: the object keys of a segment's log bytes and of its indexes object.

A sealed segment becomes two objects in the cluster's bucket::

    <hash8>/<topic>-<topic id>/<partition>/<20-digit base offset>-<segment id>.log
    <hash8>/<topic>-<topic id>/<partition>/<20-digit base offset>-<segment id>.indexes

``hash8`` is the first 8 hex digits of SHA-256 over ``"<topic id>:<partition>"``. S3 partitions its
request capacity by key prefix, so starting every key with a hash of the partition spreads the load
of many partitions across prefixes (DESIGN.md decision 6), while all objects of one partition still
share one prefix. The segment id (a UUID drawn for each upload attempt) makes every upload's keys
unique: a segment uploaded again after a crash, or by a new leader, never overwrites objects another
manifest row points at. Readers never list these keys; they take them from the manifest rows
(``tiered_storage.manifest``), so the layout can change without touching readers of old data.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

LOG_SUFFIX = ".log"
INDEXES_SUFFIX = ".indexes"
PARTITION_HASH_HEX_DIGITS = 8
_BASE_OFFSET_DIGITS = 20


class InvalidSegmentKeyError(ValueError):
    """An argument of an object key is out of range or a key does not follow the layout."""


@dataclass(frozen=True, slots=True)
class SegmentObjectKeys:
    """The two S3 keys of one uploaded segment."""

    log: str
    indexes: str


def partition_hash(topic_id: str, partition: int) -> str:
    """The 8-hex-digit prefix that spreads partitions across S3 key prefixes."""
    digest = hashlib.sha256(f"{topic_id}:{partition}".encode()).hexdigest()
    return digest[:PARTITION_HASH_HEX_DIGITS]


def partition_prefix(topic: str, topic_id: str, partition: int) -> str:
    """The key prefix (ending in "/") shared by every object of one partition."""
    if not topic or "/" in topic:
        raise InvalidSegmentKeyError(f"topic name {topic!r} cannot appear in an object key")
    if not topic_id or "/" in topic_id:
        raise InvalidSegmentKeyError(f"topic id {topic_id!r} cannot appear in an object key")
    if partition < 0:
        raise InvalidSegmentKeyError(f"partition {partition} is negative")
    return f"{partition_hash(topic_id, partition)}/{topic}-{topic_id}/{partition}/"


def segment_object_keys(
    topic: str, topic_id: str, partition: int, base_offset: int, segment_id: str
) -> SegmentObjectKeys:
    """The keys of the log and indexes objects of segment ``segment_id`` starting at ``base_offset``."""
    if not 0 <= base_offset < 10**_BASE_OFFSET_DIGITS:
        raise InvalidSegmentKeyError(f"base offset {base_offset} is out of range")
    try:
        canonical_id = str(uuid.UUID(segment_id))
    except ValueError as err:
        raise InvalidSegmentKeyError(f"segment id {segment_id!r} is not a UUID") from err
    stem = (
        f"{partition_prefix(topic, topic_id, partition)}{base_offset:0{_BASE_OFFSET_DIGITS}d}-{canonical_id}"
    )
    return SegmentObjectKeys(log=stem + LOG_SUFFIX, indexes=stem + INDEXES_SUFFIX)


def new_segment_id() -> str:
    """A fresh segment id: one per upload attempt, so two attempts never share object keys."""
    return str(uuid.uuid4())
