"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), server and client, without channel binding.

The exchange, as Kafka runs it inside SaslAuthenticate frames::

    client-first  n,,n=<user>,r=<client nonce>
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=biws,r=<client nonce><server nonce>,p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>

with SaltedPassword = PBKDF2-HMAC(password, salt, iterations), ClientKey = HMAC(SaltedPassword,
"Client Key"), StoredKey = H(ClientKey), ServerKey = HMAC(SaltedPassword, "Server Key"). The broker
keeps only (salt, StoredKey, ServerKey, iterations) (a ``ScramCredential``), never the password: a
client proves it knows ClientKey, and the server proves it knows ServerKey.

As in Kafka (and librdkafka), the password is taken as its UTF-8 bytes without SASLprep, so a
credential made by Kafka's tools for the same password verifies here. Usernames travel with ``=``
written ``=3D`` and ``,`` written ``=2C``.

``ScramServer`` is one exchange on one connection: it is not thread-safe and not reusable; a second
client-first, a client-final whose nonce is not the combined nonce of this exchange (a replay from
another exchange, or an altered one), or any message after a failure raises ``AuthenticationError``.
Everything a client can send that is not a valid exchange raises ``AuthenticationError`` and nothing
else; an unknown user runs the same steps as a known one against a made-up credential and fails at
the proof with the same message as a wrong password, so the steps and the message are the same for both.
Errors of the credential lookup itself (the store unreachable) are not the client's doing and
propagate unchanged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from broker_core.security.errors import AuthenticationError

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}

# Kafka's bounds (ScramMechanism.minIterations, AlterUserScramCredentials' maximum).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
MIN_SALT_BYTES = 16
DEFAULT_SALT_BYTES = 32
# A SCRAM message is a few hundred bytes; anything much longer is not one.
MAX_MESSAGE_BYTES = 8192

CredentialLookup = Callable[[str, str], Awaitable["ScramCredential | None"]]

_FAILED = "Authentication failed: invalid username or password"
_MALFORMED = "Authentication failed: malformed SCRAM message"

# RFC 5802: printable = %x21-2B / %x2D-7E (no comma); value-safe-char excludes ',' and '='.
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+\Z")
_EXTENSION = re.compile(r"[A-Za-z]=[^,]*\Z|[A-Za-z][A-Za-z0-9]+=[^,]*\Z")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}\Z")


@dataclass(frozen=True)
class ScramCredential:
    """What a broker stores for one user and mechanism: enough to verify a proof, not to make one."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hash_name(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ValueError(f"unsupported SCRAM mechanism {mechanism!r}; supported: {', '.join(SCRAM_MECHANISMS)}") from None


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 Hi(password, salt, i), which is PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(_hash_name(mechanism), password.encode("utf-8"), salt, iterations)


def _check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"SCRAM iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, got {iterations}")


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
    """The credential for a SaltedPassword computed elsewhere (AlterUserScramCredentials sends it so)."""
    hash_name = _hash_name(mechanism)
    _check_iterations(iterations)
    if len(salted_password) != hashlib.new(hash_name).digest_size:
        raise ValueError(f"a {mechanism} salted password is {hashlib.new(hash_name).digest_size} bytes, got {len(salted_password)}")
    if not salt:
        raise ValueError("a SCRAM salt cannot be empty")
    client_key = _hmac(hash_name, salted_password, b"Client Key")
    return ScramCredential(
        mechanism=mechanism,
        salt=bytes(salt),
        stored_key=hashlib.new(hash_name, client_key).digest(),
        server_key=_hmac(hash_name, salted_password, b"Server Key"),
        iterations=iterations,
    )


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None) -> ScramCredential:
    """A new credential for ``password``; the salt is random (32 bytes) unless given (16 bytes at least)."""
    _hash_name(mechanism)
    _check_iterations(iterations)
    if salt is None:
        salt = secrets.token_bytes(DEFAULT_SALT_BYTES)
    elif len(salt) < MIN_SALT_BYTES:
        raise ValueError(f"a SCRAM salt must be at least {MIN_SALT_BYTES} bytes, got {len(salt)}")
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


def verify_password(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (SASL/PLAIN); constant-time compare."""
    hash_name = _hash_name(credential.mechanism)
    salted = salted_password(credential.mechanism, password, credential.salt, credential.iterations)
    stored_key = hashlib.new(hash_name, _hmac(hash_name, salted, b"Client Key")).digest()
    return hmac.compare_digest(stored_key, credential.stored_key)


def escape_username(username: str) -> str:
    """RFC 5802 saslname: ``=`` -> ``=3D``, ``,`` -> ``=2C``."""
    return username.replace("=", "=3D").replace(",", "=2C")


def unescape_username(saslname: str) -> str:
    """The inverse of ``escape_username``; any other ``=`` sequence is malformed."""
    if "," in saslname or re.search(r"=(?!2C|3D)", saslname):
        raise AuthenticationError(_MALFORMED)
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _new_nonce() -> str:
    # base64 never contains a comma, so the nonce is RFC 5802 printable.
    return base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def _b64decode(text: str) -> bytes:
    if not _BASE64.match(text) or len(text) % 4:
        raise AuthenticationError(_MALFORMED)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise AuthenticationError(_MALFORMED) from None


def _decode(message: bytes) -> str:
    if not isinstance(message, (bytes, bytearray, memoryview)) or len(message) > MAX_MESSAGE_BYTES:
        raise AuthenticationError(_MALFORMED)
    try:
        text = bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationError(_MALFORMED) from None
    if "\x00" in text:
        raise AuthenticationError(_MALFORMED)
    return text


def _attribute(part: str, name: str) -> str:
    """The value of ``name=value``; a missing or misnamed attribute is malformed."""
    if not part.startswith(name + "="):
        raise AuthenticationError(_MALFORMED)
    return part[len(name) + 1 :]


def _check_extensions(parts: list[str]) -> None:
    for part in parts:
        if not _EXTENSION.match(part):
            raise AuthenticationError(_MALFORMED)
        if part.startswith("m="):
            # RFC 5802: "m" is reserved for a future mandatory extension we cannot understand.
            raise AuthenticationError(_MALFORMED)
        if part.lower() == "tokenauth=true":
            # Kafka's delegation-token extension: Floe has no delegation tokens.
            raise AuthenticationError(_FAILED)


class _Stage:
    FIRST = "first"
    FINAL = "final"
    COMPLETE = "complete"
    FAILED = "failed"


# Made-up credentials for unknown users derive from this per-process key, so a user who does not
# exist still gets the same salt on every attempt, as a real user would.
_UNKNOWN_USER_KEY = secrets.token_bytes(32)


def _unknown_user_credential(mechanism: str, username: str) -> ScramCredential:
    hash_name = _hash_name(mechanism)
    seed = _hmac(hash_name, _UNKNOWN_USER_KEY, f"{mechanism}\x00{username}".encode())
    return ScramCredential(
        mechanism=mechanism,
        salt=seed[:DEFAULT_SALT_BYTES],
        stored_key=_hmac(hash_name, seed, b"stored"),
        server_key=_hmac(hash_name, seed, b"server"),
        iterations=MIN_ITERATIONS,
    )


class ScramServer:
    """The broker's side of one SCRAM exchange (see the module docstring for the protocol)."""

    def __init__(self, mechanism: str, lookup: CredentialLookup, *, nonce: Callable[[], str] = _new_nonce) -> None:
        self.mechanism = mechanism
        self._hash_name = _hash_name(mechanism)
        self._lookup = lookup
        self._nonce = nonce
        self._stage = _Stage.FIRST
        self._username: str | None = None
        self._claimed_username: str | None = None
        self._credential: ScramCredential | None = None
        self._known_user = False
        self._gs2_header = ""
        self._combined_nonce = ""
        self._client_first_bare = ""
        self._server_first = ""

    @property
    def complete(self) -> bool:
        return self._stage == _Stage.COMPLETE

    @property
    def username(self) -> str | None:
        """The authenticated username, once the exchange has completed; None before."""
        return self._username if self.complete else None

    async def step(self, message: bytes) -> bytes:
        """Client-first in, server-first out; then client-final in, server-final out."""
        stage = self._stage
        if stage in (_Stage.COMPLETE, _Stage.FAILED):
            raise AuthenticationError("Authentication failed: SCRAM exchange already finished")
        self._stage = _Stage.FAILED  # until this step succeeds
        if stage == _Stage.FIRST:
            response = await self._client_first(message)
            self._stage = _Stage.FINAL
        else:
            response = self._client_final(message)
            self._stage = _Stage.COMPLETE
        return response

    async def _client_first(self, message: bytes) -> bytes:
        text = _decode(message)
        # gs2-header: "n" (no channel binding) or "y" (client could but thinks we cannot), optional
        # authzid; "p=" asks for channel binding, which Floe does not offer.
        parts = text.split(",")
        if len(parts) < 4 or parts[0] not in ("n", "y"):
            raise AuthenticationError(_MALFORMED)
        authzid = unescape_username(_attribute(parts[1], "a")) if parts[1] else None
        self._gs2_header = f"{parts[0]},{parts[1]},"
        bare = parts[2:]
        username = unescape_username(_attribute(bare[0], "n"))
        client_nonce = _attribute(bare[1], "r")
        if not username or not _NONCE.match(client_nonce):
            raise AuthenticationError(_MALFORMED)
        _check_extensions(bare[2:])
        if authzid is not None and authzid != username:
            # Kafka: acting for another identity is not supported.
            raise AuthenticationError("Authentication failed: authorization id must match the username")
        server_nonce = self._nonce()
        if not _NONCE.match(server_nonce):
            raise ValueError("a SCRAM server nonce must be printable without commas")
        credential = await self._lookup(username, self.mechanism)
        self._known_user = credential is not None and credential.mechanism == self.mechanism
        if not self._known_user:
            credential = _unknown_user_credential(self.mechanism, username)
        assert credential is not None
        self._credential = credential
        self._claimed_username = username
        self._combined_nonce = client_nonce + server_nonce
        self._client_first_bare = ",".join(bare)
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={self._combined_nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode("ascii")

    def _client_final(self, message: bytes) -> bytes:
        text = _decode(message)
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise AuthenticationError(_MALFORMED)
        parts = without_proof.split(",")
        if len(parts) < 2:
            raise AuthenticationError(_MALFORMED)
        channel_binding = _b64decode(_attribute(parts[0], "c"))
        nonce = _attribute(parts[1], "r")
        _check_extensions(parts[2:])
        proof = _b64decode(proof_text)
        if not hmac.compare_digest(channel_binding, self._gs2_header.encode("utf-8")):
            raise AuthenticationError(_MALFORMED)
        # Kafka's check is "ends with": some librdkafka versions send the client nonce twice (their
        # nonce, then the combined one), and Kafka brokers accept that. The proof covers the message
        # as sent, so nothing can be slipped in before the combined nonce.
        if not nonce.endswith(self._combined_nonce):
            raise AuthenticationError("Authentication failed: nonce mismatch")
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self._hash_name, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise AuthenticationError(_FAILED)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        stored_key = hashlib.new(self._hash_name, client_key).digest()
        # Both comparisons run whatever the first says, and the unknown user's made-up key never
        # matches anything a client can compute, so the failure path is the same for both cases.
        proof_ok = hmac.compare_digest(stored_key, credential.stored_key)
        if not (proof_ok and self._known_user):
            raise AuthenticationError(_FAILED)
        self._username = self._claimed_username
        server_signature = _hmac(self._hash_name, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client's side of one SCRAM exchange (brokers use it toward their peers; tests toward brokers)."""

    def __init__(self, mechanism: str, username: str, password: str, *, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash_name = _hash_name(mechanism)
        self.username = username
        self._password = password
        self._client_nonce = nonce if nonce is not None else _new_nonce()
        self._client_first_bare = ""
        self._server_signature: bytes | None = None

    def first(self) -> bytes:
        self._client_first_bare = f"n={escape_username(self.username)},r={self._client_nonce}"
        return f"n,,{self._client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _decode(server_first)
        if text.startswith("e="):
            raise AuthenticationError(f"Authentication failed: {text[2:200]}")
        parts = text.split(",")
        if len(parts) < 3:
            raise AuthenticationError(_MALFORMED)
        nonce = _attribute(parts[0], "r")
        salt = _b64decode(_attribute(parts[1], "s"))
        iterations_text = _attribute(parts[2], "i")
        if not nonce.startswith(self._client_nonce) or len(nonce) == len(self._client_nonce) or not _NONCE.match(nonce):
            raise AuthenticationError("Authentication failed: server nonce does not extend ours")
        if not iterations_text.isdigit() or not salt:
            raise AuthenticationError(_MALFORMED)
        iterations = int(iterations_text)
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise AuthenticationError(f"Authentication failed: iteration count {iterations} out of range")
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        client_key = _hmac(self._hash_name, salted, b"Client Key")
        stored_key = hashlib.new(self._hash_name, client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode('ascii')},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_signature = _hmac(self._hash_name, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        self._server_signature = _hmac(self._hash_name, _hmac(self._hash_name, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode("ascii")

    def verify(self, server_final: bytes) -> None:
        """Check the server's signature: it proves the server holds this user's ServerKey."""
        text = _decode(server_final)
        if text.startswith("e="):
            raise AuthenticationError(f"Authentication failed: {text[2:200]}")
        if self._server_signature is None:
            raise AuthenticationError("Authentication failed: server-final before client-final")
        signature = _b64decode(_attribute(text.split(",")[0], "v"))
        if not hmac.compare_digest(signature, self._server_signature):
            raise AuthenticationError("Authentication failed: server signature does not match")
