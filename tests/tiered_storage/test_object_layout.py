"""S3 object keys of tiered segments."""

from __future__ import annotations

import pytest

from tiered_storage.layout import (
    InvalidSegmentKeyError,
    new_segment_id,
    partition_hash,
    segment_object_keys,
)

TOPIC_ID = "5b0c7f9e-8f5e-4f53-9a35-4b8f5c1d2e3f"


def test_keys_start_with_the_partition_hash_and_carry_the_padded_base_offset() -> None:
    segment_id = new_segment_id()
    keys = segment_object_keys("events", TOPIC_ID, 3, 1234, segment_id)
    prefix = f"{partition_hash(TOPIC_ID, 3)}/events-{TOPIC_ID}/3/00000000000000001234-{segment_id}"
    assert keys.log == prefix + ".log"
    assert keys.indexes == prefix + ".indexes"


def test_partitions_of_a_topic_spread_over_different_prefixes() -> None:
    assert len({partition_hash(TOPIC_ID, p) for p in range(64)}) == 64


def test_two_uploads_of_the_same_segment_get_different_keys() -> None:
    first = segment_object_keys("events", TOPIC_ID, 0, 0, new_segment_id())
    second = segment_object_keys("events", TOPIC_ID, 0, 0, new_segment_id())
    assert first.log != second.log


@pytest.mark.parametrize(
    ("topic", "partition", "base_offset", "segment_id"),
    [
        ("a/b", 0, 0, new_segment_id()),
        ("events", -1, 0, new_segment_id()),
        ("events", 0, -5, new_segment_id()),
        ("events", 0, 0, "not-a-uuid"),
    ],
)
def test_arguments_that_cannot_form_a_key_are_rejected(
    topic: str, partition: int, base_offset: int, segment_id: str
) -> None:
    with pytest.raises(InvalidSegmentKeyError):
        segment_object_keys(topic, TOPIC_ID, partition, base_offset, segment_id)
