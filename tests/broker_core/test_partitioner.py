"""Floe's key partitioner agrees with Kafka's Java client and with kafka-python."""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from broker_core.partitioner import murmur2, partition_for_key, to_positive
from tests.support.murmur2_vectors import JAVA_VECTORS


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS.items())
def test_murmur2_matches_the_java_client(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_matches_kafka_python_for_every_tail_length_and_random_bytes() -> None:
    rng = random.Random(20240601)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"abcde"]
    keys += [rng.randbytes(rng.randrange(0, 200)) for _ in range(500)]
    for key in keys:
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key), key


def test_partition_for_key_is_kafkas_default_partitioner() -> None:
    rng = random.Random(7)
    for _ in range(300):
        key = rng.randbytes(rng.randrange(1, 40))
        partitions = rng.randrange(1, 64)
        assert partition_for_key(key, partitions) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions


def test_to_positive_clears_the_sign_bit_even_for_int_min() -> None:
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(5) == 5


def test_a_topic_without_partitions_is_refused() -> None:
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)
