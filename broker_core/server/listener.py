"""The Kafka listener: accepts connections and runs each one's request/response cycle.

Connections use raw non-blocking sockets rather than asyncio transports so that Fetch responses can
hand file slices to `os.sendfile` (zero copy) on any event loop, uvloop included. A connection
answers in the order requests were sent and appends its produce requests in that order. As in Kafka,
a request other than Produce is handled alone, once every earlier response has been written. Unlike
Kafka, a Produce request is appended as soon as it is read, and while it waits for acks=all the
connection reads, and appends, the produce requests behind it (up to MAX_PIPELINED_PRODUCES): with
acks=all a producer's next batch would otherwise wait a whole replication round trip before it is
even read. A waiting request keeps only its header and the response it will send: its records are
on disk already.

A frame that is not Kafka framing (a size prefix that is negative or above `socket.request.max.bytes`
is refused before any of its body is read), or a request that cannot be decoded, closes that
connection only; a well-formed request for an unsupported API version is answered (ApiVersions) or
refused by closing.

Limits (`ListenerLimits`, docs/operations.md "Listener limits"): buffers of large requests come from
one `RequestMemoryPool` (`queued.max.request.bytes`); a connection the pool refuses stops reading
until bytes are released. New connections beyond `max.connections`, `max.connections.per.ip` (or
its override for that address) or `max.connection.creation.rate` are closed at once, counted, and
logged once per REFUSAL_LOG_INTERVAL_S per address and reason. A connection that has completed no
request and been sent no response for `connections.max.idle.ms`, with nothing in progress (no
request being handled or answered, not muted, not waiting for the pool), is closed; bytes of an
unfinished request do not count as activity, so a client trickling one (slowloris) is closed too.
After a response whose `throttle_time` is positive, the connection reads nothing more for that
long (KIP-219).

Metrics (`BrokerMetrics`): each request's time is split as Kafka's RequestMetrics split it
(broker_core.metrics.requests): a `RequestClock` stamped when the frame was read, when its handler
started (the clock is bound to the task, where the Fetch handler adds its long-poll wait), when a
Produce's appends were done, when the response was ready, and when its write started and ended.
Connections open (by listener and principal) and refused (by reason) are read at scrape time.
"""

from __future__ import annotations

import asyncio
import datetime
import errno
import logging
import socket
import ssl
import struct
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.metrics.broker import NULL_REQUEST, BrokerMetrics
from broker_core.metrics.requests import RequestClock
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameDecoder,
    FramingError,
    InvalidRequestError,
    Request,
    RequestMemoryPool,
    UnsupportedVersionError,
    decode_request,
    encode_response,
)
from broker_core.protocol.messages import api_name
from broker_core.security.principal import ANONYMOUS
from broker_core.security.tls import certificate_principal
from broker_core.settings import ConfigError

from .listeners import SecurityProtocol
from .sasl import SaslConfig, SaslSession
from .streams import PlainStream, TlsHandshakeError, TlsStream

if TYPE_CHECKING:
    from .handlers import RequestHandlers

log = logging.getLogger(__name__)
RECV_BYTES = 256 * 1024
MAX_PIPELINED_PRODUCES = 16
INT32_MAX = 2**31 - 1
REFUSAL_LOG_INTERVAL_S = 10.0


def parse_per_ip_overrides(text: str) -> dict[str, int]:
    """Kafka's `max.connections.per.ip.overrides`: "host:count,host:count" (a host may be a name or an
    address; IPv6 addresses keep their colons, the count is after the last one)."""
    overrides: dict[str, int] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = entry.rpartition(":")
        if not sep or not host:
            raise ConfigError(f"max.connections.per.ip.overrides entry {entry!r} is not host:count")
        try:
            overrides[host.strip()] = int(count)
        except ValueError:
            raise ConfigError(f"max.connections.per.ip.overrides entry {entry!r}: count is no integer") from None
    return overrides


@dataclass(frozen=True)
class ListenerLimits:
    """The listener's limits, from the broker settings of the same Kafka names (see broker_core.settings)."""

    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES  # socket.request.max.bytes
    queued_max_request_bytes: int = -1  # negative: unlimited
    max_connections: int = INT32_MAX
    max_connections_per_ip: int = INT32_MAX
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    connections_max_idle_ms: int = 600_000
    max_connection_creation_rate: int = INT32_MAX  # per second, broker-wide

    @classmethod
    def from_settings(cls, get_int: Callable[[str], int], get: Callable[[str], str]) -> ListenerLimits:
        return cls(
            max_frame_bytes=get_int("socket.request.max.bytes"),
            queued_max_request_bytes=get_int("queued.max.request.bytes"),
            max_connections=get_int("max.connections"),
            max_connections_per_ip=get_int("max.connections.per.ip"),
            max_connections_per_ip_overrides=parse_per_ip_overrides(get("max.connections.per.ip.overrides")),
            connections_max_idle_ms=get_int("connections.max.idle.ms"),
            max_connection_creation_rate=get_int("max.connection.creation.rate"),
        )


@dataclass(frozen=True)
class ListenerSecurity:
    """How one listener secures its connections: its name and protocol, TLS context (SSL, SASL_SSL)."""

    name: str = "PLAINTEXT"
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    handshake_timeout_s: float = 10.0
    sasl: SaslConfig | None = None  # SASL_PLAINTEXT, SASL_SSL


def _throttle_seconds(response: Any) -> float:
    throttle = getattr(response, "throttle_time", None)
    return throttle.total_seconds() if isinstance(throttle, datetime.timedelta) else 0.0


class Connection:
    """One client connection: reads requests, hands them to the handlers, writes the responses.

    Its liveness for the idle timeout: `last_active` (loop time of the last request read or response
    sent) and `busy` (something in progress that the client is not responsible for).
    """

    def __init__(self, sock: socket.socket, handlers: RequestHandlers, max_frame_bytes: int,
                 pool: RequestMemoryPool | None = None,
                 memory_released: Callable[[], Awaitable[None]] | None = None,
                 security: ListenerSecurity | None = None, metrics: BrokerMetrics | None = None) -> None:
        self.sock = sock
        self.metrics = metrics or BrokerMetrics(enabled=False)
        self.handlers = handlers
        self.security = security or ListenerSecurity()
        self.decoder = FrameDecoder(max_frame_bytes, staging_bytes=RECV_BYTES, pool=pool)
        self.loop = asyncio.get_running_loop()
        self.peer = sock.getpeername()
        self.client_host = self.peer[0] if isinstance(self.peer, tuple) else ""
        self.listener_name = self.security.name
        if self.security.ssl_context is not None:
            self.stream: PlainStream | TlsStream = TlsStream(self.loop, sock, self.security.ssl_context)
        else:
            self.stream = PlainStream(self.loop, sock)
        self._frame_limit = max_frame_bytes
        self.sasl = SaslSession(self.security.sasl, self.peer, self.listener_name) if self.security.sasl else None
        if self.sasl is not None:
            self.decoder.max_frame_bytes = self.sasl.receive_limit(max_frame_bytes)
        # The authenticated principal; requests are stamped with it (Request.principal).
        self.principal = ANONYMOUS
        self._memory_released = memory_released
        # Produce responses still to be written, in request order; each yields encoded parts or None.
        self._responses: asyncio.Queue[asyncio.Future] = asyncio.Queue(MAX_PIPELINED_PRODUCES)
        self.last_active = self.loop.time()
        self._handling = False
        self._waiting = False  # for the pool, or muted
        self._muted_until = 0.0
        self._received = 0.0  # perf_counter when the frames being processed were read

    @property
    def busy(self) -> bool:
        return self._handling or self._waiting or not self._responses.empty()

    async def _wait_unmuted(self) -> None:
        while (delay := self._muted_until - self.loop.time()) > 0:
            self._waiting = True
            try:
                await asyncio.sleep(delay)
            finally:
                self._waiting = False
        self._muted_until = 0.0

    async def _wait_for_memory(self) -> None:
        while not self.decoder.ready():
            if self._memory_released is None:
                raise RuntimeError("the decoder waits for a memory pool nobody releases")
            self._waiting = True
            try:
                await self._memory_released()
            finally:
                self._waiting = False

    async def _start_tls(self) -> bool:
        """The TLS handshake, and the principal of the client's certificate if it showed one; False
        (logged once, with the peer) when the client does not complete it."""
        assert isinstance(self.stream, TlsStream)
        self._handling = True  # the handshake has its own timeout; the idle sweep leaves it alone
        try:
            await self.stream.handshake(self.security.handshake_timeout_s)
        except TlsHandshakeError as exc:
            log.warning("closing connection from %s on listener %s: %s", self.peer, self.listener_name, exc)
            return False
        finally:
            self._handling = False
        certificate = self.stream.peer_certificate()
        if certificate is not None and not self.security.protocol.sasl:
            self.principal = certificate_principal(certificate)
        return True

    async def serve(self) -> None:
        if self.stream.tls and not await self._start_tls():
            self.sock.close()
            self.decoder.close()
            return
        writer = asyncio.create_task(self._write_responses(asyncio.current_task()))
        try:
            while True:
                if self._muted_until:
                    await self._wait_unmuted()
                if not self.decoder.ready():
                    await self._wait_for_memory()
                received = await self.stream.recv_into(self.decoder.receive_buffer())
                if received == 0:
                    await self._responses.join()
                    return
                frames = self.decoder.received(received)
                self._received = perf_counter()
                for frame in frames:
                    if self._muted_until:
                        await self._wait_unmuted()
                    self.last_active = self.loop.time()
                    self._handling = True
                    try:
                        proceed = await self._process(frame)
                    finally:
                        self._handling = False
                    if not proceed:
                        await self._responses.join()  # answer what came before the bad request
                        return
                if frames:
                    self.decoder.frames_processed()
        except FramingError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except (ConnectionError, OSError) as exc:
            if getattr(exc, "errno", None) not in (errno.ECONNRESET, errno.EPIPE, None):
                log.info("connection from %s ended: %s", self.peer, exc)
        finally:
            writer.cancel()
            while not self._responses.empty():
                self._responses.get_nowait().cancel()
            self.sock.close()
            self.decoder.close()

    async def _process(self, frame: bytes | memoryview) -> bool:
        """Handle one request; False when the connection must be closed."""
        if self.sasl is not None and self.sasl.raw_tokens:
            return await self._raw_sasl_token(frame)
        try:
            request = decode_request(frame, self.principal, self.client_host, self.listener_name)
        except UnsupportedVersionError as exc:
            if exc.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer with v0 and our ranges so the client can pick a version.
                stub = Request(ApiKey.API_VERSIONS, 0, exc.correlation_id, None, None, len(frame),
                               self.principal, self.client_host, self.listener_name)
                response = self.handlers.api_versions_response(stub, ErrorCode.unsupported_version)
                await self._responses.join()
                await self._send((encode_response(ApiKey.API_VERSIONS, 0, exc.correlation_id, response), 0.0, None))
                return True
            log.warning("closing connection from %s: %s", self.peer, exc)
            return False
        except InvalidRequestError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            return False
        if self.sasl is not None:
            verdict = await self._sasl(request)
            if verdict is not None:
                return verdict
        bound = self.metrics.request(request.api_key, request.api_version, api_name,
                                     request.api_key == ApiKey.FETCH and getattr(request.body, "replica_id", -1) >= 0)
        clock = None if bound is NULL_REQUEST else RequestClock(self._received, bound, request)
        if request.api_key == ApiKey.PRODUCE:
            header = request.without_body()
            if clock is not None:
                clock.request = header  # a waiting produce keeps no records (see the module doc)
                clock.started = perf_counter()
            try:
                complete = await self.handlers.start_produce(request)
            except Exception:
                log.exception("Produce v%d from %s failed", request.api_version, self.peer)
                return False
            if clock is not None:
                clock.local_done = perf_counter()
            await self._responses.put(asyncio.ensure_future(self._encode(header, complete(), clock)))
            return True
        await self._responses.join()
        if clock is not None:
            clock.started = perf_counter()
            clock.bind()
        try:
            encoded = await self._encode(request, self.handlers.handle(request), clock)
        except Exception:
            return False
        if encoded is not None:
            await self._send(encoded)
        return True

    async def _sasl(self, request: Request) -> bool | None:
        """SASL's part in handling ``request`` (see broker_core.server.sasl): None when the request goes
        on to the handlers, else whether the connection stays open."""
        assert self.sasl is not None
        now = self.loop.time()
        if request.api_key == ApiKey.SASL_HANDSHAKE:
            answer = self.sasl.handshake(request)
        elif request.api_key == ApiKey.SASL_AUTHENTICATE:
            answer = await self.sasl.authenticate(request, now)
            self._authenticated()
        elif not self.sasl.authenticated:
            if request.api_key == ApiKey.API_VERSIONS:
                return None
            log.warning("closing connection from %s on listener %s: %s before authentication",
                        self.peer, self.listener_name, api_name(request.api_key))
            return False
        elif self.sasl.expired(now):
            log.info("closing connection from %s on listener %s: its SASL session ended without re-authentication",
                     self.peer, self.listener_name)
            return False
        else:
            return None
        await self._responses.join()
        await self._send((encode_response(request.api_key, request.api_version, request.correlation_id,
                                          answer.response), 0.0, None))
        return not answer.close

    async def _raw_sasl_token(self, frame: bytes | memoryview) -> bool:
        """A token framed as before KIP-152 (after SaslHandshake v0): answered with a bare token."""
        assert self.sasl is not None
        answer = await self.sasl.raw_token(bytes(frame), self.loop.time())
        if answer.close:
            return False
        self._authenticated()
        await self._send(([struct.pack(">i", len(answer.response)) + answer.response], 0.0, None))
        return True

    def _authenticated(self) -> None:
        assert self.sasl is not None
        if self.sasl.principal is not None:
            self.principal = self.sasl.principal
        self.decoder.max_frame_bytes = self.sasl.receive_limit(self._frame_limit)

    async def _encode(self, request: Request, answer: Awaitable[Any],
                      clock: RequestClock | None = None) -> tuple[list, float, RequestClock | None] | None:
        """The encoded response to ``request`` once ``answer`` gives it, with the seconds it asks the
        client to hold off for (its throttle time) and its clock (None if untimed); None when none is sent."""
        try:
            response = await answer
            if clock is not None:
                clock.ready = perf_counter()
            if response is None:
                if clock is not None:  # acks=0: nothing to send
                    clock.send_started = clock.sent = clock.ready
                    self.metrics.request_done(clock, 0.0, self.listener_name)
                return None
            # A response the version cannot carry (e.g. a null topic name before Metadata v12) fails here.
            parts = encode_response(request.api_key, request.api_version, request.correlation_id, response)
            return parts, _throttle_seconds(response), clock
        except Exception:
            log.exception("%s v%d from %s failed", api_name(request.api_key), request.api_version, self.peer)
            raise

    async def _write_responses(self, reader: asyncio.Task) -> None:
        """Write produce responses in request order; a failed one closes the connection, as a failed
        request handled alone does."""
        while True:
            pending = await self._responses.get()
            try:
                encoded = await pending
                if encoded is not None:
                    await self._send(encoded)
            except Exception:
                reader.cancel()
                return
            self._responses.task_done()

    async def _send(self, encoded: tuple[list, float, RequestClock | None]) -> None:
        """Write one response; if it carries a throttle time, read nothing more for that long (KIP-219)."""
        parts, throttle_s, clock = encoded
        if clock is not None:
            clock.send_started = perf_counter()
        pending = bytearray()
        for part in parts:
            if isinstance(part, bytes):
                pending += part
                continue
            if pending:
                await self.stream.send(pending)
                pending = bytearray()
            await self.stream.send_file(part.fd, part.position, part.length)
        if pending:
            await self.stream.send(pending)
        now = self.loop.time()
        self.last_active = now
        if clock is not None:
            clock.sent = perf_counter()
            self.metrics.request_done(clock, throttle_s, self.listener_name)
        if throttle_s > 0:
            self._muted_until = max(self._muted_until, now + throttle_s)


class ConnectionAdmission:
    """Which new connections the listener accepts: counts per address and in all, a creation rate.

    The rate is a token bucket refilled at `max.connection.creation.rate` per second, holding at most
    one second's worth; only accepted connections spend a token. Refusals are counted (`refused`,
    by reason, for as long as the broker runs) and summarised in the log once per interval.
    """

    def __init__(self, limits: ListenerLimits, now: float) -> None:
        self.limits = limits
        self.per_ip_limits = {address: count for host, count in limits.max_connections_per_ip_overrides.items()
                              for address in _addresses_of(host)}
        self.open: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self._unlogged: Counter[tuple[str, str]] = Counter()
        self._tokens = float(limits.max_connection_creation_rate)
        self._refilled = now
        self._logged = now

    @property
    def total(self) -> int:
        return sum(self.open.values())

    def admit(self, address: str, now: float) -> str | None:
        """None if a connection from ``address`` may open now (and count it), else why not."""
        rate = self.limits.max_connection_creation_rate
        self._tokens = min(float(rate), self._tokens + (now - self._refilled) * rate)
        self._refilled = now
        if self.total >= self.limits.max_connections:
            reason = f"max.connections ({self.limits.max_connections}) reached"
        elif self.open[address] >= (per_ip := self.per_ip_limits.get(address, self.limits.max_connections_per_ip)):
            reason = f"max.connections.per.ip ({per_ip}) reached"
        elif self._tokens < 1:
            reason = f"max.connection.creation.rate ({rate}/s) exceeded"
        else:
            self._tokens -= 1
            self.open[address] += 1
            return None
        self.refused[reason.split(" ", 1)[0]] += 1
        self._unlogged[(address, reason)] += 1
        return reason

    def closed(self, address: str) -> None:
        self.open[address] -= 1
        if self.open[address] <= 0:
            del self.open[address]

    def log_refusals(self, now: float) -> None:
        """Log what was refused since the last summary, if an interval has passed."""
        if now - self._logged < REFUSAL_LOG_INTERVAL_S:
            return
        for (address, reason), count in sorted(self._unlogged.items()):
            log.warning("refused %d connections from %s in the last %.0f s: %s",
                        count, address, now - self._logged, reason)
        self._unlogged.clear()
        self._logged = now


def _addresses_of(host: str) -> set[str]:
    """The addresses a connection from ``host`` may come from (names are resolved once, at start-up)."""
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except socket.gaierror as exc:
        raise ConfigError(f"max.connections.per.ip.overrides: cannot resolve {host!r}: {exc}") from None


class MemoryReleases:
    """Wakes the connections waiting for the request memory pool whenever it releases bytes."""

    def __init__(self, pool: RequestMemoryPool) -> None:
        self._released = asyncio.Event()
        pool.on_release = self._wake

    def _wake(self) -> None:
        self._released.set()
        self._released = asyncio.Event()

    async def wait(self) -> None:
        await self._released.wait()


class KafkaListener:
    """One listening socket and its connections. Listeners of one broker built ``shared_with`` the
    first share its request memory pool and connection admission, so the limits are broker-wide."""

    def __init__(self, handlers: RequestHandlers, host: str, port: int,
                 limits: ListenerLimits | None = None, security: ListenerSecurity | None = None,
                 shared_with: KafkaListener | None = None, metrics: BrokerMetrics | None = None) -> None:
        self.handlers = handlers
        self.metrics = metrics
        self.host = host
        self.port = port
        self.limits = limits or ListenerLimits()
        self.security = security or ListenerSecurity()
        self._shared_with = shared_with
        self.pool = shared_with.pool if shared_with else RequestMemoryPool(self.limits.queued_max_request_bytes)
        self.admission: ConnectionAdmission | None = None
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task | None = None
        self._sweep_task: asyncio.Task | None = None
        self._connections: dict[asyncio.Task, Connection] = {}

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        if self._shared_with is not None:
            self.admission, self._memory = self._shared_with.admission, self._shared_with._memory
        else:
            self.admission = ConnectionAdmission(self.limits, loop.time())
            self._memory = MemoryReleases(self.pool)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(512)
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._accept_task = asyncio.create_task(self._accept_loop())
        self._sweep_task = asyncio.create_task(self._sweep())
        return self.port

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None and self.admission is not None
        while True:
            client, peer = await loop.sock_accept(self._sock)
            address = peer[0]
            if self.admission.admit(address, loop.time()) is not None:
                client.close()
                continue
            try:
                client.setblocking(False)
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                connection = Connection(client, self.handlers, self.limits.max_frame_bytes, self.pool,
                                        self._memory.wait, self.security, self.metrics)
            except OSError:  # the peer is gone already
                client.close()
                self.admission.closed(address)
                continue
            task = asyncio.create_task(connection.serve())
            self._connections[task] = connection
            task.add_done_callback(lambda done, address=address: self._closed(done, address))

    def _closed(self, task: asyncio.Task, address: str) -> None:
        self._connections.pop(task, None)
        if self.admission is not None:
            self.admission.closed(address)

    async def _sweep(self) -> None:
        """Close idle connections and summarise refusals, about once a second."""
        loop = asyncio.get_running_loop()
        idle_s = self.limits.connections_max_idle_ms / 1000
        period = min(1.0, max(idle_s / 4, 0.01)) if idle_s > 0 else 1.0
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            assert self.admission is not None
            self.admission.log_refusals(now)
            if idle_s <= 0:
                continue
            for task, connection in list(self._connections.items()):
                if not connection.busy and now - connection.last_active >= idle_s:
                    log.debug("closing connection from %s: idle for %.0f s",
                              connection.peer, now - connection.last_active)
                    task.cancel()

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def connections_by_principal(self) -> Counter[str]:
        """Open connections of this listener by principal (unauthenticated ones are User:ANONYMOUS)."""
        return Counter(connection.principal for connection in self._connections.values())

    async def stop(self) -> None:
        for task in (self._accept_task, self._sweep_task):
            if task:
                task.cancel()
        if self._sock:
            self._sock.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)


class KafkaListeners:
    """The broker's listeners (`listeners`), started and stopped together; see broker_core.server.listeners."""

    def __init__(self, listeners: Mapping[str, tuple[KafkaListener, str, int | None]]) -> None:
        # name -> (listener, advertised host, advertised port or None for the bound one); the first
        # listener's port is the broker's `port`.
        self.listeners = dict(listeners)

    async def start(self) -> int:
        ports = []
        try:
            for listener, _, _ in self.listeners.values():
                ports.append(await listener.start())
        except BaseException:
            await self.stop()
            raise
        return ports[0]

    def advertised_endpoints(self) -> dict[str, tuple[str, int]]:
        """Each listener's advertised (host, port), once started."""
        return {name: (host, port or listener.port) for name, (listener, host, port) in self.listeners.items()}

    def bound_ports(self) -> dict[str, int]:
        return {name: listener.port for name, (listener, _, _) in self.listeners.items()}

    @property
    def connection_count(self) -> int:
        return sum(listener.connection_count for listener, _, _ in self.listeners.values())

    def connections_by_listener(self) -> dict[tuple[str, str], int]:
        """Open connections by (listener name, principal)."""
        return {(name, principal): count for name, (listener, _, _) in self.listeners.items()
                for principal, count in listener.connections_by_principal().items()}

    def refused_connections(self) -> Mapping[str, int]:
        """Connections refused since start, by the limit that refused them (max.connections, ...)."""
        first = next(iter(self.listeners.values()))[0]
        return dict(first.admission.refused) if first.admission is not None else {}

    async def stop(self) -> None:
        for listener, _, _ in self.listeners.values():
            await listener.stop()
