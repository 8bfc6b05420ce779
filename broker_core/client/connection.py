"""One pipelined Kafka-protocol connection to one broker, on asyncio.

`BrokerConnection` opens a TCP connection (TLS and SASL as its `ClientSecurity` says: the handshake
and SaslHandshake/SaslAuthenticate after ApiVersions), negotiates a version per API with ApiVersions, then
pipelines requests: each waits on a future keyed by its correlation id, which `_ResponseProtocol`
resolves as responses arrive, in whatever order; responses are received in place (see
FrameDecoder), so a large fetch response is not copied. Requests are kio entities, built from dicts
with `build_entity` so one code path serves every negotiated version. This is the only Kafka
connection of the code base: `FloeClient` keeps several of them, the replica fetcher one per leader,
and blocking code reaches one through `BlockingConnection`.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import struct
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import FrameDecoder, FramingError, decode_response, encode_request
from broker_core.protocol.messages import SUPPORTED_VERSIONS, api_name, build_entity, request_class
from broker_core.security.errors import AuthenticationError
from broker_core.security.iam import iam_oauth_cb
from broker_core.security.scram import ScramClient

from .errors import (
    AuthenticationFailedError,
    BrokerConnectionError,
    ClientError,
    RequestTimeoutError,
    UnsupportedVersionError,
    raise_for,
)
from .security import OAUTHBEARER, PLAINTEXT, ClientSecurity

# The newest version of each API this client fills every field of; negotiation takes the lower of
# this and the broker's newest. (DeleteTopics v6 and Fetch v13 address topics by id.)
CLIENT_MAX_VERSIONS: dict[int, int] = {
    ApiKey.PRODUCE: 10,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 7,
    ApiKey.METADATA: 12,
    ApiKey.API_VERSIONS: 3,
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.DELETE_TOPICS: 5,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.DELETE_RECORDS: 2,
    ApiKey.ELECT_LEADERS: 2,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 1,
    ApiKey.CREATE_PARTITIONS: 3,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.DESCRIBE_LOG_DIRS: 1,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: 1,
    ApiKey.ALTER_CLIENT_QUOTAS: 1,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.DESCRIBE_ACLS: 3,
    ApiKey.CREATE_ACLS: 3,
    ApiKey.DELETE_ACLS: 3,
}

CLIENT_SOFTWARE_NAME = "floe-client"
CLIENT_SOFTWARE_VERSION = "0.1.0"

_CORRELATION_ID = struct.Struct(">i")
_MAX_RESPONSE_BYTES = 512 * 1024 * 1024


class BrokerConnection:
    """One pipelined TCP connection to one broker.

    Role: carry Kafka requests to one broker and hand back their responses, decoded as kio entities
    (`send`) or as raw frames (`send_raw`, for callers that decode in place).
    Invariants: `send` sends each request at a version both sides serve (negotiated on `connect`, or
    the entity's own version, checked against the broker's range; `send_raw` leaves that to its
    caller, through `version_for`); frames are written whole and in the
    order `send` is called, and each response is routed to its request by correlation id; once the
    socket fails, a frame cannot be trusted or a request times out, the connection is closed for good
    and every waiting request fails with `BrokerConnectionError` (open a new connection).
    Pipelining saves round trips, but a broker answers a connection's requests one at a time, so a
    long-poll Fetch delays whatever was sent after it on the same connection.
    Callers: any number of tasks of the event loop that opened it, concurrently. Not thread-safe;
    blocking code uses `BlockingConnection`, which runs one on a loop of its own.
    """

    def __init__(self, host: str, port: int, *, client_id: str = "floe-client",
                 request_timeout_s: float = 30.0, node_id: int | None = None,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.host = host
        self.port = port
        self.security = security
        self._reauthentication: asyncio.TimerHandle | None = None
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
                    lambda: _ResponseProtocol(self), self.host, self.port, ssl=self.security.ssl_context,
                    server_hostname=self.host if self.security.tls else None)
        except (TimeoutError, OSError) as exc:  # ssl.SSLError is an OSError: a refused certificate
            raise BrokerConnectionError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
        try:
            await self._negotiate_versions()
            if self.security.sasl:
                await self._authenticate()
        except BaseException:
            await self.close()
            raise

    async def _negotiate_versions(self) -> None:
        # ApiVersions v3 is served by every broker since Kafka 2.4, Floe's included.
        response = await self._send_versioned(ApiKey.API_VERSIONS, CLIENT_MAX_VERSIONS[ApiKey.API_VERSIONS], {
            "client_software_name": CLIENT_SOFTWARE_NAME, "client_software_version": CLIENT_SOFTWARE_VERSION,
        })
        raise_for(response.error_code, "ApiVersions")
        self.broker_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        for api_key, our_max in CLIENT_MAX_VERSIONS.items():
            if api_key not in self.broker_versions:
                continue
            broker_min, broker_max = self.broker_versions[api_key]
            our_min = SUPPORTED_VERSIONS[api_key][0]
            version = min(our_max, broker_max)
            if version >= max(our_min, broker_min):
                self.versions[api_key] = version

    async def _authenticate(self) -> None:
        """SaslHandshake v1 and SaslAuthenticate (KIP-152) with the configured mechanism; with a session
        lifetime (KIP-368), re-authenticate at 85% of it, on this connection."""
        mechanism = self.security.sasl_mechanism
        assert mechanism is not None
        handshake = await self._send_versioned(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        raise_for(handshake.error_code, f"SaslHandshake {mechanism} (broker offers {handshake.mechanisms})")
        version = min(2, self.broker_versions.get(ApiKey.SASL_AUTHENTICATE, (0, 0))[1])

        async def exchange(token: bytes) -> Any:
            response = await self._send_versioned(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})
            if response.error_code != ErrorCode.none:
                raise AuthenticationFailedError(f"{self.host}:{self.port}: {response.error_code.name}: "
                                                f"{response.error_message}")
            return response

        username, password = self.security.username, self.security.password
        if mechanism == OAUTHBEARER:
            # Signing is local (no network call) but boto3 may read credential files: off the loop.
            try:
                token, _ = await asyncio.to_thread(iam_oauth_cb, self.security.oauthbearer_config)
            except AuthenticationError as exc:
                raise AuthenticationFailedError(f"{self.host}:{self.port}: no IAM token: {exc}") from None
            response = await exchange(f"n,,\x01auth=Bearer {token}\x01\x01".encode("ascii"))
        elif mechanism == "PLAIN":
            response = await exchange(b"\x00" + username.encode() + b"\x00" + password.encode())
        else:
            scram = ScramClient(mechanism, username, password)
            server_first = await exchange(scram.first())
            response = await exchange(scram.final(bytes(server_first.auth_bytes)))
            try:
                scram.verify(bytes(response.auth_bytes))
            except AuthenticationError as exc:
                raise AuthenticationFailedError(f"{self.host}:{self.port}: the broker did not prove it knows "
                                                f"the credential: {exc}") from None
        lifetime_s = getattr(response, "session_lifetime", datetime.timedelta(0)).total_seconds()
        if lifetime_s > 0:
            loop = asyncio.get_running_loop()
            self._reauthentication = loop.call_later(lifetime_s * 0.85, self._start_reauthentication)

    def _start_reauthentication(self) -> None:
        if self._closed_reason is not None:
            return
        task = asyncio.ensure_future(self._authenticate())
        task.add_done_callback(self._reauthenticated)

    def _reauthenticated(self, task: asyncio.Future) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._fail(f"re-authentication failed: {task.exception()}")

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
        if self._reauthentication is not None:
            self._reauthentication.cancel()
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

