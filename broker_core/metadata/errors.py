"""Exceptions raised by the cluster metadata layer, one per failure mode.

Each exception carries the structured fields that identify what failed (topic, partition, the
epochs involved) and the Kafka error code a broker returns for it, so protocol handlers can map
them without parsing messages. Lost conditional writes that are not safe to retry surface as one
of these; lost writes that are safe to retry are retried inside the store with bounded backoff and
surface as ``MetadataConflictError`` only when the retries run out.
"""

from __future__ import annotations

from typing import ClassVar


class MetadataError(Exception):
    """Base class of every metadata-layer error."""

    kafka_error_code: ClassVar[int] = -1  # UNKNOWN_SERVER_ERROR


class MetadataUnavailableError(MetadataError):
    """DynamoDB could not be reached or refused the request for a reason other than a condition."""

    kafka_error_code: ClassVar[int] = 7  # REQUEST_TIMED_OUT (retriable)


class MetadataConflictError(MetadataError):
    """A retriable conditional write kept losing races until the retry budget ran out."""

    kafka_error_code: ClassVar[int] = 7  # REQUEST_TIMED_OUT (retriable)

    def __init__(self, what: str, attempts: int) -> None:
        super().__init__(f"{what}: still conflicting after {attempts} attempts")
        self.what = what
        self.attempts = attempts


class StaleEpochError(MetadataError):
    """A write carried an epoch (broker, controller or partition) that a newer one has replaced."""


class InvalidTopicError(MetadataError):
    """The topic name breaks Kafka's rules (legal characters [a-zA-Z0-9._-], 1..249 long, not . or ..)."""

    kafka_error_code: ClassVar[int] = 17  # INVALID_TOPIC_EXCEPTION

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"invalid topic name {topic!r}: {reason}")
        self.topic = topic
        self.reason = reason


class TopicExistsError(MetadataError):
    kafka_error_code: ClassVar[int] = 36  # TOPIC_ALREADY_EXISTS

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} already exists")
        self.topic = topic


class UnknownTopicError(MetadataError):
    kafka_error_code: ClassVar[int] = 3  # UNKNOWN_TOPIC_OR_PARTITION

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} does not exist")
        self.topic = topic


class UnknownPartitionError(MetadataError):
    kafka_error_code: ClassVar[int] = 3  # UNKNOWN_TOPIC_OR_PARTITION

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(f"partition {topic}-{partition} does not exist")
        self.topic = topic
        self.partition = partition


class InvalidPartitionsError(MetadataError):
    kafka_error_code: ClassVar[int] = 37  # INVALID_PARTITIONS

    def __init__(self, num_partitions: int) -> None:
        super().__init__(f"number of partitions must be at least 1, got {num_partitions}")
        self.num_partitions = num_partitions


class InvalidReplicationFactorError(MetadataError):
    kafka_error_code: ClassVar[int] = 38  # INVALID_REPLICATION_FACTOR

    def __init__(self, replication_factor: int, available_brokers: int) -> None:
        super().__init__(
            f"replication factor {replication_factor} is not between 1 and the "
            f"{available_brokers} available brokers"
        )
        self.replication_factor = replication_factor
        self.available_brokers = available_brokers


class InvalidConfigError(MetadataError):
    kafka_error_code: ClassVar[int] = 40  # INVALID_CONFIG

    def __init__(self, key: object, reason: str) -> None:
        super().__init__(f"invalid config {key!r}: {reason}")
        self.key = key
        self.reason = reason


class InvalidBrokerRegistrationError(MetadataError):
    """A registration names a negative broker id, an empty host or a port outside 1..65535."""

    kafka_error_code: ClassVar[int] = 42  # INVALID_REQUEST

    def __init__(self, broker_id: int, reason: str) -> None:
        super().__init__(f"invalid registration for broker {broker_id}: {reason}")
        self.broker_id = broker_id
        self.reason = reason


class BrokerFencedError(StaleEpochError):
    """The broker's registration is fenced or was replaced by one with a newer broker epoch."""

    kafka_error_code: ClassVar[int] = 77  # STALE_BROKER_EPOCH

    def __init__(self, broker_id: int, broker_epoch: int) -> None:
        super().__init__(f"broker {broker_id} epoch {broker_epoch} is fenced or stale")
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch


class FencedControllerError(StaleEpochError):
    """A controller write carried a controller epoch that is no longer the lease's epoch."""

    kafka_error_code: ClassVar[int] = 41  # NOT_CONTROLLER

    def __init__(self, controller_epoch: int | None) -> None:
        super().__init__(f"controller epoch {controller_epoch} is fenced")
        self.controller_epoch = controller_epoch


class PartitionEpochConflictError(StaleEpochError):
    """A partition update expected a partition epoch that is no longer current."""

    kafka_error_code: ClassVar[int] = 95  # INVALID_UPDATE_VERSION, as AlterPartition answers

    def __init__(self, topic: str, partition: int, expected_partition_epoch: int) -> None:
        super().__init__(
            f"partition {topic}-{partition}: expected partition epoch {expected_partition_epoch} is stale"
        )
        self.topic = topic
        self.partition = partition
        self.expected_partition_epoch = expected_partition_epoch


class InvalidPartitionStateError(MetadataError):
    """A proposed partition state breaks an invariant (leader outside the ISR, ISR outside replicas...)."""

    kafka_error_code: ClassVar[int] = 42  # INVALID_REQUEST

    def __init__(self, topic: str, partition: int, reason: str) -> None:
        super().__init__(f"partition {topic}-{partition}: {reason}")
        self.topic = topic
        self.partition = partition
        self.reason = reason


class PolicyViolationError(MetadataError):
    """A request would take the cluster past a limit the operator set (``limit`` names the setting)."""

    kafka_error_code: ClassVar[int] = 44  # POLICY_VIOLATION

    def __init__(self, limit: str, reason: str) -> None:
        super().__init__(reason)
        self.limit = limit
        self.reason = reason


class PartitionCountError(MetadataError):
    """CreatePartitions asked for no more partitions than the topic has (Kafka's INVALID_PARTITIONS)."""

    kafka_error_code: ClassVar[int] = 37  # INVALID_PARTITIONS

    def __init__(self, topic: str, current: int, requested: int) -> None:
        if requested == current:
            message = f"Topic {topic} already has {current} partitions."
        else:
            message = (f"Topic {topic} currently has {current} partitions, which is higher than the requested "
                       f"{requested}.")
        super().__init__(message)
        self.topic, self.current, self.requested = topic, current, requested


class InvalidReplicaAssignmentError(MetadataError):
    """A manual replica assignment Kafka would refuse (INVALID_REPLICA_ASSIGNMENT); the message says why."""

    kafka_error_code: ClassVar[int] = 39  # INVALID_REPLICA_ASSIGNMENT
