from __future__ import annotations

import pytest
from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER
from aiokafka.record.control_record import ControlRecord as AiokafkaControlRecord
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch

from broker_core.records import (
    ControlRecordType,
    CorruptControlRecordError,
    EndTransactionMarker,
    SimpleRecord,
    build_batch,
    build_control_batch,
    build_control_key,
    build_control_value,
    decode_batch,
    iter_records,
    parse_control_key,
    parse_control_value,
    parse_end_transaction_marker,
)


@given(
    st.sampled_from(list(ControlRecordType)),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**15 - 1),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
)
def test_control_batches_round_trip(
    control_type: ControlRecordType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int,
) -> None:
    batch = build_control_batch(
        control_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        coordinator_epoch=coordinator_epoch,
        base_offset=base_offset,
        timestamp=1_234,
    )
    decoded = decode_batch(batch)
    header = decoded.header
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        producer_id,
        producer_epoch,
        -1,
    )
    assert header.records_count == 1
    [record] = decoded.records
    assert (record.offset, record.timestamp, record.headers) == (base_offset, 1_234, ())
    assert parse_end_transaction_marker(record) == EndTransactionMarker(control_type, coordinator_epoch)


def test_marker_key_and_value_bytes_are_kafkas() -> None:
    assert build_control_key(ControlRecordType.ABORT) == b"\x00\x00\x00\x00"
    assert build_control_key(ControlRecordType.COMMIT) == b"\x00\x00\x00\x01"
    assert build_control_value(258) == b"\x00\x00\x00\x00\x01\x02"


def test_kafka_python_reads_floe_markers_as_commit_and_abort() -> None:
    commit = build_control_batch(
        ControlRecordType.COMMIT, producer_id=9, producer_epoch=2, coordinator_epoch=3
    )
    abort = build_control_batch(ControlRecordType.ABORT, producer_id=9, producer_epoch=2, coordinator_epoch=3)
    [commit_record] = list(KafkaPythonBatch(commit))
    [abort_record] = list(KafkaPythonBatch(abort))
    assert KafkaPythonBatch(commit).is_control_batch
    assert commit_record.commit and not commit_record.abort
    assert abort_record.abort and not abort_record.commit


def test_aiokafka_reads_floe_marker_keys() -> None:
    assert AiokafkaControlRecord.parse(build_control_key(ControlRecordType.COMMIT)) == COMMIT_MARKER
    assert AiokafkaControlRecord.parse(build_control_key(ControlRecordType.ABORT)) == ABORT_MARKER


def test_a_newer_key_or_value_version_is_read_by_its_known_fields() -> None:
    assert parse_control_key(b"\x00\x01\x00\x01extra") is ControlRecordType.COMMIT
    assert parse_control_value(b"\x00\x01\x00\x00\x00\x05more") == 5


@pytest.mark.parametrize(
    ("key", "message", "position"),
    [
        (None, "needs 4 bytes, has 0", 0),
        (b"\x00\x00\x00", "needs 4 bytes, has 3", 0),
        (b"\xff\xff\x00\x01", "negative control record key version -1", 0),
        (b"\x00\x00\x00\x02", "unknown control record type 2", 2),
    ],
)
def test_bad_control_keys_raise(key: bytes | None, message: str, position: int) -> None:
    with pytest.raises(CorruptControlRecordError, match=message) as raised:
        parse_control_key(key)
    assert raised.value.position == position


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "needs 6 bytes, has 0"),
        (b"\x00\x00\x00\x00\x00", "needs 6 bytes, has 5"),
        (b"\x80\x00" + bytes(4), "negative"),
    ],
)
def test_bad_marker_values_raise(value: bytes | None, message: str) -> None:
    with pytest.raises(CorruptControlRecordError, match=message):
        parse_control_value(value)


def test_iter_records_skips_markers_unless_asked_for_them() -> None:
    data = build_batch(
        [SimpleRecord(value=b"in txn", timestamp=0)], producer_id=9, producer_epoch=0, base_sequence=0
    )
    marker = build_control_batch(
        ControlRecordType.COMMIT, producer_id=9, producer_epoch=0, coordinator_epoch=1, base_offset=1
    )
    assert [r.value for r in iter_records(data + marker)] == [b"in txn"]
    assert [r.offset for r in iter_records(data + marker, include_control=True)] == [0, 1]
