"""Builds a broker and the pieces around it, and joins them: the one place the broker is wired.

Each piece (request handlers and listener, replica fetchers, ISR manager, group and transaction
coordinators, tiering service) is handed the `Broker` as its `BrokerContext` and nothing else; the handlers get the group
APIs from the coordinator and the tiering service's reader as their `RemoteReads`. Nothing else in the
broker imports the services, so the import graph has no circle through `Broker`.
"""

from __future__ import annotations

from broker_core.groups.coordinator import GroupCoordinator
from broker_core.protocol.api_keys import ApiKey
from broker_core.quotas.rates import WindowConfig
from broker_core.quotas.service import QuotaService
from broker_core.replication.fetcher import ReplicaFetcherManager
from broker_core.replication.isr import IsrManager
from broker_core.transactions.coordinator import TRANSACTION_KEY_TYPE, TransactionCoordinator
from broker_core.transactions.marker_routing import route_write_txn_markers
from tiered_storage.service import TieringService

from .broker import Broker, BrokerParts
from .config import BrokerConfig
from .handlers import RequestHandlers
from .listener import KafkaListener, ListenerLimits
from .producer_ids import ProducerIdAllocator
from .txn_verification import TransactionVerifier


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
    producer_ids = ProducerIdAllocator(broker.store)
    transactions = TransactionCoordinator(broker, producer_ids, groups.offsets)
    # KIP-890 part 1: leaders ask the transaction coordinator before a transaction starts on a partition.
    verifier = TransactionVerifier(broker) if config.get_bool("transaction.partition.verification.enable") else None
    handlers = RequestHandlers(broker, producer_ids, quotas, remote_reads=tiering.reader, verifier=verifier)
    for api_key, handler in (groups.api_handlers() | transactions.api_handlers()).items():
        handlers.register(api_key, handler)
    handlers.set_transactions(transactions.init_producer_id)
    handlers.register(ApiKey.WRITE_TXN_MARKERS,
                      route_write_txn_markers(groups.offsets, handlers.table.get(ApiKey.WRITE_TXN_MARKERS)))
    groups.add_locator(TRANSACTION_KEY_TYPE, transactions.locate)
    limits = ListenerLimits.from_settings(config.get_int, config.get)
    listener = KafkaListener(handlers, config.host, config.port, limits)
    broker.host(BrokerParts(
        listener=listener,
        fetchers=ReplicaFetcherManager(broker),
        isr=IsrManager(broker),
        services=(quotas, groups, transactions, tiering, *([verifier] if verifier is not None else [])),
        followers=(quotas,),
    ))
    return broker
