"""Floe's own small asyncio Kafka client: topics, produce, fetch and offsets over the wire protocol.

The Lambda front ends, the `floe` CLI, the demo and the benchmarks talk to brokers through this
module. `BrokerConnection` is one TCP connection: it negotiates a version per API with ApiVersions
when it opens, then pipelines requests (each waits on a future keyed by its correlation id, which
the connection's protocol resolves as responses arrive, in whatever order; responses are received
in place, see FrameDecoder). `FloeClient` sits on top: it keeps
a metadata cache (brokers, topics, partition leaders) and two connections per broker, one for
fetches so that a long poll never holds up a produce; it sends each request to the partition's
leader and retries errors Kafka marks retriable, refreshing metadata first when the error says the
cache is stale. Requests are kio entities, built from dicts with `build_entity` so one code path
serves every negotiated version. Consumer groups are not here yet.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from broker_core.partitioner import murmur2, partition_for_key
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.errors import invalidates_metadata
from broker_core.protocol.framing import FrameDecoder, FramingError, decode_response, encode_request
from broker_core.protocol.messages import (
    SUPPORTED_VERSIONS,
    api_name,
    build_entity,
    request_class,
)
from broker_core.records import (
    Compression,
    Record,
    RecordInput,
    build_batch,
    iter_batches,
    iter_headers,
    parse_header,
)
from broker_core.records.errors import TruncatedBatchError

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS = 19, 20, 32

# The newest version of each API this client fills every field of; negotiation takes the lower of
# this and the broker's newest. (DeleteTopics v6 and Fetch v13 address topics by id.)
CLIENT_MAX_VERSIONS: dict[int, int] = {
    PRODUCE: 9,
    FETCH: 12,
    LIST_OFFSETS: 7,
    METADATA: 12,
    ApiKey.API_VERSIONS: 3,
    CREATE_TOPICS: 7,
    DELETE_TOPICS: 5,
    DESCRIBE_CONFIGS: 4,
}

EARLIEST = -2  # ListOffsets: the log start offset
LATEST = -1  # ListOffsets: the high watermark (the offset the next acknowledged record gets)
RESOURCE_TOPIC = 2
DEFAULT_FETCH_MAX_BYTES = 1024 * 1024
CLIENT_SOFTWARE_NAME = "floe-client"
CLIENT_SOFTWARE_VERSION = "0.1.0"

_CORRELATION_ID = struct.Struct(">i")
_MAX_RESPONSE_BYTES = 512 * 1024 * 1024

# A broker answers one request of a connection at a time (as Kafka does), so a long-poll fetch would
# hold up every request behind it: fetches get a connection of their own to each broker.
_DEFAULT_LANE = "default"
_FETCH_LANE = "fetch"

# Retriable produce errors after which the broker may already have appended the batch: retrying them
# without an idempotent producer could write the records twice, so produce reports them instead.
_PRODUCE_MAYBE_APPENDED = frozenset({ErrorCode.request_timed_out, ErrorCode.not_enough_replicas_after_append})


# errors ----------------------------------------------------------------------------------------


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


class RequestTimeoutError(BrokerConnectionError):
    """No response came within the request timeout; the connection is closed (its state is unknown)."""


class UnsupportedVersionError(ClientError):
    """The broker serves no version of an API that this client can speak."""


class NoBrokersError(ClientError):
    """None of the bootstrap servers (nor any broker from metadata) accepted a connection."""


def _raise_for(code: ErrorCode, message: str | None = None, *, topic: str | None = None,
               partition: int | None = None) -> None:
    if code != ErrorCode.none:
        raise KafkaError(code, message, topic=topic, partition=partition)


# results ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_epoch: int
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID | None
    partitions: list[PartitionInfo]

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """Where a batch landed. With acks=0 the broker says nothing, so every offset is -1 (as in Kafka's
    Java client); ``log_append_time`` is -1 unless the topic uses LogAppendTime."""

    partition: int
    base_offset: int
    last_offset: int
    log_append_time: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Records at or after the fetch offset; ``next_offset`` is where the next fetch starts (past
    every whole batch returned, control batches included)."""

    records: list[Record]
    high_watermark: int
    log_start_offset: int
    next_offset: int
    raw_bytes_len: int


@dataclass(frozen=True, slots=True)
class RawFetchResult:
    """A fetch's records bytes as the broker sent them (whole batches, maybe a cut-off last one)."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    next_offset: int


# one connection --------------------------------------------------------------------------------


class BrokerConnection:
    """One pipelined TCP connection to one broker.

    Requests may be sent concurrently from many tasks of one event loop; frames are written whole and
    in the order `send` is called, and each response is routed to its request by correlation id.
    Pipelining saves round trips, but a broker answers a connection's requests one at a time, so a
    long-poll Fetch delays whatever was sent after it on the same connection.
    Not thread-safe: use it from the event loop that opened it. A connection that lost its socket or
    timed out a request is closed for good; open a new one.
    """

    def __init__(self, host: str, port: int, *, client_id: str = "floe-client",
                 request_timeout_s: float = 30.0, node_id: int | None = None) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.versions: dict[int, int] = {}
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._transport: asyncio.Transport | None = None
        self._protocol: _ResponseProtocol | None = None
        self._pending: dict[int, tuple[int, int, asyncio.Future, bool]] = {}  # key, version, future, decode
        self._correlation_ids = itertools.count(1)
        self._closed_reason: str | None = None

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, node {self.node_id})"

    @property
    def connected(self) -> bool:
        return self._transport is not None and self._closed_reason is None

    async def connect(self) -> None:
        """Open the socket and negotiate versions; raises BrokerConnectionError if either fails."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.request_timeout_s):
                self._transport, self._protocol = await loop.create_connection(
                    lambda: _ResponseProtocol(self), self.host, self.port)
        except (TimeoutError, OSError) as exc:
            raise BrokerConnectionError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
        try:
            await self._negotiate_versions()
        except BaseException:
            await self.close()
            raise

    async def _negotiate_versions(self) -> None:
        # ApiVersions v3 is served by every broker since Kafka 2.4, Floe's included.
        response = await self._send_versioned(ApiKey.API_VERSIONS, CLIENT_MAX_VERSIONS[ApiKey.API_VERSIONS], {
            "client_software_name": CLIENT_SOFTWARE_NAME, "client_software_version": CLIENT_SOFTWARE_VERSION,
        })
        _raise_for(response.error_code, "ApiVersions")
        self.broker_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        for api_key, our_max in CLIENT_MAX_VERSIONS.items():
            if api_key not in self.broker_versions:
                continue
            broker_min, broker_max = self.broker_versions[api_key]
            our_min = SUPPORTED_VERSIONS[api_key][0]
            version = min(our_max, broker_max)
            if version >= max(our_min, broker_min):
                self.versions[api_key] = version

    def version_for(self, api_key: int) -> int:
        version = self.versions.get(api_key)
        if version is None:
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} serves no version of {api_name(api_key)} this client speaks"
                f" (broker: {self.broker_versions.get(api_key)}, client: up to {CLIENT_MAX_VERSIONS.get(api_key)})")
        return version

    async def send(self, api_key: int, request: Mapping[str, Any] | Any, *, expect_response: bool = True,
                   timeout_s: float | None = None) -> Any:
        """Send one request and return the decoded kio response (None when ``expect_response`` is
        false, as for Produce with acks=0).

        ``request`` is a dict holding the fields of any version (built for the negotiated one) or a
        kio request entity (sent in its own version, which the broker must serve).
        """
        if isinstance(request, Mapping):
            version = self.version_for(api_key)
        else:
            version = int(type(request).__version__)
            low, high = self.broker_versions.get(api_key, (0, -1))
            if not low <= version <= high:
                raise UnsupportedVersionError(f"broker serves {api_name(api_key)} {low}..{high}, not v{version}")
        return await self._send_versioned(api_key, version, request, expect_response=expect_response,
                                          timeout_s=timeout_s)

    async def _send_versioned(self, api_key: int, version: int, request: Mapping[str, Any] | Any, *,
                              expect_response: bool = True, timeout_s: float | None = None) -> Any:
        if isinstance(request, Mapping):
            request = build_entity(request_class(api_key, version), request)
        return await self._exchange(
            api_key, version, lambda correlation_id: encode_request(api_key, version, correlation_id, self.client_id,
                                                                    request),
            decode=True, expect_response=expect_response, timeout_s=timeout_s)

    async def send_raw(self, api_key: int, version: int, encode: Callable[[int], bytes], *,
                       timeout_s: float | None = None) -> bytes | memoryview:
        """Send the request frame ``encode(correlation_id)`` builds (size prefix included) and return
        the response frame undecoded. A large frame is a view into this connection's receive buffer,
        valid until the next large response starts to arrive: read it before the next request."""
        return await self._exchange(api_key, version, encode, decode=False, expect_response=True,
                                    timeout_s=timeout_s)

    async def _exchange(self, api_key: int, version: int, encode: Callable[[int], bytes], *, decode: bool,
                        expect_response: bool, timeout_s: float | None) -> Any:
        if self._closed_reason is not None or self._transport is None:
            raise BrokerConnectionError(f"connection to {self.host}:{self.port} is closed: {self._closed_reason}")
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        frame = encode(correlation_id)
        future: asyncio.Future | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = (api_key, version, future, decode)
        try:
            self._transport.write(frame)
            await self._protocol.drain()
        except (OSError, RuntimeError) as exc:
            self._pending.pop(correlation_id, None)
            self._fail(f"write failed: {exc!r}")
            raise BrokerConnectionError(f"lost connection to {self.host}:{self.port} while sending",
                                        request_sent=True) from exc
        if future is None:
            return None
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation that
            # arrives as the response does.
            async with asyncio.timeout(self.request_timeout_s if timeout_s is None else timeout_s):
                return await future
        except TimeoutError:
            self._pending.pop(correlation_id, None)
            reason = f"{api_name(api_key)} v{version} got no response within the request timeout"
            self._fail(reason)
            raise RequestTimeoutError(f"{self.host}:{self.port}: {reason}", request_sent=True) from None

    def _take_response(self, frame: bytes | memoryview) -> bool:
        """Route one response frame to its request; False when the stream cannot be trusted any more."""
        (correlation_id,) = _CORRELATION_ID.unpack_from(frame, 0)
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            self._fail(f"response with unknown correlation id {correlation_id}")
            return False
        api_key, version, future, decode = entry
        if future.done():
            return True
        if not decode:
            future.set_result(frame)
            return True
        try:
            _, response = decode_response(api_key, version, frame)
        except Exception as exc:  # kio raises several types; the request alone fails
            future.set_exception(ClientError(f"cannot decode {api_name(api_key)} v{version} response: {exc!r}"))
        else:
            future.set_result(response)
        return True

    def _fail(self, reason: str) -> None:
        """Close for good and fail every request still waiting for a response."""
        if self._closed_reason is None:
            self._closed_reason = reason
        pending, self._pending = self._pending, {}
        for _, _, future, _ in pending.values():
            if not future.done():
                future.set_exception(BrokerConnectionError(
                    f"connection to {self.host}:{self.port} closed ({reason})", request_sent=True))
        if self._transport is not None:
            self._transport.close()

    async def close(self) -> None:
        self._fail("closed by the client")
        if self._protocol is not None:
            await self._protocol.closed


class _ResponseProtocol(asyncio.BufferedProtocol):
    """Receives a connection's responses in place (see FrameDecoder: a large fetch response is
    received straight into its own buffer and decoded from there) and hands each to the connection."""

    def __init__(self, connection: BrokerConnection) -> None:
        self.connection = connection
        self.decoder = FrameDecoder(_MAX_RESPONSE_BYTES, min_frame_bytes=4)
        loop = asyncio.get_running_loop()
        self.closed: asyncio.Future[None] = loop.create_future()
        self._writable: asyncio.Future[None] | None = None  # set while the transport's buffer is full

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.receive_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.decoder.received(nbytes)
        except FramingError as exc:
            self.connection._fail(f"response {exc}")
            return
        for frame in frames:
            if not self.connection._take_response(frame):
                return

    def eof_received(self) -> bool:
        self.connection._fail("closed by the broker")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection._fail("closed by the broker" if exc is None else f"read failed: {exc!r}")
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    async def drain(self) -> None:
        """Wait while the transport holds more than its high-water mark of unsent bytes."""
        if self.closed.done():
            raise ConnectionResetError("connection lost")
        if self._writable is not None and not self._writable.done():
            await asyncio.shield(self._writable)
            if self.closed.done():
                raise ConnectionResetError("connection lost")


# the client ------------------------------------------------------------------------------------


def _parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    result = []
    for entry in servers.split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {entry!r} is not host:port")
        result.append((host.strip("[]"), int(port)))
    if not result:
        raise ValueError("no bootstrap servers given")
    return result


def _millis(value: datetime.datetime | None) -> int:
    return -1 if value is None else int(value.timestamp() * 1000)


class FloeClient:
    """A Kafka client for one cluster: admin calls, produce, fetch and offsets.

    Use as ``async with FloeClient("host:port") as client: ...``. Not thread-safe; all calls belong
    to the event loop that entered it. Retriable errors are retried ``retries`` times with
    exponential backoff from ``retry_backoff_s``, refreshing metadata first when the error says the
    cached leaders are stale; anything else raises `KafkaError` with the broker's code.
    """

    def __init__(self, bootstrap_servers: str, *, client_id: str = "floe-client", request_timeout_s: float = 30.0,
                 retries: int = 8, retry_backoff_s: float = 0.05) -> None:
        self.bootstrap = _parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self._connections: dict[tuple[int, str], BrokerConnection] = {}
        self._connecting: dict[tuple[int, str], asyncio.Task] = {}
        self._bootstrap_connection: BrokerConnection | None = None

    async def __aenter__(self) -> FloeClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect to a bootstrap server and load the broker list."""
        await self.refresh_metadata([])

    async def close(self) -> None:
        for task in self._connecting.values():
            task.cancel()
        connections = list(self._connections.values())
        if self._bootstrap_connection is not None:
            connections.append(self._bootstrap_connection)
        self._connections.clear()
        self._bootstrap_connection = None
        for connection in connections:
            await connection.close()

    # connections -------------------------------------------------------------------------------

    async def _connection(self, node_id: int, lane: str = _DEFAULT_LANE) -> BrokerConnection:
        """The connection of ``lane`` to a broker, opened on first use (one attempt at a time)."""
        key = (node_id, lane)
        connection = self._connections.get(key)
        if connection is not None and connection.connected:
            return connection
        task = self._connecting.get(key)
        if task is None:
            broker = self.brokers.get(node_id)
            if broker is None:
                await self.refresh_metadata([])
                broker = self.brokers.get(node_id)
                if broker is None:
                    raise BrokerConnectionError(f"broker {node_id} is not in the cluster metadata")
            task = asyncio.ensure_future(self._open(broker))
            self._connecting[key] = task
            task.add_done_callback(lambda _t: self._connecting.pop(key, None))
        connection = await asyncio.shield(task)
        self._connections[key] = connection
        return connection

    async def _open(self, broker: BrokerInfo) -> BrokerConnection:
        connection = BrokerConnection(broker.host, broker.port, client_id=self.client_id,
                                      request_timeout_s=self.request_timeout_s, node_id=broker.node_id)
        await connection.connect()
        return connection

    async def _any_connection(self) -> BrokerConnection:
        """A live connection to some broker: one already open, else a known broker, else bootstrap."""
        for (_, lane), connection in self._connections.items():
            if lane == _DEFAULT_LANE and connection.connected:
                return connection
        if self._bootstrap_connection is not None and self._bootstrap_connection.connected:
            return self._bootstrap_connection
        errors = []
        for broker in list(self.brokers.values()):
            try:
                return await self._connection(broker.node_id)
            except BrokerConnectionError as exc:
                errors.append(str(exc))
        for host, port in self.bootstrap:
            connection = BrokerConnection(host, port, client_id=self.client_id,
                                          request_timeout_s=self.request_timeout_s)
            try:
                await connection.connect()
            except BrokerConnectionError as exc:
                errors.append(str(exc))
                continue
            self._bootstrap_connection = connection
            return connection
        raise NoBrokersError("no broker reachable: " + "; ".join(errors))

    async def _send_anywhere(self, api_key: int, request: Mapping[str, Any], *, idempotent: bool = True) -> Any:
        """Send to any broker, once more elsewhere if the connection fails: for a request that changes
        something (not ``idempotent``), only if it had not been sent."""
        for attempt in range(2):
            connection = await self._any_connection()
            try:
                return await connection.send(api_key, request)
            except BrokerConnectionError as exc:
                if attempt == 1 or (exc.request_sent and not idempotent):
                    raise
        raise AssertionError("unreachable")

    async def _send_to_controller(self, api_key: int, request: Mapping[str, Any]) -> Any:
        """Admin requests go to the controller when one is known (Kafka requires it; Floe's brokers
        accept them anywhere), else to any broker. They are not repeated once sent."""
        if self.controller_id >= 0 and self.controller_id in self.brokers:
            try:
                connection = await self._connection(self.controller_id)
            except BrokerConnectionError:
                await self.refresh_metadata([])
            else:
                return await connection.send(api_key, request)
        return await self._send_anywhere(api_key, request, idempotent=False)

    async def _backoff(self, attempt: int) -> None:
        await asyncio.sleep(min(self.retry_backoff_s * (2 ** attempt), 1.0))

    # metadata ----------------------------------------------------------------------------------

    async def refresh_metadata(self, topics: Sequence[str] | None = None) -> dict[str, TopicInfo | KafkaError]:
        """Ask a broker for the brokers and ``topics`` (None: every topic; []: brokers only).

        Updates the cache and returns, per topic asked about, its info or the error the broker gave.
        """
        topic_list = None if topics is None else [{"name": name, "topic_id": None} for name in topics]
        response = await self._send_anywhere(METADATA, {
            "topics": topic_list, "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
        })
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, getattr(b, "rack", None))
                        for b in response.brokers}
        self.controller_id = getattr(response, "controller_id", -1)
        self.cluster_id = getattr(response, "cluster_id", None)
        for key in [k for k in self._connections if k[0] not in self.brokers]:
            await self._connections.pop(key).close()
        if self.brokers and self._bootstrap_connection is not None:
            # From now on requests go to brokers by id; the bootstrap address may be any of them.
            bootstrap, self._bootstrap_connection = self._bootstrap_connection, None
            await bootstrap.close()
        result: dict[str, TopicInfo | KafkaError] = {}
        if topics is None:
            self.topics = {}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none:
                self.topics.pop(topic.name, None)
                result[topic.name] = KafkaError(topic.error_code, topic=topic.name)
                continue
            partitions = sorted(
                (PartitionInfo(p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes),
                               getattr(p, "leader_epoch", -1), tuple(getattr(p, "offline_replicas", ())))
                 for p in topic.partitions),
                key=lambda p: p.partition,
            )
            topic_id = getattr(topic, "topic_id", None)
            info = TopicInfo(topic.name, topic_id if topic_id and topic_id.int else None, partitions)
            self.topics[topic.name] = info
            result[topic.name] = info
        return result

    async def _topic(self, name: str, *, refresh: bool = False) -> TopicInfo:
        info = None if refresh else self.topics.get(name)
        if info is None:
            found = (await self.refresh_metadata([name])).get(name)
            if isinstance(found, KafkaError):
                raise found
            if found is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, "not in the metadata response", topic=name)
            info = found
        return info

    async def _leader(self, topic: str, partition: int) -> int:
        """The leader's node id, from the cache or fresh metadata; raises KafkaError (maybe retriable)."""
        info = await self._topic(topic)
        if not 0 <= partition < len(info.partitions) or info.partitions[partition].leader < 0:
            info = await self._topic(topic, refresh=True)
        if not 0 <= partition < len(info.partitions):
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"the topic has {len(info.partitions)} partitions", topic=topic, partition=partition)
        leader = info.partitions[partition].leader
        if leader < 0:
            raise KafkaError(ErrorCode.leader_not_available, topic=topic, partition=partition)
        return leader

    async def num_partitions(self, topic: str) -> int:
        return (await self._topic(topic)).num_partitions

    async def partition_for(self, topic: str, key: bytes) -> int:
        """The partition Kafka's default partitioner sends this key to."""
        return partition_for_key(key, await self.num_partitions(topic))

    # admin -------------------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None, *, wait_for_leaders: bool = True) -> TopicInfo | None:
        """Create a topic; with ``wait_for_leaders`` return once metadata shows a leader for every
        partition (otherwise return None at once)."""
        response = await self._send_to_controller(CREATE_TOPICS, {
            "topics": [{
                "name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                "assignments": [], "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }],
            "timeout": datetime.timedelta(seconds=self.request_timeout_s), "validate_only": False,
        })
        for result in response.topics:
            _raise_for(result.error_code, getattr(result, "error_message", None), topic=result.name)
        if not wait_for_leaders:
            return None
        return await self._wait_for_leaders(name, partitions)

    async def _wait_for_leaders(self, name: str, partitions: int) -> TopicInfo:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_s
        attempt = 0
        while True:
            found = (await self.refresh_metadata([name])).get(name)
            if (isinstance(found, TopicInfo) and len(found.partitions) == partitions
                    and all(p.leader >= 0 for p in found.partitions)):
                return found
            if loop.time() > deadline:
                raise KafkaError(ErrorCode.leader_not_available,
                                 "created, but not every partition has a leader yet", topic=name)
            await self._backoff(attempt)
            attempt += 1

    async def delete_topic(self, name: str) -> None:
        response = await self._send_to_controller(DELETE_TOPICS, {
            "topic_names": [name], "topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
            "timeout": datetime.timedelta(seconds=self.request_timeout_s),
        })
        self.topics.pop(name, None)
        for result in response.responses:
            _raise_for(result.error_code, getattr(result, "error_message", None), topic=name)

    async def list_topics(self) -> list[str]:
        await self.refresh_metadata(None)
        return sorted(self.topics)

    async def describe_topic(self, name: str) -> TopicInfo:
        return await self._topic(name, refresh=True)

    async def describe_configs(self, topic: str) -> dict[str, str | None]:
        """The topic's effective configs (its own overrides, broker settings and defaults)."""
        response = await self._send_anywhere(DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": RESOURCE_TOPIC, "resource_name": topic, "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False,
        })
        configs: dict[str, str | None] = {}
        for result in response.results:
            _raise_for(result.error_code, result.error_message, topic=topic)
            configs.update((entry.name, entry.value) for entry in result.configs)
        return configs

    # produce -----------------------------------------------------------------------------------

    async def produce(self, topic: str, records: Sequence[RecordInput] | bytes, partition: int, *, acks: int = -1,
                      compression: Compression | int = Compression.NONE, timeout_ms: int = 30000) -> ProduceResult:
        """Append one batch (built from ``records``, or given as batch bytes) to a partition."""
        results = await self._produce_batches(topic, {partition: _as_batch(records, compression)}, acks, timeout_ms)
        return results[partition]

    async def produce_many(self, topic: str, records_by_partition: Mapping[int, Sequence[RecordInput] | bytes], *,
                           acks: int = -1, compression: Compression | int = Compression.NONE,
                           timeout_ms: int = 30000) -> dict[int, ProduceResult]:
        """One batch per partition, one Produce request per leader, all leaders at once."""
        batches = {p: _as_batch(records, compression) for p, records in records_by_partition.items()}
        return await self._produce_batches(topic, batches, acks, timeout_ms)

    async def _produce_batches(self, topic: str, batches: dict[int, bytes], acks: int,
                               timeout_ms: int) -> dict[int, ProduceResult]:
        last_offset_delta = {p: parse_header(batch).last_offset_delta for p, batch in batches.items()}
        remaining = dict(batches)
        results: dict[int, ProduceResult] = {}
        last_error: ClientError | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await self._backoff(attempt - 1)
            by_leader: dict[int, dict[int, bytes]] = {}
            refresh = False
            for partition, batch in remaining.items():
                try:
                    leader = await self._leader(topic, partition)
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    last_error, refresh = exc, True
                    continue
                by_leader.setdefault(leader, {})[partition] = batch
            outcomes = await asyncio.gather(
                *(self._produce_to(leader, topic, part_batches, acks, timeout_ms)
                  for leader, part_batches in by_leader.items()),
                return_exceptions=True,
            )
            for outcome in outcomes:
                if isinstance(outcome, BrokerConnectionError) and not outcome.request_sent:
                    last_error, refresh = outcome, True
                    continue
                if isinstance(outcome, BaseException):
                    raise outcome
                for partition, (code, message, base_offset, append_time, log_start) in outcome.items():
                    if code == ErrorCode.none:
                        last = base_offset + last_offset_delta[partition] if base_offset >= 0 else -1
                        results[partition] = ProduceResult(partition, base_offset, last, append_time, log_start)
                        del remaining[partition]
                        continue
                    error = KafkaError(code, message, topic=topic, partition=partition)
                    if not error.retriable or code in _PRODUCE_MAYBE_APPENDED:
                        raise error
                    last_error = error
                    refresh = refresh or error.invalidates_metadata
            if not remaining:
                return results
            if refresh:
                self.topics.pop(topic, None)
        assert last_error is not None
        raise last_error

    async def _produce_to(self, leader: int, topic: str, batches: dict[int, bytes], acks: int,
                          timeout_ms: int) -> dict[int, tuple[ErrorCode, str | None, int, int, int]]:
        connection = await self._connection(leader)
        response = await connection.send(PRODUCE, {
            "transactional_id": None, "acks": acks, "timeout": datetime.timedelta(milliseconds=timeout_ms),
            "topic_data": [{"name": topic, "partition_data": [
                {"index": p, "records": batch} for p, batch in batches.items()]}],
        }, expect_response=acks != 0, timeout_s=self.request_timeout_s + timeout_ms / 1000)
        if response is None:
            return {p: (ErrorCode.none, None, -1, -1, -1) for p in batches}
        outcome = {}
        for topic_response in response.responses:
            for p in topic_response.partition_responses:
                outcome[p.index] = (p.error_code, getattr(p, "error_message", None), p.base_offset,
                                    _millis(p.log_append_time), getattr(p, "log_start_offset", -1))
        missing = set(batches) - set(outcome)
        if missing:
            raise ClientError(f"Produce response for {topic} omits partitions {sorted(missing)}")
        return outcome

    # fetch -------------------------------------------------------------------------------------

    async def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
                    max_wait_ms: int = 500, min_bytes: int = 1) -> FetchResult:
        """Records from ``offset`` on (at least one whole batch if any exists, even past ``max_bytes``),
        waiting up to ``max_wait_ms`` for ``min_bytes`` to be available."""
        found = await self._fetch_partitions(topic, {partition: offset}, max_bytes, max_bytes, max_wait_ms, min_bytes)
        return _decode_fetch(offset, *found[partition])

    async def fetch_many(self, topic: str, offsets: Mapping[int, int], *, max_bytes: int = 50 * 1024 * 1024,
                         partition_max_bytes: int = DEFAULT_FETCH_MAX_BYTES, max_wait_ms: int = 500,
                         min_bytes: int = 1) -> dict[int, FetchResult]:
        """Fetch several partitions, ``{partition: offset}``, with one Fetch request per leader; the
        wait ends when ``min_bytes`` are available across a leader's partitions."""
        found = await self._fetch_partitions(topic, offsets, max_bytes, partition_max_bytes, max_wait_ms, min_bytes)
        return {partition: _decode_fetch(offsets[partition], *found[partition]) for partition in offsets}

    async def fetch_raw(self, topic: str, partition: int, offset: int, *, max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
                        max_wait_ms: int = 500, min_bytes: int = 1) -> RawFetchResult:
        """Like `fetch`, but the records bytes are not decoded (only batch headers are read)."""
        found = await self._fetch_partitions(topic, {partition: offset}, max_bytes, max_bytes, max_wait_ms, min_bytes)
        raw, high_watermark, log_start = found[partition]
        next_offset = offset
        try:
            for _, header in iter_headers(raw, check_crc=False):
                next_offset = max(next_offset, header.next_offset)
        except TruncatedBatchError:
            pass  # the broker cut the last batch at max_bytes; the next fetch starts at it
        return RawFetchResult(raw, high_watermark, log_start, next_offset)

    async def _fetch_partitions(self, topic: str, offsets: Mapping[int, int], max_bytes: int,
                                partition_max_bytes: int, max_wait_ms: int,
                                min_bytes: int) -> dict[int, tuple[bytes, int, int]]:
        """(records bytes, high watermark, log start offset) per partition, retrying retriable errors."""
        remaining = dict(offsets)
        results: dict[int, tuple[bytes, int, int]] = {}
        last_error: ClientError | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await self._backoff(attempt - 1)
            by_leader: dict[int, dict[int, int]] = {}
            for partition, offset in remaining.items():
                try:
                    leader = await self._leader(topic, partition)
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    last_error = exc
                    self.topics.pop(topic, None)
                    continue
                by_leader.setdefault(leader, {})[partition] = offset
            outcomes = await asyncio.gather(
                *(self._fetch_from(leader, topic, leader_offsets, max_bytes, partition_max_bytes, max_wait_ms,
                                   min_bytes) for leader, leader_offsets in by_leader.items()),
                return_exceptions=True,
            )
            for outcome in outcomes:
                if isinstance(outcome, BrokerConnectionError):
                    # Reads change nothing on the broker, so they are safe to repeat.
                    last_error = outcome
                    self.topics.pop(topic, None)
                    continue
                if isinstance(outcome, BaseException):
                    raise outcome
                for partition, (code, found) in outcome.items():
                    if code == ErrorCode.none:
                        results[partition] = found
                        del remaining[partition]
                        continue
                    error = KafkaError(code, topic=topic, partition=partition)
                    if not error.retriable:
                        raise error
                    last_error = error
                    if error.invalidates_metadata:
                        self.topics.pop(topic, None)
            if not remaining:
                return results
        assert last_error is not None
        raise last_error

    async def _fetch_from(self, leader: int, topic: str, offsets: dict[int, int], max_bytes: int,
                          partition_max_bytes: int, max_wait_ms: int,
                          min_bytes: int) -> dict[int, tuple[ErrorCode, tuple[bytes, int, int]]]:
        connection = await self._connection(leader, _FETCH_LANE)
        response = await connection.send(FETCH, {
            "replica_id": -1, "max_wait": datetime.timedelta(milliseconds=max_wait_ms), "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                 "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": partition_max_bytes}
                for partition, offset in offsets.items()]}],
            "forgotten_topics_data": [], "rack_id": "",
        }, timeout_s=self.request_timeout_s + max_wait_ms / 1000)
        request_error = getattr(response, "error_code", ErrorCode.none)
        outcome = {}
        for topic_response in response.responses:
            for data in topic_response.partitions:
                code = request_error if request_error != ErrorCode.none else data.error_code
                outcome[data.partition_index] = (code, (bytes(data.records or b""), data.high_watermark,
                                                        getattr(data, "log_start_offset", -1)))
        missing = set(offsets) - set(outcome)
        if missing:
            raise ClientError(f"Fetch response for {topic} omits partitions {sorted(missing)}")
        return outcome

    # offsets -----------------------------------------------------------------------------------

    async def list_offsets(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
        """(offset, timestamp): for EARLIEST or LATEST the offset (timestamp -1); for a timestamp in ms,
        the first offset whose timestamp is at or after it, or (-1, -1) if there is none."""
        request = {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}]}],
        }
        last_error: ClientError | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await self._backoff(attempt - 1)
            try:
                connection = await self._connection(await self._leader(topic, partition))
                response = await connection.send(LIST_OFFSETS, request)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last_error = exc
                self.topics.pop(topic, None)
                continue
            except BrokerConnectionError as exc:
                # Reads change nothing on the broker, so they are safe to repeat elsewhere.
                last_error = exc
                self.topics.pop(topic, None)
                continue
            data = response.topics[0].partitions[0]
            if data.error_code == ErrorCode.none:
                return data.offset, data.timestamp
            error = KafkaError(data.error_code, topic=topic, partition=partition)
            if not error.retriable:
                raise error
            last_error = error
            if error.invalidates_metadata:
                self.topics.pop(topic, None)
        assert last_error is not None
        raise last_error


def _decode_fetch(offset: int, raw: bytes, high_watermark: int, log_start: int) -> FetchResult:
    records: list[Record] = []
    next_offset = offset
    for batch in iter_batches(raw, ignore_truncated_tail=True):
        next_offset = max(next_offset, batch.header.next_offset)
        if batch.header.is_control:
            continue
        # A compressed batch is sent whole, so it may start before the offset asked for.
        records.extend(r for r in batch.records if r.offset >= offset)
    return FetchResult(records, high_watermark, log_start, next_offset, len(raw))


def _as_batch(records: Sequence[RecordInput] | bytes, compression: Compression | int) -> bytes:
    if isinstance(records, bytes | bytearray | memoryview):
        return bytes(records)
    return build_batch(records, compression=compression)


__all__ = [
    "EARLIEST",
    "LATEST",
    "BrokerConnection",
    "BrokerConnectionError",
    "BrokerInfo",
    "ClientError",
    "FetchResult",
    "FloeClient",
    "KafkaError",
    "NoBrokersError",
    "PartitionInfo",
    "ProduceResult",
    "RawFetchResult",
    "RequestTimeoutError",
    "TopicInfo",
    "UnsupportedVersionError",
    "murmur2",
    "partition_for_key",
]
