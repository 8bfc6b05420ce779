"""The cleaner's map from a record key to the offset of the key's latest record (Kafka's SkimpyOffsetMap).

Kafka keys its map by a 16-byte MD5 digest of the key, so an entry's cost does not depend on the key's
length. Floe keys it by two independent 64-bit hashes of the key, computed in native code with the
rest of the record walk (`broker_core.log.cleaner_kernels`, whose docstring states the hash): 128 bits
as well, seeded at random per map, so a different key with the same hashes is a risk of about 2^-128
per pair, the risk Kafka accepts for MD5. The table is Kafka's too: open addressing with linear
probing over a numpy array of 8 + 8 bytes of hash and 8 of offset per slot (24 bytes an entry), grown
by doubling and kept at most half full, never holding more than ``capacity`` keys. The capacity in
entries is Kafka's: the dedupe buffer share of one cleaner thread divided by 24 bytes, times a load
factor of 0.9.

A map belongs to one cleaning pass on one thread. numpy and the kernels are imported on first use, so
that a broker which never cleans does not load them.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

ENTRY_BYTES = 24
LOAD_FACTOR = 0.9
_MIN_SLOTS = 1024


def key_digest(key: bytes) -> bytes:
    """Kafka's key digest (MD5), as `broker_core.log.cleaner.scan_records`, the record-at-a-time reference scan, gives it."""
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Key hashes -> latest offset, filled a segment at a time and never beyond ``capacity`` keys."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"an offset map needs room for at least one key, got capacity {capacity}")
        self.capacity = capacity
        self.latest_offset = -1
        seeds = os.urandom(16)
        self.seed1 = int.from_bytes(seeds[:8], "little")
        self.seed2 = int.from_bytes(seeds[8:], "little")
        self._used = 0
        self._table: Any = None  # a row per slot: hash 1, hash 2, offset + 1 (0: an empty slot)

    @classmethod
    def for_buffer(cls, dedupe_buffer_bytes: int, threads: int) -> OffsetMap:
        """A map sized as Kafka sizes one cleaner thread's map from log.cleaner.dedupe.buffer.size."""
        return cls(int(dedupe_buffer_bytes // max(threads, 1) // ENTRY_BYTES * LOAD_FACTOR))

    def __len__(self) -> int:
        return self._used

    @property
    def seeds(self) -> tuple[Any, Any]:
        import numpy as np

        return np.uint64(self.seed1), np.uint64(self.seed2)

    def reserve(self, keys: int) -> None:
        """Grow the table (doubling) so that ``keys`` keys leave it at most half full."""
        import numpy as np

        from . import cleaner_kernels as kernels

        size = _MIN_SLOTS if self._table is None else len(self._table)
        while size < 2 * keys:
            size *= 2
        if self._table is not None and size == len(self._table):
            return
        table = np.zeros((size, 3), np.uint64)
        if self._table is not None:
            kernels.map_rehash(self._table, table, np.uint64(size - 1))
        self._table = table

    @property
    def _mask(self) -> Any:
        import numpy as np

        return np.uint64(len(self._table) - 1)

    def merge_rows(self, hashes1: Any, hashes2: Any, offsets: Any, last_offset: int) -> bool:
        """Add one segment's keyed records (hash arrays and offsets, all above those in the map) if
        their keys fit; False, the map unchanged, if not."""
        import numpy as np

        from . import cleaner_kernels as kernels

        self.reserve(min(self._used + len(offsets), self.capacity + 1))
        undo_slots = np.empty(len(offsets), np.int64)
        undo_values = np.empty(len(offsets), np.uint64)
        added, done = kernels.map_insert(self._table, self._mask, self._used, self.capacity, hashes1, hashes2,
                                         offsets, undo_slots, undo_values)
        if done < len(offsets):
            kernels.map_undo(self._table, undo_slots, undo_values, done)
            return False
        self._used += added
        self.latest_offset = max(self.latest_offset, last_offset)
        return True

    def lookup(self, hashes1: Any, hashes2: Any) -> Any:
        """The latest offset of each key (by its hashes), -1 for a key the map does not hold."""
        import numpy as np

        from . import cleaner_kernels as kernels

        self.reserve(1)
        out = np.empty(len(hashes1), np.int64)
        kernels.map_lookup(self._table, self._mask, hashes1, hashes2, out)
        return out

    def decide(self, batches: Any, records: Any, count: int) -> None:
        """`cleaner_kernels.decide` over the first ``count`` batches of ``batches`` and their records."""
        from . import cleaner_kernels as kernels

        self.reserve(1)
        kernels.decide(self._table, self._mask,
                       batches.firsts[:count], batches.counts[:count], batches.expires[:count],
                       *records.fields(), records.keep, batches.kept, batches.kept_nulls, batches.max_deltas,
                       batches.body_bytes)
