"""SCRAM credentials in DynamoDB, the brokers' cache of them, and APIs 50/51 that manage them.

Layout of ``<prefix>scram_credentials``: hash key ``user`` (the username as it is), range key
``mechanism`` ("SCRAM-SHA-256" or "SCRAM-SHA-512"), and ``salt``, ``stored_key``, ``server_key``
(binary) and ``iterations``: what RFC 5802 calls the server's credential, never the password nor the
salted password. Every change of one user (the upsertions and deletions of one
AlterUserScramCredentials entry) is one DynamoDB transaction, so a user's credentials change all at
once or not at all; a deletion is conditional on the credential existing (RESOURCE_NOT_FOUND otherwise).

Brokers read a credential when a client authenticates (`ScramCredentialStore.get`, a
``scram.CredentialLookup``) and keep the answer, found or not, for at most ``cache_ttl_s`` so a burst
of handshakes does not become a burst of DynamoDB reads. AlterUserScramCredentials bumps the
cluster's metadata version after a change, and every broker empties this cache when it applies new
metadata (`reload`, a metadata follower like the client quotas), so a deleted or changed credential
stops working on every broker within one metadata poll. The TTL bounds what a change written
around the brokers (straight to the table) can leave behind.

`ScramCredentialAdmin` holds the handlers of DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51) with Kafka's per-user errors. The store's DynamoDB calls are
synchronous (pynamodb) and run in worker threads; `get`, `reload` and the handlers run on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from pynamodb.attributes import BinaryAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from broker_core.aws import AwsSettings
from broker_core.dynamodb_tables import (
    CONDITION_FAILED,
    bind_model,
    ensure_tables,
    failures_as,
    share_connection,
    transact,
)
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, respond

from .scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramCredential,
    credential_from_salted_password,
)

log = logging.getLogger(__name__)

SCRAM_TABLE = "scram_credentials"
# Kafka's ScramMechanism type codes, as APIs 50/51 carry them.
MECHANISM_BY_CODE = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
CODE_BY_MECHANISM = {name: code for code, name in MECHANISM_BY_CODE.items()}
DEFAULT_CACHE_TTL_S = 60.0
CACHE_MAX_ENTRIES = 10_000
# DynamoDB keys hold at most 2048 bytes; a username is also a principal name, so keep it short.
MAX_USERNAME_BYTES = 1024
MIN_CLIENT_SALT_BYTES = 16
MAX_CLIENT_SALT_BYTES = 1024


class CredentialStoreError(Exception):
    """Base of the credential store's errors."""


class CredentialStoreUnavailableError(CredentialStoreError):
    """DynamoDB could not be reached, or writers kept conflicting past the retries."""


class CredentialNotFoundError(CredentialStoreError):
    """A deletion named a credential that does not exist; nothing of that user's change was written."""


_unavailable_on_error = failures_as(CredentialStoreUnavailableError, CredentialStoreError)


class ScramCredentialItem(Model):
    user = UnicodeAttribute(hash_key=True)
    mechanism = UnicodeAttribute(range_key=True)
    salt = BinaryAttribute(legacy_encoding=False)
    stored_key = BinaryAttribute(legacy_encoding=False)
    server_key = BinaryAttribute(legacy_encoding=False)
    iterations = NumberAttribute()


def _credential(item: ScramCredentialItem) -> ScramCredential:
    return ScramCredential(mechanism=item.mechanism, salt=bytes(item.salt), stored_key=bytes(item.stored_key),
                           server_key=bytes(item.server_key), iterations=int(item.iterations))


@dataclass(frozen=True)
class UserChange:
    """What one AlterUserScramCredentials entry does to one user: credentials to write, mechanisms to delete."""

    user: str
    upsertions: tuple[ScramCredential, ...]
    deletions: tuple[str, ...]


class ScramCredentialStore:
    """The ``scram_credentials`` table and a broker's short cache of it (see the module doc)."""

    def __init__(self, settings: AwsSettings, *, cache_ttl_s: float = DEFAULT_CACHE_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.model: type[ScramCredentialItem] = bind_model(ScramCredentialItem, settings, SCRAM_TABLE)
        self._connection = share_connection([self.model], settings)
        self._cache_ttl_s = cache_ttl_s
        self._clock = clock
        self._cache: OrderedDict[tuple[str, str], tuple[float, ScramCredential | None]] = OrderedDict()
        self._generation = 0

    @_unavailable_on_error
    def ensure_table(self) -> None:
        """Create the table if missing and wait until it is ACTIVE; safe from several brokers at once."""
        ensure_tables([self.model], CredentialStoreUnavailableError)

    @_unavailable_on_error
    def read(self, username: str, mechanism: str) -> ScramCredential | None:
        """One credential, read consistently; None when the user has none for ``mechanism``."""
        if mechanism not in SCRAM_MECHANISMS or not _storable_username(username):
            return None
        try:
            return _credential(self.model.get(username, mechanism, consistent_read=True))
        except self.model.DoesNotExist:
            return None

    async def get(self, username: str, mechanism: str) -> ScramCredential | None:
        """`read` through the cache: what SCRAM and PLAIN authentication look credentials up with."""
        key = (username, mechanism)
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < self._cache_ttl_s:
            return cached[1]
        generation = self._generation
        credential = await asyncio.to_thread(self.read, username, mechanism)
        if generation == self._generation:  # not emptied (by a change) while we read
            self._cache[key] = (now, credential)
            self._cache.move_to_end(key)
            while len(self._cache) > CACHE_MAX_ENTRIES:
                self._cache.popitem(last=False)
        return credential

    def forget_cached(self) -> None:
        """Empty the cache: the next lookup of every user reads DynamoDB again."""
        self._cache.clear()
        self._generation += 1

    async def reload(self) -> None:
        """Called with every metadata change (a metadata follower): credentials may have changed."""
        self.forget_cached()

    @_unavailable_on_error
    def describe(self, users: Iterable[str] | None) -> dict[str, list[tuple[str, int]]]:
        """(mechanism, iterations) of each user that has credentials: all users (a consistent Scan)
        for None, else those named (a Query each); users without credentials are left out."""
        found: dict[str, list[tuple[str, int]]] = {}
        if users is None:
            items: Iterable[ScramCredentialItem] = self.model.scan(consistent_read=True)
        else:
            items = (item for user in users if _storable_username(user)
                     for item in self.model.query(user, consistent_read=True))
        for item in items:
            found.setdefault(item.user, []).append((item.mechanism, int(item.iterations)))
        return {user: sorted(infos) for user, infos in found.items()}

    @_unavailable_on_error
    def alter(self, change: UserChange) -> None:
        """Write one user's upsertions and deletions in one transaction; CredentialNotFoundError (and
        nothing written) if a deletion names a credential that does not exist."""
        model = self.model

        def build(transaction: TransactWrite) -> None:
            for credential in change.upsertions:
                transaction.save(model(change.user, credential.mechanism, salt=credential.salt,
                                       stored_key=credential.stored_key, server_key=credential.server_key,
                                       iterations=credential.iterations))
            for mechanism in change.deletions:
                transaction.delete(model(change.user, mechanism), condition=model.user.exists())

        codes = transact(self._connection, build, lambda attempts: CredentialStoreUnavailableError(
            f"credentials of one user kept conflicting during {attempts} attempts"))
        self.forget_cached()
        if codes is not None and CONDITION_FAILED in codes:
            raise CredentialNotFoundError("Attempt to delete a user credential that does not exist")


def _storable_username(username: str) -> bool:
    return bool(username) and len(username.encode("utf-8")) <= MAX_USERNAME_BYTES


class ScramCredentialAdmin:
    """DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), over one store.

    ``announce_change`` runs after a successful change: the assembly bumps the metadata version
    with it, so every broker empties its credential cache within one metadata poll.
    """

    def __init__(self, store: ScramCredentialStore, announce_change: Callable[[], Awaitable[None]]) -> None:
        self.store = store
        self._announce_change = announce_change

    async def start(self) -> None:
        await asyncio.to_thread(self.store.ensure_table)

    async def stop(self) -> None:
        return None

    async def reload(self) -> None:
        await self.store.reload()

    def api_handlers(self) -> dict[int, Callable[[Request], Awaitable[Any]]]:
        return {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_user_scram_credentials,
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials}

    async def describe_user_scram_credentials(self, request: Request) -> Any:
        """Every user with credentials when the request names none (null or empty), else the named
        users, each with RESOURCE_NOT_FOUND when it has none and DUPLICATE_RESOURCE when named twice."""
        named = None if not request.body.users else [user.name for user in request.body.users]
        response: dict[str, Any] = {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.none,
                                    "error_message": None, "results": []}
        unique = None if named is None else list(dict.fromkeys(named))
        try:
            found = await asyncio.to_thread(self.store.describe, unique)
        except CredentialStoreError as exc:
            log.warning("DescribeUserScramCredentials failed: %s", exc)
            response["error_code"] = ErrorCode.request_timed_out
            response["error_message"] = "the credential store could not be read"
            return respond(request, response)
        results = []
        if named is None:
            for user in sorted(found):
                results.append(_described(user, found[user]))
        else:
            duplicates = {user for user in named if named.count(user) > 1}
            for user in unique or ():
                if user in duplicates:
                    results.append(_user_error(user, ErrorCode.duplicate_resource,
                                               "Cannot describe SCRAM credentials for the same user twice in a single request"))
                elif user not in found:
                    results.append(_user_error(user, ErrorCode.resource_not_found,
                                               f"Attempt to describe a user credential that does not exist: {user}"))
                else:
                    results.append(_described(user, found[user]))
        response["results"] = results
        return respond(request, response)

    async def alter_user_scram_credentials(self, request: Request) -> Any:
        """Upsert and delete credentials; one result per user, each user's change all or nothing."""
        body = request.body
        entries = [(d.name, d.mechanism, None) for d in body.deletions] + [(u.name, u.mechanism, u) for u in body.upsertions]
        outcome = _plan(entries)
        changed = False
        results = []
        for user, planned in outcome.items():
            if isinstance(planned, UserChange):
                try:
                    await asyncio.to_thread(self.store.alter, planned)
                    changed = True
                    planned = (ErrorCode.none, None)
                except CredentialNotFoundError as exc:
                    planned = (ErrorCode.resource_not_found, str(exc))
                except CredentialStoreError as exc:
                    log.warning("AlterUserScramCredentials for one user failed: %s", exc)
                    planned = (ErrorCode.request_timed_out, "the credential store could not be written")
            code, message = planned
            results.append({"user": user, "error_code": code, "error_message": message})
        if changed:
            await self._announce_change()
        return respond(request, {"throttle_time": NO_THROTTLE, "results": results})


def _described(user: str, infos: Sequence[tuple[str, int]]) -> dict[str, Any]:
    return {"user": user, "error_code": ErrorCode.none, "error_message": None,
            "credential_infos": [{"mechanism": CODE_BY_MECHANISM[mechanism], "iterations": iterations}
                                 for mechanism, iterations in infos if mechanism in CODE_BY_MECHANISM]}


def _user_error(user: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}


def _plan(entries: Sequence[tuple[str, int, Any]]) -> Mapping[str, UserChange | tuple[ErrorCode, str]]:
    """Check every entry as Kafka does; per user (in order of first mention), the change to write or
    the error that refuses all of that user's entries."""
    by_user: dict[str, list[tuple[int, Any]]] = {}
    for user, code, upsertion in entries:
        by_user.setdefault(user, []).append((code, upsertion))
    outcome: dict[str, UserChange | tuple[ErrorCode, str]] = {}
    for user, alterations in by_user.items():
        codes = [code for code, _ in alterations]
        if len(set(codes)) != len(codes):
            outcome[user] = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")
            continue
        error = _user_error_of(user, alterations)
        if error is not None:
            outcome[user] = error
            continue
        upsertions, deletions = [], []
        try:
            for code, upsertion in alterations:
                mechanism = MECHANISM_BY_CODE[code]
                if upsertion is None:
                    deletions.append(mechanism)
                else:
                    upsertions.append(credential_from_salted_password(
                        mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations))
        except ValueError:
            outcome[user] = (ErrorCode.unacceptable_credential, "The salted password does not fit the mechanism")
            continue
        outcome[user] = UserChange(user, tuple(upsertions), tuple(deletions))
    return outcome


def _user_error_of(user: str, alterations: Sequence[tuple[int, Any]]) -> tuple[ErrorCode, str] | None:
    if not user:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if len(user.encode("utf-8")) > MAX_USERNAME_BYTES:
        return ErrorCode.unacceptable_credential, f"Username must be at most {MAX_USERNAME_BYTES} bytes"
    for code, upsertion in alterations:
        if code not in MECHANISM_BY_CODE:
            return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
        if upsertion is None:
            continue
        if upsertion.iterations < MIN_ITERATIONS:
            return ErrorCode.unacceptable_credential, "Too few iterations"
        if upsertion.iterations > MAX_ITERATIONS:
            return ErrorCode.unacceptable_credential, "Too many iterations"
        if not MIN_CLIENT_SALT_BYTES <= len(upsertion.salt) <= MAX_CLIENT_SALT_BYTES:
            return (ErrorCode.unacceptable_credential,
                    f"The salt must be {MIN_CLIENT_SALT_BYTES} to {MAX_CLIENT_SALT_BYTES} bytes")
    return None
