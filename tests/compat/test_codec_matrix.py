"""Floe's RecordBatch v2 codec against the Python Kafka clients, for every codec.

Batches written by kafka-python's and aiokafka's batch builders (aiokafka's C extension and its
pure-Python fallback) must decode with Floe to exactly the records they were given, and batches Floe
writes must read back identically through each client's batch reader: keys, values, headers,
timestamps and offsets. Bytes from librdkafka (confluent-kafka) need a broker to produce to; they are
covered by the broker tests.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AiokafkaBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AiokafkaBuilder
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy as AiokafkaPyBuilder
from aiokafka.record.default_records import _DefaultRecordBatchPy as AiokafkaPyBatch
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

from broker_core.records import Compression, Record, SimpleRecord, TimestampType, build_batch, decode_batch

PRODUCER_ID, PRODUCER_EPOCH, BASE_SEQUENCE = 77, 3, 10

# (offset delta, timestamp, key, value, headers). Values repeat so that every client's builder
# really compresses (kafka-python and aiokafka fall back to no compression when it would not help).
VARIED = [
    (
        0,
        1_700_000_000_000,
        b"user-1",
        b'{"event": "click", "page": "/home"}' * 8,
        [("trace-id", b"0af7651916cd43dd"), ("null-header", None), ("empty", b"")],
    ),
    (1, 1_700_000_000_123, None, b'{"event": "view"}' * 8, []),
    (2, 1_699_999_999_000, b"", b"", [("\u00fcnicode-key", b"\x00\x01\xff")]),
    (3, 1_700_000_000_050, b"user-2", None, []),
    (5, 1_700_000_000_060, bytes(range(256)), b"x" * 1000, [("k", b"v")]),
]
# Enough data for several lz4 blocks (64 KiB) and xerial snappy blocks (32 KiB).
MANY = [(i, 1_700_000_000_000 + i % 7, b"key-%d" % i, b"value %05d " % i * 40, []) for i in range(300)]
DATASETS = {"varied": VARIED, "many": MANY}
CODECS = list(Compression)


def build_with(builder_class: type, codec: Compression, records: list) -> bytes:
    builder = builder_class(2, codec, False, PRODUCER_ID, PRODUCER_EPOCH, BASE_SEQUENCE, 1 << 24)
    for offset_delta, timestamp, key, value, headers in records:
        builder.append(offset_delta, timestamp, key, value, headers)
    return bytes(builder.build())


def read_with(batch_class: Callable, batch: bytes) -> list[tuple]:
    reader = batch_class(batch)
    assert reader.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in reader]


CLIENT_BUILDERS = {
    "kafka-python": KafkaPythonBuilder,
    "aiokafka": AiokafkaBuilder,
    "aiokafka-pure-python": AiokafkaPyBuilder,
}
CLIENT_READERS = {
    "kafka-python": KafkaPythonBatch,
    "aiokafka": AiokafkaBatch,
    "aiokafka-pure-python": AiokafkaPyBatch,
}


@pytest.mark.parametrize("dataset", sorted(DATASETS))
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("client", sorted(CLIENT_BUILDERS))
def test_batches_client_builders_write_decode_identically_in_floe(
    client: str, codec: Compression, dataset: str
) -> None:
    records = DATASETS[dataset]
    batch = build_with(CLIENT_BUILDERS[client], codec, records)

    decoded = decode_batch(batch)

    header = decoded.header
    assert header.compression is codec, "the client builder did not compress; the case would prove nothing"
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        PRODUCER_ID,
        PRODUCER_EPOCH,
        BASE_SEQUENCE,
    )
    assert header.last_offset_delta == records[-1][0]
    assert header.max_timestamp == max(r[1] for r in records)
    assert decoded.records == [
        Record(offset, timestamp, key, value, tuple(headers))
        for offset, timestamp, key, value, headers in records
    ]


@pytest.mark.parametrize("timestamp_type", list(TimestampType), ids=lambda t: t.name.lower())
@pytest.mark.parametrize("dataset", sorted(DATASETS))
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("client", sorted(CLIENT_READERS))
def test_batches_floe_builds_read_identically_in_each_client(
    client: str, codec: Compression, dataset: str, timestamp_type: TimestampType
) -> None:
    records = DATASETS[dataset]
    base_offset, append_time = 1_000_000, 1_800_000_000_000
    log_append = timestamp_type is TimestampType.LOG_APPEND_TIME
    batch = build_batch(
        [
            SimpleRecord(key, value, headers, timestamp, offset_delta)
            for offset_delta, timestamp, key, value, headers in records
        ],
        compression=codec,
        base_offset=base_offset,
        producer_id=PRODUCER_ID,
        producer_epoch=PRODUCER_EPOCH,
        base_sequence=BASE_SEQUENCE,
        timestamp_type=timestamp_type,
        log_append_time=append_time if log_append else None,
    )

    reader = CLIENT_READERS[client](batch)
    assert (reader.base_offset, reader.compression_type, reader.timestamp_type) == (
        base_offset,
        codec,
        timestamp_type,
    )
    assert (reader.producer_id, reader.producer_epoch, reader.base_sequence) == (
        PRODUCER_ID,
        PRODUCER_EPOCH,
        BASE_SEQUENCE,
    )
    read = read_with(CLIENT_READERS[client], batch)

    assert read == [
        (base_offset + offset_delta, append_time if log_append else timestamp, key, value, headers)
        for offset_delta, timestamp, key, value, headers in records
    ]
