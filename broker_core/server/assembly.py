"""Builds a broker and the pieces around it, and joins them: the one place the broker is wired.

Each piece (request handlers and listener, replica fetchers, ISR manager, group coordinator, tiering
service) is handed the `Broker` as its `BrokerContext` and nothing else; the handlers get the group
APIs from the coordinator and the tiering service's reader as their `RemoteReads`. Nothing else in the
broker imports the services, so the import graph has no circle through `Broker`.
"""

from __future__ import annotations

from broker_core.groups.coordinator import GroupCoordinator
from broker_core.quotas.rates import WindowConfig
from broker_core.quotas.service import QuotaService
from broker_core.replication.fetcher import ReplicaFetcherManager
from broker_core.replication.isr import IsrManager
from broker_core.security.tls import server_context
from tiered_storage.service import TieringService

from .broker import Broker, BrokerParts
from .config import BrokerConfig
from .handlers import RequestHandlers
from .listener import KafkaListener, KafkaListeners, ListenerLimits, ListenerSecurity
from .producer_ids import ProducerIdAllocator


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
    for api_key, handler in groups.api_handlers().items():
        handlers.register(api_key, handler)
    broker.host(BrokerParts(
        listener=build_listeners(config, handlers),
        fetchers=ReplicaFetcherManager(broker),
        isr=IsrManager(broker),
        services=(quotas, groups, tiering),
        followers=(quotas,),
    ))
    return broker


def build_listeners(config: BrokerConfig, handlers: RequestHandlers) -> KafkaListeners:
    """One KafkaListener per entry of `listeners`, each secured as its protocol says."""
    limits = ListenerLimits.from_settings(config.get_int, config.get)
    built: dict[str, tuple[KafkaListener, str, int | None]] = {}
    first: KafkaListener | None = None
    for spec in config.listeners.specs:
        def setting(name: str, listener: str = spec.name) -> str:
            return config.listeners.setting(listener, name)

        security = ListenerSecurity(
            name=spec.name, protocol=spec.security_protocol,
            ssl_context=server_context(setting) if spec.security_protocol.tls else None,
            handshake_timeout_s=int(setting("ssl.handshake.timeout.ms")) / 1000,
        )
        listener = KafkaListener(handlers, spec.host, spec.port, limits, security, shared_with=first)
        first = first or listener
        built[spec.name] = (listener, spec.advertised_host, spec.advertised_port)
    return KafkaListeners(built)
