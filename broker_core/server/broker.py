"""A broker node: the Kafka listener plus its duties towards the cluster.

Start-up: create the DynamoDB tables if missing, listen, register (getting a broker epoch), read the
metadata snapshot and open the replicas assigned here. Then, until stopped, four loops run:
heartbeat (re-registering with a new epoch if the controller fenced us), metadata poll (a consistent
read of the version item; a new version means a new snapshot), the controller role (try the lease,
and while holding it fence stalled brokers and elect leaders), and log retention.
pynamodb is synchronous, so every DynamoDB call runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol

from broker_core.metadata.controller import Controller, ControllerLease
from broker_core.metadata.errors import BrokerFencedError, MetadataError
from broker_core.metadata.state import BrokerState
from broker_core.metadata.store import MetadataStore

from .config import BROKER_DEFAULTS, BrokerConfig
from .handlers import RequestHandlers
from .listener import KafkaListener
from .replica_manager import MetadataImage, ReplicaManager
from .topic_configs import SOURCE_DEFAULT, SOURCE_STATIC_BROKER, ConfigEntry, effective

log = logging.getLogger(__name__)


class BrokerService(Protocol):
    """A subsystem hosted by the broker: it registers API handlers and runs background work."""

    def register(self, handlers: RequestHandlers) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.store = MetadataStore(config.aws)
        self.image = MetadataImage()
        self.replicas = ReplicaManager(config)
        self.handlers = RequestHandlers(self)
        self.listener = KafkaListener(
            self.handlers, config.host, config.port, config.get_int("socket.request.max.bytes")
        )
        self.cluster_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"floe:{config.aws.table_prefix}"))
        self.broker_epoch = -1
        session_ms = config.get_int("broker.session.timeout.ms")
        self.lease = ControllerLease(self.store, lease_duration_ms=session_ms)
        self.controller: Controller | None = None
        self._tasks: list[asyncio.Task] = []
        self._refresh_lock = asyncio.Lock()
        self.port = config.port
        self.services: list[BrokerService] = self._services()
        for service in self.services:
            service.register(self.handlers)

    def _services(self) -> list[BrokerService]:
        """Subsystems that add APIs and background work to the broker (consumer groups, tiering)."""
        return []

    # lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.to_thread(self.store.ensure_tables)
        self.port = await self.listener.start()
        self.broker_epoch = await asyncio.to_thread(
            self.store.register_broker, self.config.broker_id, self.config.advertised, self.port, self.config.rack
        )
        log.info("broker %d registered with epoch %d, listening on %s:%d",
                 self.config.broker_id, self.broker_epoch, self.config.host, self.port)
        # Try for the controller role before serving, so the first Metadata answer names a controller
        # (librdkafka waits minutes before asking again when it was told there is none).
        await self._controller_duty()
        await self.refresh_metadata()
        for service in self.services:
            await service.start()
        heartbeat_s = self.config.get_int("broker.heartbeat.interval.ms") / 1000
        self._tasks = [
            asyncio.create_task(self._every(heartbeat_s, self._heartbeat), name="heartbeat"),
            asyncio.create_task(self._every(self.config.get_int("metadata.poll.interval.ms") / 1000, self._poll_metadata),
                                name="metadata-poll"),
            asyncio.create_task(self._every(heartbeat_s, self._controller_duty), name="controller"),
            asyncio.create_task(self._every(self.config.get_int("log.retention.check.interval.ms") / 1000,
                                            self._enforce_retention), name="retention"),
        ]

    async def stop(self, *, controlled: bool = True) -> None:
        if controlled and self.config.get_bool("controlled.shutdown.enable") and self.broker_epoch >= 0:
            try:
                await asyncio.to_thread(self.store.set_broker_state, self.config.broker_id, self.broker_epoch,
                                        BrokerState.SHUTTING_DOWN)
                await asyncio.to_thread(self.lease.release)
            except MetadataError as exc:
                log.warning("controlled shutdown could not be recorded: %s", exc)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for service in reversed(self.services):
            await service.stop()
        await self.listener.stop()
        self.replicas.close()

    # cluster duties ----------------------------------------------------------------------------

    async def _every(self, interval_s: float, duty: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await duty()
            except asyncio.CancelledError:
                raise
            except MetadataError as exc:
                log.warning("%s: %s", duty.__name__, exc)
            except Exception:
                log.exception("%s failed", duty.__name__)
            await asyncio.sleep(interval_s)

    async def _heartbeat(self) -> None:
        try:
            await asyncio.to_thread(self.store.heartbeat_broker, self.config.broker_id, self.broker_epoch)
        except BrokerFencedError:
            log.warning("broker %d was fenced at epoch %d; registering again", self.config.broker_id, self.broker_epoch)
            self.broker_epoch = await asyncio.to_thread(
                self.store.register_broker, self.config.broker_id, self.config.advertised, self.port, self.config.rack
            )

    async def _poll_metadata(self) -> None:
        version = await asyncio.to_thread(self.store.metadata_version)
        if version != self.image.version:
            await self.refresh_metadata()

    async def refresh_metadata(self) -> None:
        async with self._refresh_lock:
            snapshot = await asyncio.to_thread(self.store.snapshot)
            lease = await asyncio.to_thread(self.lease.current)
            image = MetadataImage.from_snapshot(snapshot, controller_id=lease.holder if lease else -1)
            self.image = image
            self.replicas.apply(image)

    async def _controller_duty(self) -> None:
        epoch = await asyncio.to_thread(self.lease.try_acquire, self.config.broker_id)
        if epoch is None:
            self.controller = None
            return
        if self.controller is None or self.controller.controller_epoch != epoch:
            log.info("broker %d is the controller at epoch %d", self.config.broker_id, epoch)
            self.controller = Controller(
                self.store, controller_epoch=epoch,
                session_timeout_ms=self.config.get_int("broker.session.timeout.ms"),
            )
            # Clients address admin requests to the controller named in Metadata: make every
            # broker re-read the snapshot (and the lease) now that the holder changed.
            await asyncio.to_thread(self.store.bump_metadata_version)
        await asyncio.to_thread(self.controller.run_once)

    async def _enforce_retention(self) -> None:
        for partition in list(self.replicas.partitions.values()):
            partition.log.enforce_retention()

    # helpers for handlers ----------------------------------------------------------------------

    def min_insync_replicas(self, topic_configs: dict[str, str]) -> int:
        return int(effective(topic_configs, self.config, "min.insync.replicas"))

    def describe_broker_configs(self, keys: set[str] | None) -> list[ConfigEntry]:
        entries = []
        for name in sorted(set(BROKER_DEFAULTS) | set(self.config.overrides)):
            if keys is not None and name not in keys:
                continue
            source = SOURCE_STATIC_BROKER if name in self.config.overrides else SOURCE_DEFAULT
            entries.append(ConfigEntry(name, self.config.get(name), source))
        return entries
