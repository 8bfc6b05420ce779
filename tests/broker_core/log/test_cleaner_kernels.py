"""The cleaner's native kernels against the record-at-a-time Python scan, and the offset map against a dict."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.log import cleaner_kernels as kernels
from broker_core.log.cleaner import records_section, scan_records
from broker_core.log.offset_map import OffsetMap
from broker_core.records import SimpleRecord, build_batch
from broker_core.records.header import Compression, parse_header

NOW = 1_700_000_000_000
SEEDS = np.uint64(0x1234), np.uint64(0x5678)

records_strategy = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=40), st.sampled_from([b"a", b"b", b"", b"key-1"])),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.integers(0, 10**7),  # timestamp delta
        st.integers(0, 3),  # gap before the offset
        st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=20))), max_size=2),
    ),
    min_size=1, max_size=40,
)


def batch_of(records: list, compression: Compression = Compression.NONE, base_offset: int = 500,
             **batch: object) -> memoryview:
    delta = 0
    simple = []
    for key, value, timestamp_delta, gap, headers in records:
        delta += gap
        simple.append(SimpleRecord(key=key, value=value, timestamp=NOW + timestamp_delta, offset_delta=delta,
                                   headers=headers))
        delta += 1
    return memoryview(build_batch(simple, compression=compression, base_offset=base_offset, **batch))


def kernel_scan(section: bytes | memoryview, count: int, base_offset: int) -> tuple[kernels.RecordArrays, int, int]:
    buf = np.frombuffer(bytes(section), np.uint8)
    arrays = kernels.RecordArrays(len(buf) // kernels.MIN_RECORD_BYTES + 1)
    rows, bad = kernels.scan_section(buf, 0, len(buf), count, base_offset, *SEEDS, 0, *arrays.fields())
    return arrays, rows, bad


@settings(max_examples=25, deadline=None)
@given(records=records_strategy, compression=st.sampled_from([Compression.NONE, Compression.LZ4]))
def test_the_kernel_scan_reads_what_the_python_scan_reads(records: list, compression: Compression) -> None:
    data = batch_of(records, compression)
    header = parse_header(data)
    section = records_section(data, header, 1 << 30)
    expected = scan_records(section, header.records_count, header.base_offset)
    arrays, rows, bad = kernel_scan(section, header.records_count, header.base_offset)
    assert (rows, bad) == (len(expected), -1)
    assert arrays.offsets[:rows].tolist() == [s[0] for s in expected]
    assert arrays.has_key[:rows].tolist() == [s[1] is not None for s in expected]
    assert arrays.is_null[:rows].tolist() == [s[2] for s in expected]
    assert arrays.starts[:rows].tolist() == [s[3] for s in expected]
    assert arrays.ends[:rows].tolist() == [s[4] for s in expected]
    assert arrays.timestamp_deltas[:rows].tolist() == [s[5] for s in expected]
    # Two records share their hashes exactly when they share their MD5 digests (the same key).
    hashes = [(int(h1), int(h2)) for h1, h2 in zip(arrays.hashes1[:rows], arrays.hashes2[:rows], strict=True)]
    digests = [s[1] for s in expected]
    for i in range(rows):
        for j in range(rows):
            if digests[i] is not None and digests[j] is not None:
                assert (hashes[i] == hashes[j]) == (digests[i] == digests[j])


@settings(max_examples=15, deadline=None)
@given(records=records_strategy, cut=st.integers(1, 50))
def test_the_kernel_scan_names_records_that_end_early(records: list, cut: int) -> None:
    data = batch_of(records)
    header = parse_header(data)
    section = bytes(records_section(data, header, 1 << 30))
    cut = min(cut, len(section))
    _, rows, bad = kernel_scan(section[:-cut], header.records_count, header.base_offset)
    assert 0 <= bad < len(section) - cut + 1
    assert rows < header.records_count


def test_the_batch_walk_tells_scanned_compressed_and_transactional_batches_apart() -> None:
    plain = [(b"k%d" % n, b"v", n, 0, []) for n in range(5)]
    parts = [
        batch_of(plain, base_offset=0),
        batch_of(plain, Compression.GZIP, base_offset=5),
        batch_of(plain, base_offset=10, producer_id=3, producer_epoch=0, base_sequence=0, is_transactional=True),
        batch_of(plain[:2], base_offset=15),
    ]
    data = b"".join(bytes(p) for p in parts)
    buf = np.frombuffer(data + bytes(parts[0])[:30], np.uint8)  # and the start of a batch cut off
    batches = kernels.BatchArrays(10)
    records = kernels.RecordArrays(100)
    verdict, count, consumed, rows, _, _ = kernels.walk_batches(
        buf, *SEEDS, NOW, batches.starts, batches.sizes, batches.kinds, batches.firsts, batches.counts,
        batches.expires, batches.producer_ids, *records.fields())
    assert (verdict, count, consumed, rows) == (kernels.OK, 4, len(data), 7)
    assert batches.kinds[:4].tolist() == [kernels.KIND_SCANNED, kernels.KIND_COMPRESSED, kernels.KIND_WHOLE,
                                          kernels.KIND_SCANNED]
    assert batches.sizes[:4].tolist() == [len(p) for p in parts]
    assert batches.counts[:4].tolist() == [5, 0, 0, 2]
    assert records.offsets[:rows].tolist() == [0, 1, 2, 3, 4, 15, 16]
    # Record positions are in the walked buffer.
    start = int(records.starts[5])
    assert data[start:int(records.ends[5])] == bytes(parts[3])[61:61 + int(records.ends[5]) - start]


def test_a_batch_length_below_the_header_size_is_named() -> None:
    data = bytearray(batch_of([(b"k", b"v", 0, 0, [])]))
    data[8:12] = (10).to_bytes(4, "big")
    batches = kernels.BatchArrays(2)
    records = kernels.RecordArrays(10)
    verdict, count, _, _, position, _ = kernels.walk_batches(
        np.frombuffer(bytes(data), np.uint8), *SEEDS, NOW, batches.starts, batches.sizes, batches.kinds,
        batches.firsts, batches.counts, batches.expires, batches.producer_ids, *records.fields())
    assert (verdict, count, position) == (kernels.BAD_BATCH_LENGTH, 0, 0)


segments_strategy = st.lists(st.lists(st.integers(0, 30), max_size=40), min_size=1, max_size=6)


@settings(max_examples=25, deadline=None)
@given(segments=segments_strategy, capacity=st.integers(1, 40))
def test_the_offset_map_holds_what_a_dict_holds_and_refuses_what_does_not_fit(segments: list, capacity: int) -> None:
    offset_map = OffsetMap(capacity)
    model: dict[int, int] = {}
    offset = 0
    for keys in segments:
        offsets = list(range(offset, offset + len(keys)))
        offset += len(keys)
        hashes = np.array([key * 0x9E3779B97F4A7C15 % 2**64 for key in keys], np.uint64)
        merged = offset_map.merge_rows(hashes, hashes ^ np.uint64(7), np.array(offsets, np.int64), offset - 1)
        fits = len(model.keys() | set(keys)) <= capacity
        assert merged == fits
        if fits:
            model.update(zip(keys, offsets, strict=True))
        assert len(offset_map) == len(model)
        probe = list(range(31))
        probe_hashes = np.array([key * 0x9E3779B97F4A7C15 % 2**64 for key in probe], np.uint64)
        found = offset_map.lookup(probe_hashes, probe_hashes ^ np.uint64(7)).tolist()
        assert found == [model.get(key, -1) for key in probe]


def test_a_grown_offset_map_keeps_its_keys() -> None:
    offset_map = OffsetMap(100_000)
    keys = np.arange(5000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    assert offset_map.merge_rows(keys, keys + np.uint64(1), np.arange(5000, dtype=np.int64), 4999)
    assert offset_map.lookup(keys, keys + np.uint64(1)).tolist() == list(range(5000))
    assert offset_map.lookup(keys, keys + np.uint64(2)).tolist() == [-1] * 5000


@pytest.mark.parametrize("key", [b"", b"k", b"key-000001", bytes(range(256)) * 3])
def test_the_key_hash_depends_on_the_seeds(key: bytes) -> None:
    buf = np.frombuffer(key + b"\0", np.uint8)
    first = kernels.key_hash(buf, 0, len(key), *SEEDS)
    assert first == kernels.key_hash(buf, 0, len(key), *SEEDS)
    assert first[0] != kernels.key_hash(buf, 0, len(key), np.uint64(1), SEEDS[1])[0]
    assert first[1] != kernels.key_hash(buf, 0, len(key), SEEDS[0], np.uint64(1))[1]
