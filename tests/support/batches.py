"""Record batches for log tests, built and decoded by kafka-python: an implementation independent of Floe's codec."""

from __future__ import annotations

import time

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker_core.records.header import Compression, set_base_offset


def make_batch(
    n_records: int = 1,
    value_size: int = 100,
    timestamp_ms: int | None = None,
    compression: Compression | int = Compression.NONE,
    *,
    timestamp_step_ms: int = 0,
    value_seed: int = 0,
    key: bytes | None = None,
) -> bytes:
    """A RecordBatch v2 of ``n_records`` records with ``value_size``-byte values, as a producer sends it.

    Record i has timestamp ``timestamp_ms + i * timestamp_step_ms`` (default: now) and a value that
    starts with ``value_seed`` and i, so tests can tell batches and records apart.
    """
    if timestamp_ms is None:
        timestamp_ms = time.time_ns() // 1_000_000
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**31 - 1,
    )
    for index in range(n_records):
        prefix = f"{value_seed}:{index}:".encode()
        value = (prefix * (value_size // max(1, len(prefix)) + 1))[:value_size]
        builder.append(index, timestamp_ms + index * timestamp_step_ms, key, value, [])
    return bytes(builder.build())


def leader_batches(base_offset: int, counts: list[int], epoch: int = 0,
                   timestamp_ms: int = 1_700_000_000_000) -> bytes:
    """Batches of ``counts`` records each (10-byte values) as a leader holds them: consecutive offsets
    from ``base_offset``, partition leader epoch ``epoch``; what a follower appends."""
    out = bytearray()
    for count in counts:
        batch = bytearray(make_batch(count, 10, timestamp_ms))
        set_base_offset(batch, 0, base_offset)
        batch[12:16] = epoch.to_bytes(4, "big")
        out += batch
        base_offset += count
    return bytes(out)


def records_of(batch: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of every record in one batch, decoded by kafka-python."""
    decoded = DefaultRecordBatch(batch)
    return [(record.offset, record.timestamp, record.key, record.value) for record in decoded]


def batch_crc_is_valid(batch: bytes) -> bool:
    return DefaultRecordBatch(batch).validate_crc()
