"""Builds a broker and the pieces around it, and joins them: the one place the broker is wired.

Each piece (request handlers and listener, replica fetchers, ISR manager, group coordinator, tiering
service) is handed the `Broker` as its `BrokerContext` and nothing else; the handlers get the group
APIs from the coordinator and the tiering service's reader as their `RemoteReads`. Nothing else in the
broker imports the services, so the import graph has no circle through `Broker`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from broker_core.groups.coordinator import GroupCoordinator
from broker_core.metadata.errors import MetadataError
from broker_core.quotas.rates import WindowConfig
from broker_core.quotas.service import QuotaService
from broker_core.replication.fetcher import ReplicaFetcherManager
from broker_core.replication.isr import IsrManager
from broker_core.security.credentials import ScramCredentialAdmin, ScramCredentialStore
from tiered_storage.service import TieringService

from .broker import Broker, BrokerParts
from .config import BrokerConfig
from .handlers import RequestHandlers
from .listener import KafkaListener, ListenerLimits
from .producer_ids import ProducerIdAllocator

log = logging.getLogger(__name__)


def build_broker(config: BrokerConfig) -> Broker:
    """A broker with every piece in place, ready for `Broker.start`."""
    broker = Broker(config)
    groups = GroupCoordinator(broker)
    tiering = TieringService(broker)
    quotas = QuotaService(
        config.aws,
        WindowConfig(config.get_int("quota.window.num"), config.get_int("quota.window.size.seconds")),
        WindowConfig(config.get_int("controller.quota.window.num"), config.get_int("controller.quota.window.size.seconds")),
    )
    handlers = RequestHandlers(broker, ProducerIdAllocator(broker.store), quotas, remote_reads=tiering.reader)
    credentials = ScramCredentialAdmin(
        ScramCredentialStore(config.aws, cache_ttl_s=config.get_int("floe.scram.credential.cache.ms") / 1000),
        announce_metadata_change(broker),
    )
    for api_key, handler in {**groups.api_handlers(), **credentials.api_handlers()}.items():
        handlers.register(api_key, handler)
    limits = ListenerLimits.from_settings(config.get_int, config.get)
    listener = KafkaListener(handlers, config.host, config.port, limits)
    broker.host(BrokerParts(
        listener=listener,
        fetchers=ReplicaFetcherManager(broker),
        isr=IsrManager(broker),
        services=(quotas, credentials, groups, tiering),
        followers=(quotas, credentials),
    ))
    return broker


def announce_metadata_change(broker: Broker) -> Callable[[], Awaitable[None]]:
    """What a writer of state that brokers cache beside the metadata (SCRAM credentials) calls after a
    change: bump the metadata version, so every broker re-reads within one poll, and refresh this one now."""

    async def announce() -> None:
        try:
            await asyncio.to_thread(broker.store.bump_metadata_version)
        except MetadataError as exc:
            # Stored, but other brokers learn of it only with the next metadata change.
            log.warning("cached cluster state changed but the metadata version was not bumped: %s", exc)
        await broker.refresh_metadata()

    return announce
