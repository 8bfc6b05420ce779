"""The cleaner's map from a record key to the offset of the key's latest record (Kafka's SkimpyOffsetMap).

Keys are held as their 16-byte MD5 digests, as Kafka holds them, so an entry's cost does not depend on
the key's length; a different key with the same digest is a risk Kafka accepts too (2^-128 per pair).
The map's capacity in entries is Kafka's: the dedupe buffer share of one cleaner thread divided by 24
bytes (digest plus an 8-byte offset), times a load factor of 0.9. A Python dict spends more than 24
bytes an entry, so it is the number of keys that is bounded the way Kafka bounds it, not the bytes.
A map belongs to one cleaning pass on one thread.
"""

from __future__ import annotations

import hashlib

ENTRY_BYTES = 24
LOAD_FACTOR = 0.9


def key_digest(key: bytes) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Key digest -> latest offset, filled a segment at a time and never beyond ``capacity`` entries."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"an offset map needs room for at least one key, got capacity {capacity}")
        self.capacity = capacity
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    @classmethod
    def for_buffer(cls, dedupe_buffer_bytes: int, threads: int) -> OffsetMap:
        """A map sized as Kafka sizes one cleaner thread's map from log.cleaner.dedupe.buffer.size."""
        return cls(int(dedupe_buffer_bytes // max(threads, 1) // ENTRY_BYTES * LOAD_FACTOR))

    def __len__(self) -> int:
        return len(self._offsets)

    def get(self, digest: bytes) -> int:
        """The latest offset of the key with this digest, or -1 if the map does not hold it."""
        return self._offsets.get(digest, -1)

    def try_merge(self, segment_offsets: dict[bytes, int], last_offset: int) -> bool:
        """Add one segment's key offsets (all above those in the map) if they fit; False, unchanged, if not."""
        offsets = self._offsets
        new_keys = sum(1 for digest in segment_offsets if digest not in offsets)
        if len(offsets) + new_keys > self.capacity:
            return False
        offsets.update(segment_offsets)
        self.latest_offset = max(self.latest_offset, last_offset)
        return True
