"""What a front-end container keeps between invocations: settings, an event loop, and cached clients.

A Lambda container runs one invocation at a time, and so does each worker process of the local
HTTP adapter. An invocation borrows a `Container` from its process's pool for its duration (the
pool holds one in practice; it keeps two overlapping calls from ever sharing one). A container holds an asyncio loop with a `FloeClient` (its broker connections
and metadata cache), DynamoDB and S3 clients, and short-lived caches of topic facts. None of it is
needed for correctness: every cache entry expires within ``METADATA_TTL_S``, a broker answer that
contradicts the cache drops it, and a broken client is replaced on the next call. Settings come
from the environment: ``FLOE_BOOTSTRAP_SERVERS`` plus the AWS settings of `AwsSettings.from_env`, and
``FLOE_CLIENT_PROPERTIES_FILE``: a properties file of librdkafka's client security settings
(`security.protocol`, `ssl.ca.location`, `sasl.mechanisms`, `sasl.username`, `sasl.password`,
`sasl.oauthbearer.config`) for brokers whose listeners are secured, or ``FLOE_CLIENT_PROPERTIES``: the
same settings as a JSON object, which is how template.yaml hands them to a deployed function (SASL
OAUTHBEARER with the function role's IAM token: the role is the brokers' principal, docs/security.md);
neither set, the front end connects PLAINTEXT.

Once a new container has served its first invocation, everything it will keep (imported modules,
pydantic schemas, clients, the kio message classes its first requests loaded) is moved out of the
garbage collector's sight with `gc.freeze`. Otherwise every few produce requests of a few hundred
records promote enough objects to start a full collection, which walks those ~180,000 long-lived
objects again: about 150 ms of CPU each time, the cause of the front end's p99 being ten times its
p50 (docs/performance.md, "HTTP front end: tail latency").
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import boto3
from botocore.config import Config

from broker_core.aws import AwsSettings
from broker_core.client import PLAINTEXT, ClientSecurity, FloeClient, NoBrokersError
from broker_core.client.security import read_properties
from broker_core.metadata.store import MetadataStore
from broker_core.security.acls import AclOperation, ResourceType
from broker_core.security.principal import ANONYMOUS
from functions.authorization import HttpAuthorizer, authorizer_from_env
from functions.quotas import HttpQuotas
from tiered_storage.manifest import ManifestStore

ENV_BOOTSTRAP_SERVERS = "FLOE_BOOTSTRAP_SERVERS"
ENV_CLIENT_PROPERTIES_FILE = "FLOE_CLIENT_PROPERTIES_FILE"
ENV_CLIENT_PROPERTIES = "FLOE_CLIENT_PROPERTIES"
IDEMPOTENCY_TABLE = "http_idempotency"
METADATA_TTL_S = 30.0
_S3_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, max_pool_connections=8)

_T = TypeVar("_T")


class ConfigurationError(RuntimeError):
    """A required setting is missing from the environment."""


@dataclass(frozen=True)
class FrontEndSettings:
    bootstrap_servers: str
    aws: AwsSettings
    security: ClientSecurity = PLAINTEXT

    @classmethod
    def from_env(cls) -> FrontEndSettings:
        servers = os.environ.get(ENV_BOOTSTRAP_SERVERS, "").strip()
        if not servers:
            raise ConfigurationError(f"{ENV_BOOTSTRAP_SERVERS} is not set: the front end needs a broker address")
        return cls(bootstrap_servers=servers, aws=AwsSettings.from_env(), security=_client_security())

    def table(self, base_name: str) -> str:
        return self.aws.table_prefix + base_name


def _client_security() -> ClientSecurity:
    """The broker client's security settings from FLOE_CLIENT_PROPERTIES_FILE or FLOE_CLIENT_PROPERTIES."""
    properties_file = os.environ.get(ENV_CLIENT_PROPERTIES_FILE, "").strip()
    inline = os.environ.get(ENV_CLIENT_PROPERTIES, "").strip()
    if properties_file and inline:
        raise ConfigurationError(f"set {ENV_CLIENT_PROPERTIES_FILE} or {ENV_CLIENT_PROPERTIES}, not both")
    if properties_file:
        return ClientSecurity.from_properties(read_properties(properties_file))
    if not inline:
        return PLAINTEXT
    try:
        properties = json.loads(inline)
    except ValueError as error:
        raise ConfigurationError(f"{ENV_CLIENT_PROPERTIES} is not JSON: {error}") from None
    if not isinstance(properties, dict) or not all(isinstance(v, str) for v in properties.values()):
        raise ConfigurationError(f"{ENV_CLIENT_PROPERTIES} must be a JSON object of string properties")
    return ClientSecurity.from_properties(properties)


@dataclass
class _Cached:
    value: Any
    expires_at: float


@dataclass
class Container:
    """One warm container's reusable state; used by one invocation at a time."""

    settings: FrontEndSettings
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _client: FloeClient | None = None
    _metadata: MetadataStore | None = None
    _manifest: ManifestStore | None = None
    _quotas: HttpQuotas | None = None
    _authorizer: HttpAuthorizer | None = None
    _s3: Any = None
    _cache: dict[tuple[str, ...], _Cached] = field(default_factory=dict)

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return self.loop.run_until_complete(coroutine)

    async def client(self) -> FloeClient:
        if self._client is None:
            client = FloeClient(self.settings.bootstrap_servers, client_id="floe-http", request_timeout_s=25.0,
                                security=self.settings.security)
            await client.start()
            self._client = client
        return self._client

    def call(self, work: Callable[[FloeClient], Awaitable[_T]]) -> _T:
        """Run ``work(client)`` (a coroutine function) on this container's loop and client.

        A client that could reach no broker is dropped, so the next call starts afresh from the
        bootstrap servers.
        """
        async def with_client() -> _T:
            client = await self.client()
            try:
                return await work(client)
            except NoBrokersError:
                self._client = None
                await client.close()
                raise

        return self.run(with_client())

    @property
    def metadata(self) -> MetadataStore:
        if self._metadata is None:
            self._metadata = MetadataStore(self.settings.aws)
        return self._metadata

    @property
    def manifest(self) -> ManifestStore:
        if self._manifest is None:
            self._manifest = ManifestStore(self.settings.aws)
        return self._manifest

    @property
    def quotas(self) -> HttpQuotas:
        if self._quotas is None:
            self._quotas = HttpQuotas(self.settings.aws)
        return self._quotas

    @property
    def authorizer(self) -> HttpAuthorizer:
        if self._authorizer is None:
            self._authorizer = HttpAuthorizer(self.settings.aws, authorizer_from_env())
        return self._authorizer

    @property
    def s3(self) -> Any:
        if self._s3 is None:
            self._s3 = boto3.session.Session().client("s3", config=_S3_CONFIG, **self.settings.aws.boto3_kwargs())
        return self._s3

    def recall(self, key: tuple[str, ...]) -> Any:
        """A value remembered less than its time to live ago, else None."""
        entry = self._cache.get(key)
        if entry is None or entry.expires_at <= time.monotonic():
            return None
        return entry.value

    def remember(self, key: tuple[str, ...], value: Any, ttl_s: float = METADATA_TTL_S) -> None:
        self._cache[key] = _Cached(value, time.monotonic() + ttl_s)

    def forget(self, key: tuple[str, ...]) -> None:
        self._cache.pop(key, None)


_settings: FrontEndSettings | None = None
_settings_lock = threading.Lock()
_idle: queue.SimpleQueue[Container] = queue.SimpleQueue()
_current = threading.local()


def settings() -> FrontEndSettings:
    global _settings
    with _settings_lock:
        if _settings is None:
            _settings = FrontEndSettings.from_env()
        return _settings


@contextmanager
def borrowed_container(principal: str = ANONYMOUS, host: str = "") -> Iterator[Container]:
    """A container for the length of one invocation (an idle one if there is one), made on behalf
    of ``principal`` (the caller, `functions.caller`) from ``host`` (its source address)."""
    warm = True
    try:
        container = _idle.get_nowait()
    except queue.Empty:
        container = Container(settings())
        warm = False
    _current.container = container
    _current.principal = principal
    _current.host = host
    try:
        yield container
    finally:
        _current.container = None
        _current.principal = None
        if not warm:
            gc.freeze()  # what the container keeps is made now; see the module doc
        _idle.put(container)


def current() -> Container:
    """The container of the invocation running on this thread."""
    container = getattr(_current, "container", None)
    if container is None:
        raise RuntimeError("no invocation is running on this thread")
    return container


def current_principal() -> str:
    """The principal of the invocation running on this thread."""
    principal = getattr(_current, "principal", None)
    if principal is None:
        raise RuntimeError("no invocation is running on this thread")
    return principal


def allows(operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    """Whether the ACLs let the current invocation's caller perform ``operation`` on the resource."""
    return current().authorizer.allows(current_principal(), getattr(_current, "host", ""), operation,
                                       resource_type, name)


def require(operation: AclOperation, resource_type: ResourceType, name: str) -> None:
    """ApiError 403 unless the ACLs let the current invocation's caller perform ``operation`` on the resource."""
    current().authorizer.require(current_principal(), getattr(_current, "host", ""), operation, resource_type, name)
