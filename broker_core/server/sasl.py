"""SASL on a connection of a SASL_PLAINTEXT or SASL_SSL listener: SaslHandshake, SaslAuthenticate, gating.

The exchange (KIP-43, KIP-152): the client may send ApiVersions, then SaslHandshake naming a mechanism
the listener enables (`sasl.enabled.mechanisms`), then SaslAuthenticate frames carrying the
mechanism's tokens until it succeeds; only then does the connection carry other requests, stamped
with the authenticated principal. A client that sends SaslHandshake v0 continues with the tokens as
bare size-prefixed frames (the framing before KIP-152), which is served as well.

Mechanisms: PLAIN (`authzid NUL authcid NUL password`, checked against the SCRAM credential store: the
user's SCRAM-SHA-512 credential, else its SCRAM-SHA-256 one; SASL_SSL listeners only, since the password
travels as it is), SCRAM-SHA-256 and SCRAM-SHA-512 (`broker_core.security.scram`), and OAUTHBEARER when
the listener is given a token verifier. GSSAPI (Kerberos) is not supported.

Failures: a wrong password, an unknown user, a malformed token or a replayed SCRAM nonce answers
SASL_AUTHENTICATION_FAILED with a short message, logged once with the peer address, and the connection
is closed after the response; so is a SaslAuthenticate before SaslHandshake (ILLEGAL_SASL_STATE) and a
mechanism the listener does not enable (UNSUPPORTED_SASL_MECHANISM). Any other request before
authentication closes the connection without an answer, and frames before authentication are capped
at `sasl.server.max.receive.size`.

Re-authentication (KIP-368): with `connections.max.reauth.ms` set, SaslAuthenticate answers a session
lifetime; the client re-runs SaslHandshake and SaslAuthenticate on the same connection before it ends,
as the same principal with the same mechanism (another one closes the connection). An OAUTHBEARER
session ends no later than its token expires (KIP-368): its lifetime is the shorter of the two. A
connection whose session has ended is closed on its next request other than those two. Times are the event loop's
monotonic clock. A `SaslSession` belongs to one connection and its reader task.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import respond
from broker_core.security.errors import AuthenticationError
from broker_core.security.principal import KafkaPrincipal
from broker_core.security.scram import (
    SCRAM_MECHANISMS,
    CredentialLookup,
    ScramCredential,
    ScramServer,
    make_credential,
    verify_password,
)
from broker_core.settings import ConfigError

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS, OAUTHBEARER)
_PLAIN_FAILED = "Authentication failed: invalid username or password"
_PLAIN_MALFORMED = "Authentication failed: malformed PLAIN message"
MAX_PLAIN_FIELD_BYTES = 1024

# An OAUTHBEARER client message -> (principal, when its token expires, in seconds since the epoch).
TokenVerifier = Callable[[bytes], Awaitable[tuple[str, float]]]


class MechanismServer(Protocol):
    """The server side of one mechanism's exchange on one connection."""

    @property
    def complete(self) -> bool: ...

    @property
    def principal(self) -> str | None: ...

    @property
    def expires_at(self) -> float | None:
        """When the credential shown expires (seconds since the epoch), if it does (tokens)."""
        ...

    async def step(self, token: bytes) -> bytes:
        """The answer to the client's next token; AuthenticationError when it fails."""
        ...


class ScramMechanism:
    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self._server = ScramServer(mechanism, lookup)

    @property
    def complete(self) -> bool:
        return self._server.complete

    @property
    def principal(self) -> str | None:
        username = self._server.username
        return str(KafkaPrincipal.user(username)) if self.complete and username is not None else None

    expires_at = None  # a password does not expire

    async def step(self, token: bytes) -> bytes:
        return await self._server.step(token)


@cache
def _stand_in_credential(mechanism: str) -> ScramCredential:
    """A credential nobody knows the password of: an unknown user's PLAIN check costs what a known one's does."""
    return make_credential(mechanism, secrets.token_urlsafe(32))


class PlainMechanism:
    """SASL/PLAIN (RFC 4616) against the SCRAM credential store."""

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self._principal: str | None = None
        self._done = False

    @property
    def complete(self) -> bool:
        return self._principal is not None

    @property
    def principal(self) -> str | None:
        return self._principal

    expires_at = None  # a password does not expire

    async def step(self, token: bytes) -> bytes:
        if self._done:
            raise AuthenticationError(_PLAIN_MALFORMED)
        self._done = True
        parts = token.split(b"\x00")
        if len(parts) != 3 or any(len(part) > MAX_PLAIN_FIELD_BYTES for part in parts):
            raise AuthenticationError(_PLAIN_MALFORMED)
        try:
            authzid, username, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise AuthenticationError(_PLAIN_MALFORMED) from None
        if not username or not password or (authzid and authzid != username):
            raise AuthenticationError(_PLAIN_FAILED)
        for mechanism in reversed(SCRAM_MECHANISMS):  # SCRAM-SHA-512 first
            credential = await self._lookup(username, mechanism)
            if credential is not None:
                break
        else:
            credential, mechanism = None, SCRAM_MECHANISMS[-1]
        # PBKDF2 of thousands of rounds: off the event loop, and run for unknown users too.
        checked = credential or _stand_in_credential(mechanism)
        if not await asyncio.to_thread(verify_password, checked, password) or credential is None:
            raise AuthenticationError(_PLAIN_FAILED)
        self._principal = str(KafkaPrincipal.user(username))
        return b""


class OAuthBearerMechanism:
    def __init__(self, verify: TokenVerifier) -> None:
        self._verify = verify
        self._principal: str | None = None
        self._expires_at: float | None = None
        self._done = False

    @property
    def expires_at(self) -> float | None:
        return self._expires_at

    @property
    def complete(self) -> bool:
        return self._principal is not None

    @property
    def principal(self) -> str | None:
        return self._principal

    async def step(self, token: bytes) -> bytes:
        if self._done:
            raise AuthenticationError("Authentication failed: unexpected OAUTHBEARER message")
        self._done = True
        self._principal, self._expires_at = await self._verify(token)
        return b""


@dataclass(frozen=True)
class SaslConfig:
    """A SASL listener's settings and the credential checks its mechanisms use."""

    mechanisms: tuple[str, ...]
    lookup: CredentialLookup
    reauth_ms: int = 0
    max_receive_bytes: int = 512 * 1024
    verify_token: TokenVerifier | None = None

    def __post_init__(self) -> None:
        unsupported = [m for m in self.mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported:
            raise ConfigError(f"sasl.enabled.mechanisms: {', '.join(unsupported)} not supported (Floe serves "
                              f"{', '.join(SUPPORTED_MECHANISMS)})")
        if not self.mechanisms:
            raise ConfigError("sasl.enabled.mechanisms is empty on a SASL listener")
        if OAUTHBEARER in self.mechanisms and self.verify_token is None:
            raise ConfigError("OAUTHBEARER is enabled but the broker has no token verifier for it")

    def mechanism_server(self, mechanism: str) -> MechanismServer:
        if mechanism in SCRAM_MECHANISMS:
            return ScramMechanism(mechanism, self.lookup)
        if mechanism == PLAIN:
            return PlainMechanism(self.lookup)
        assert self.verify_token is not None
        return OAuthBearerMechanism(self.verify_token)


class State(enum.Enum):
    AWAITING_HANDSHAKE = "awaiting SaslHandshake"
    AUTHENTICATING = "authenticating"
    AUTHENTICATED = "authenticated"


@dataclass(frozen=True)
class Answer:
    """What the connection does with a SASL request: send ``response`` (a kio response, or a bare token
    for the v0 framing), then go on or close."""

    response: Any
    close: bool = False
    raw: bool = False


class SaslSession:
    """One connection's SASL state; see the module docstring."""

    def __init__(self, config: SaslConfig, peer: object, listener: str) -> None:
        self.config = config
        self.peer = peer
        self.listener = listener
        self.state = State.AWAITING_HANDSHAKE
        self.principal: str | None = None  # set once authenticated
        self.mechanism: str | None = None
        self.raw_tokens = False  # SaslHandshake v0: tokens follow as bare frames
        self.session_ends: float | None = None  # loop time; None: never
        self.lifetime_ms = 0  # of the current session; 0: it does not end
        self._server: MechanismServer | None = None
        self._reauthenticating = False

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def _lifetime_ms(self, expires_at: float | None) -> int:
        """The session's lifetime: `connections.max.reauth.ms`, cut to what is left of an expiring
        credential (a token), as Kafka does (never below 1 ms: 0 would tell the client "no limit").
        Without re-authentication sessions do not end, whatever the credential."""
        reauth_ms = self.config.reauth_ms
        if reauth_ms <= 0 or expires_at is None:
            return max(reauth_ms, 0)
        return max(1, min(reauth_ms, int((expires_at - time.time()) * 1000)))

    def expired(self, now: float) -> bool:
        return self.session_ends is not None and now >= self.session_ends

    def receive_limit(self, socket_limit: int) -> int:
        """The largest frame the connection may read now."""
        return socket_limit if self.authenticated else min(socket_limit, self.config.max_receive_bytes)

    def _refuse(self, reason: str) -> None:
        log.warning("SASL authentication of %s on listener %s failed: %s", self.peer, self.listener, reason)

    def handshake(self, request: Request) -> Answer:
        mechanism = request.body.mechanism
        if self.state is State.AUTHENTICATING:
            self._refuse("SaslHandshake during an exchange")
            return Answer(respond(request, {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}), close=True)
        enabled = list(self.config.mechanisms)
        if mechanism not in self.config.mechanisms:
            self._refuse(f"mechanism {mechanism!r} is not enabled")
            return Answer(respond(request, {"error_code": ErrorCode.unsupported_sasl_mechanism,
                                            "mechanisms": enabled}), close=True)
        if self.authenticated and mechanism != self.mechanism:
            self._refuse(f"re-authentication with {mechanism} after {self.mechanism}")
            return Answer(respond(request, {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": enabled}),
                          close=True)
        self._reauthenticating = self.authenticated
        self.mechanism = mechanism
        self._server = self.config.mechanism_server(mechanism)
        self.state = State.AUTHENTICATING
        self.raw_tokens = request.api_version == 0 and not self._reauthenticating
        return Answer(respond(request, {"error_code": ErrorCode.none, "mechanisms": enabled}))

    async def authenticate(self, request: Request, now: float) -> Answer:
        if self.state is not State.AUTHENTICATING or self.raw_tokens:
            self._refuse("SaslAuthenticate before SaslHandshake")
            return Answer(respond(request, {"error_code": ErrorCode.illegal_sasl_state,
                                            "error_message": "SaslAuthenticate before SaslHandshake",
                                            "auth_bytes": b"", "session_lifetime": _ms(0)}), close=True)
        try:
            token = await self._step(bytes(request.body.auth_bytes), now)
        except AuthenticationError as exc:
            return Answer(respond(request, {"error_code": ErrorCode.sasl_authentication_failed,
                                            "error_message": str(exc), "auth_bytes": b"",
                                            "session_lifetime": _ms(0)}), close=True)
        lifetime = self.lifetime_ms if self.state is State.AUTHENTICATED else 0
        return Answer(respond(request, {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": token,
                                        "session_lifetime": _ms(lifetime)}))

    async def raw_token(self, token: bytes, now: float) -> Answer:
        """A bare token after SaslHandshake v0; its answer is a bare token too (empty at failure: close)."""
        try:
            answer = await self._step(token, now)
        except AuthenticationError:
            return Answer(b"", close=True, raw=True)
        if self.state is State.AUTHENTICATED:
            self.raw_tokens = False
        return Answer(answer, raw=True)

    async def _step(self, token: bytes, now: float) -> bytes:
        assert self._server is not None
        try:
            answer = await self._server.step(token)
        except AuthenticationError as exc:
            self._refuse(str(exc))
            self.state = State.AWAITING_HANDSHAKE
            raise
        if self._server.complete:
            principal = self._server.principal
            assert principal is not None
            if self._reauthenticating and principal != self.principal:
                self._refuse(f"re-authenticated as {principal}, not {self.principal}")
                raise AuthenticationError("Authentication failed: re-authentication as another principal")
            self.principal = principal
            self.state = State.AUTHENTICATED
            self.lifetime_ms = self._lifetime_ms(self._server.expires_at)
            self._server = None
            self.session_ends = now + self.lifetime_ms / 1000 if self.lifetime_ms > 0 else None
            if not self._reauthenticating:
                log.info("%s authenticated as %s with %s on listener %s", self.peer, principal, self.mechanism,
                         self.listener)
        return answer


def _ms(milliseconds: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=milliseconds)


async def sasl_on_a_listener_without_it(request: Request) -> Any:
    """SaslHandshake or SaslAuthenticate on a listener that runs no SASL: ILLEGAL_SASL_STATE, as Kafka."""
    if request.api_key == ApiKey.SASL_HANDSHAKE:
        return respond(request, {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []})
    return respond(request, {"error_code": ErrorCode.illegal_sasl_state,
                             "error_message": "this listener does not run SASL", "auth_bytes": b"",
                             "session_lifetime": _ms(0)})
