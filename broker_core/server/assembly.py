"""Builds a broker and the pieces around it, and joins them: the one place the broker is wired.

Each piece (request handlers and listener, replica fetchers, ISR manager, group and transaction
coordinators, tiering service) is handed the `Broker` as its `BrokerContext` and nothing else; the handlers get the group
APIs from the coordinator and the tiering service's reader as their `RemoteReads`. Nothing else in the
broker imports the services, so the import graph has no circle through `Broker`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from broker_core.groups.coordinator import GroupCoordinator
from broker_core.metadata.errors import MetadataError
from broker_core.metrics.broker import BrokerMetrics
from broker_core.protocol.api_keys import ApiKey
from broker_core.quotas.rates import WindowConfig
from broker_core.quotas.service import QuotaService
from broker_core.replication.fetcher import ReplicaFetcherManager
from broker_core.replication.isr import IsrManager
from broker_core.security.acl_service import AclService
from broker_core.security.credentials import ScramCredentialAdmin, ScramCredentialStore
from broker_core.security.iam import iam_verifier_from_settings, parse_oauthbearer
from broker_core.security.scram import CredentialLookup
from broker_core.security.tls import server_context
from broker_core.settings import ConfigError
from broker_core.transactions.coordinator import TRANSACTION_KEY_TYPE, TransactionCoordinator
from broker_core.transactions.marker_routing import route_write_txn_markers
from tiered_storage.service import TieringService

from .acl_apis import AclApis
from .admin_configs import ConfigApis
from .admin_describe import ClusterDescriptions
from .admin_leaders import LeaderElections
from .admin_partitions import PartitionCreation
from .admin_reassign import ReassignmentApis
from .admin_records import RecordDeletion
from .authorization import guard_credential_apis, guard_write_txn_markers
from .broker import Broker, BrokerParts
from .config import BrokerConfig
from .handlers import RequestHandlers
from .listener import KafkaListener, KafkaListeners, ListenerLimits, ListenerSecurity
from .listeners import ListenerSpec
from .log_cleaner import LogCleanerService
from .metrics_collector import BrokerStateCollector
from .producer_ids import ProducerIdAllocator
from .sasl import SaslConfig, sasl_on_a_listener_without_it
from .txn_verification import TransactionVerifier

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
        observer=broker.metrics.quota_recorded,
    )
    producer_ids = ProducerIdAllocator(broker.store)
    transactions = TransactionCoordinator(broker, producer_ids, groups.offsets)
    # KIP-890 part 1: leaders ask the transaction coordinator before a transaction starts on a partition.
    verifier = (TransactionVerifier(broker, transactions.coordinator_of)
                if config.get_bool("transaction.partition.verification.enable") else None)
    handlers = RequestHandlers(broker, producer_ids, quotas, remote_reads=tiering.reader, verifier=verifier)
    store = ScramCredentialStore(config.aws, cache_ttl_s=config.get_int("floe.scram.credential.cache.ms") / 1000)
    credentials = ScramCredentialAdmin(store, announce_metadata_change(broker))
    acls = AclService(config.aws, broker.authorizer)
    apis = {**groups.api_handlers(), **transactions.api_handlers(),
            **guard_credential_apis(credentials.api_handlers(), broker.authorizer),
            **AclApis(broker, acls).api_handlers(), **ConfigApis(broker).api_handlers(),
            **RecordDeletion(broker, tiering.reader).api_handlers(), **ClusterDescriptions(broker).api_handlers(),
            **LeaderElections(broker).api_handlers(), **ReassignmentApis(broker).api_handlers(),
            **PartitionCreation(broker, quotas).api_handlers()}
    for api_key, handler in apis.items():
        handlers.register(api_key, handler)
    handlers.set_transactions(transactions.init_producer_id)
    handlers.register(ApiKey.WRITE_TXN_MARKERS, guard_write_txn_markers(
        route_write_txn_markers(groups.offsets, handlers.table.get(ApiKey.WRITE_TXN_MARKERS)), broker))
    groups.add_locator(TRANSACTION_KEY_TYPE, transactions.locate)
    listeners = build_listeners(config, handlers, store.get, broker.metrics)
    broker.metrics.add_collector(BrokerStateCollector(broker, listeners))
    broker.host(BrokerParts(
        listener=listeners,
        fetchers=ReplicaFetcherManager(broker),
        isr=IsrManager(broker),
        services=(quotas, credentials, acls, groups, transactions, tiering, LogCleanerService(broker),
                  *([verifier] if verifier is not None else [])),
        followers=(quotas, credentials, acls),
    ))
    return broker


def build_listeners(config: BrokerConfig, handlers: RequestHandlers, lookup: CredentialLookup,
                    metrics: BrokerMetrics | None = None) -> KafkaListeners:
    """One KafkaListener per entry of `listeners`, each secured as its protocol says; SASL listeners
    check passwords against ``lookup`` (the SCRAM credential store)."""
    for api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
        handlers.register(api_key, sasl_on_a_listener_without_it)
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
            sasl=sasl_config(spec, setting, lookup, config.aws.region) if spec.security_protocol.sasl else None,
        )
        listener = KafkaListener(handlers, spec.host, spec.port, limits, security, shared_with=first, metrics=metrics)
        first = first or listener
        built[spec.name] = (listener, spec.advertised_host, spec.advertised_port)
    return KafkaListeners(built)


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


def sasl_config(spec: ListenerSpec, setting: Callable[[str], str], lookup: CredentialLookup,
                region: str = "us-east-1") -> SaslConfig:
    """A SASL listener's mechanisms and checks: SCRAM and PLAIN against ``lookup``, OAUTHBEARER against
    STS (`floe.sasl.oauthbearer.iam.*`)."""
    mechanisms = tuple(m.strip().upper() for m in setting("sasl.enabled.mechanisms").split(",") if m.strip())
    if "PLAIN" in mechanisms and not spec.security_protocol.tls:
        raise ConfigError(f"listener {spec.name}: PLAIN sends passwords as they are, so it is enabled on SASL_SSL "
                          "listeners only")
    if "GSSAPI" in mechanisms:
        raise ConfigError(f"listener {spec.name}: GSSAPI (Kerberos) is not supported; set sasl.enabled.mechanisms "
                          "to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
    verify_token = None
    if "OAUTHBEARER" in mechanisms:
        if not setting("floe.sasl.oauthbearer.iam.audience"):
            raise ConfigError(f"listener {spec.name}: OAUTHBEARER needs floe.sasl.oauthbearer.iam.audience")
        verifier = iam_verifier_from_settings(setting, region)

        async def verify_token(message: bytes) -> tuple[str, float]:
            return await verifier.verify_until(parse_oauthbearer(message))

    return SaslConfig(mechanisms, lookup, reauth_ms=int(setting("connections.max.reauth.ms")),
                      max_receive_bytes=int(setting("sasl.server.max.receive.size")), verify_token=verify_token)
