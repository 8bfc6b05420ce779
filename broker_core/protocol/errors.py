"""Kafka error codes as Floe uses them: kio's ErrorCode (which knows retriability) plus which codes
mean a client's cached metadata is stale, and the mapping from Floe's own exceptions to codes."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

# Codes after which a well-behaved client refreshes its metadata before retrying (as aiokafka's table).
INVALIDATES_METADATA: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.not_controller,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.kafka_storage_error,
    }
)


def is_retriable(code: ErrorCode) -> bool:
    return bool(code.retriable)


def invalidates_metadata(code: ErrorCode) -> bool:
    return code in INVALIDATES_METADATA


__all__ = ["ErrorCode", "INVALIDATES_METADATA", "invalidates_metadata", "is_retriable"]
