"""The exceptions of Floe's Kafka client, one per failure mode, all under `ClientError`.

A broker's Kafka error code comes back as `KafkaError`, which knows from the error table whether it is
retriable and whether it makes the cached metadata stale; a connection that fails or times out raises
`BrokerConnectionError`, whose ``request_sent`` tells a caller whether repeating the request could make
the broker act on it twice. Both the async client and its blocking facade raise these.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker_core.protocol.errors import invalidates_metadata


class ClientError(Exception):
    """Base of every error this client raises."""


class KafkaError(ClientError):
    """A broker answered with a Kafka error code; ``topic``/``partition`` say where, when known."""

    def __init__(self, code: ErrorCode, message: str | None = None, *, topic: str | None = None,
                 partition: int | None = None) -> None:
        self.code = code
        self.message = message
        self.topic = topic
        self.partition = partition
        where = f" ({topic}" + (f"-{partition}" if partition is not None else "") + ")" if topic else ""
        super().__init__(f"{code.name}{where}" + (f": {message}" if message else ""))

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)

    @property
    def invalidates_metadata(self) -> bool:
        return invalidates_metadata(self.code)


class BrokerConnectionError(ClientError):
    """A connection could not be opened or was lost.

    ``request_sent`` says whether the request had been written to the socket: if it had, the broker
    may have acted on it, so a produce is not retried.
    """

    def __init__(self, message: str, *, request_sent: bool = False) -> None:
        super().__init__(message)
        self.request_sent = request_sent


class AuthenticationFailedError(BrokerConnectionError):
    """The broker refused this client's SASL credentials (or could not prove it knows them); the
    connection is closed."""


class RequestTimeoutError(BrokerConnectionError):
    """No response came within the request timeout; the connection is closed (its state is unknown)."""


class UnsupportedVersionError(ClientError):
    """The broker serves no version of an API that this client can speak."""


class NoBrokersError(ClientError):
    """None of the bootstrap servers (nor any broker from metadata) accepted a connection."""


def raise_for(code: ErrorCode, message: str | None = None, *, topic: str | None = None,
              partition: int | None = None) -> None:
    """Raise `KafkaError` for any code but NONE."""
    if code != ErrorCode.none:
        raise KafkaError(code, message, topic=topic, partition=partition)
