"""Decoding consumer-protocol assignments and subscriptions, as Kafka clients write them."""

from __future__ import annotations

import io
import struct

import pytest
from kio.schema.consumer_protocol_assignment.v1.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v1.data import TopicPartition as AssignedPartitions
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v1.data import TopicPartition as OwnedPartitions
from kio.serial import entity_writer

from broker_core.groups.consumer_protocol import ConsumerProtocolError, decode_assignment, decode_subscription


def encoded(version: int, entity: object) -> bytes:
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", version))
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def test_an_assignment_decodes_to_topic_partition_pairs() -> None:
    assignment = ConsumerProtocolAssignment(
        assigned_partitions=(AssignedPartitions(topic="b", partitions=(2, 0)),
                             AssignedPartitions(topic="a", partitions=(1,))),
        user_data=b"sticky")
    assert decode_assignment(encoded(1, assignment)) == [("a", 1), ("b", 0), ("b", 2)]


def test_a_newer_assignment_version_reads_as_the_latest_known() -> None:
    assignment = ConsumerProtocolAssignment(assigned_partitions=(AssignedPartitions(topic="a", partitions=(0,)),),
                                            user_data=None)
    assert decode_assignment(encoded(9, assignment)) == [("a", 0)]


def test_no_bytes_mean_no_assignment() -> None:
    assert decode_assignment(b"") == []


def test_a_subscription_gives_topics_and_owned_partitions() -> None:
    subscription = ConsumerProtocolSubscription(
        topics=("orders", "payments"), user_data=None,
        owned_partitions=(OwnedPartitions(topic="orders", partitions=(3, 1)),))
    decoded = decode_subscription(encoded(1, subscription))
    assert decoded.topics == ("orders", "payments")
    assert decoded.owned_partitions == (("orders", 1), ("orders", 3))


@pytest.mark.parametrize("data", [b"\x00", b"\xff\xff", b"\x00\x01\x00\x00\x00\x05ab"])
def test_bytes_that_are_not_an_assignment_raise_a_positioned_error(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError) as caught:
        decode_assignment(data)
    assert caught.value.position in (0, 2)
