"""pynamodb models of Floe's cluster metadata: four DynamoDB tables, named table prefix + base name.

``<prefix>cluster`` (hash key ``item``, string) holds the cluster-wide singletons, one item each:

- ``item="controller"``: the controller lease. ``holder`` (broker id, -1 once released),
  ``controller_epoch`` (bumped by every acquisition; the controller's fencing token),
  ``heartbeat`` (record version number, bumped by the holder), ``lease_duration_ms``.
- ``item="metadata_version"``: ``version``, bumped (atomic ADD) in the same transaction as every
  metadata change: topic create/delete/config change, partition leader/ISR change, broker
  register/state change. Brokers poll it with consistent reads and re-read when it moves.
- ``item="broker_epoch"``: ``last_epoch``, the counter broker epochs are drawn from, so a broker
  that registers again always gets a larger epoch than any it had before.
- ``item="producer_ids"``: ``next_start`` of the next free producer-id block and ``version``,
  updated only on a condition on ``version``.

``<prefix>brokers`` (hash key ``broker_id``, number): one registration per broker id, replaced on
re-registration; ``broker_epoch``, ``host``, ``port``, ``rack``, ``state``, ``heartbeat``
(counter bumped by the broker), ``registered_at_ms`` (wall clock, informational only).

``<prefix>topics`` (hash key ``name``, string): ``topic_id`` (UUID), ``num_partitions``,
``replication_factor``, ``configs`` (string map), ``config_version`` (bumped by every config
change, the condition of config updates), ``created_at_ms``.

``<prefix>partitions`` (hash key ``topic_id``, string; range key ``partition``, number):
``topic`` (name), ``replicas`` and ``isr`` (number lists), ``leader`` (-1 = none),
``leader_epoch``, ``partition_epoch`` (bumped by every update; the condition of updates). Keyed by
topic id rather than name so that partitions written by a losing concurrent create, or left by a
delete, never mix with those of a topic of the same name.

pynamodb keeps table name, region and endpoint on each model's class-level Meta, so
``bind_models(settings)`` builds a fresh set of subclasses per settings instead of mutating shared
classes; two stores with different prefixes or endpoints can live in one process. All tables use
on-demand billing.
"""

from __future__ import annotations

from dataclasses import dataclass

from pynamodb.attributes import (
    ListAttribute,
    MapAttribute,
    NumberAttribute,
    UnicodeAttribute,
)
from pynamodb.connection import Connection
from pynamodb.models import Model

from broker_core.aws import AwsSettings

CLUSTER_TABLE = "cluster"
BROKERS_TABLE = "brokers"
TOPICS_TABLE = "topics"
PARTITIONS_TABLE = "partitions"

CONTROLLER_ITEM = "controller"
METADATA_VERSION_ITEM = "metadata_version"
BROKER_EPOCH_ITEM = "broker_epoch"
PRODUCER_IDS_ITEM = "producer_ids"

_CONNECT_TIMEOUT_S = 5
_READ_TIMEOUT_S = 10
_MAX_RETRY_ATTEMPTS = 3


class ControllerLeaseItem(Model):
    item = UnicodeAttribute(hash_key=True)
    holder = NumberAttribute()
    controller_epoch = NumberAttribute()
    heartbeat = NumberAttribute()
    lease_duration_ms = NumberAttribute()


class MetadataVersionItem(Model):
    item = UnicodeAttribute(hash_key=True)
    version = NumberAttribute(default=0)


class BrokerEpochCounterItem(Model):
    item = UnicodeAttribute(hash_key=True)
    last_epoch = NumberAttribute(default=0)


class ProducerIdBlockItem(Model):
    item = UnicodeAttribute(hash_key=True)
    next_start = NumberAttribute()
    version = NumberAttribute()


class BrokerItem(Model):
    broker_id = NumberAttribute(hash_key=True)
    broker_epoch = NumberAttribute()
    host = UnicodeAttribute()
    port = NumberAttribute()
    rack = UnicodeAttribute(null=True)
    state = UnicodeAttribute()
    heartbeat = NumberAttribute()
    registered_at_ms = NumberAttribute()


class TopicItem(Model):
    name = UnicodeAttribute(hash_key=True)
    topic_id = UnicodeAttribute()
    num_partitions = NumberAttribute()
    replication_factor = NumberAttribute()
    configs = MapAttribute(default=dict)
    config_version = NumberAttribute(default=0)
    created_at_ms = NumberAttribute()


class PartitionItem(Model):
    topic_id = UnicodeAttribute(hash_key=True)
    partition = NumberAttribute(range_key=True)
    topic = UnicodeAttribute()
    replicas = ListAttribute(of=NumberAttribute)
    leader = NumberAttribute()
    leader_epoch = NumberAttribute()
    partition_epoch = NumberAttribute()
    isr = ListAttribute(of=NumberAttribute)


@dataclass(frozen=True)
class BoundModels:
    """The metadata models bound to one table prefix, region and endpoint, and their connection."""

    controller_lease: type[ControllerLeaseItem]
    metadata_version: type[MetadataVersionItem]
    broker_epoch_counter: type[BrokerEpochCounterItem]
    producer_id_block: type[ProducerIdBlockItem]
    broker: type[BrokerItem]
    topic: type[TopicItem]
    partition: type[PartitionItem]
    connection: Connection

    def all_models(self) -> tuple[type[Model], ...]:
        return (
            self.controller_lease,
            self.metadata_version,
            self.broker_epoch_counter,
            self.producer_id_block,
            self.broker,
            self.topic,
            self.partition,
        )

    def one_model_per_table(self) -> tuple[type[Model], ...]:
        """A model for each distinct table (the cluster singletons share one table)."""
        return (self.controller_lease, self.broker, self.topic, self.partition)


def _bind(base: type[Model], settings: AwsSettings, table: str) -> type:
    meta = type(
        "Meta",
        (),
        {
            "table_name": settings.table_prefix + table,
            "region": settings.region,
            "host": settings.endpoint_url,
            "billing_mode": "PAY_PER_REQUEST",
            "connect_timeout_seconds": _CONNECT_TIMEOUT_S,
            "read_timeout_seconds": _READ_TIMEOUT_S,
            "max_retry_attempts": _MAX_RETRY_ATTEMPTS,
        },
    )
    return type(base.__name__, (base,), {"Meta": meta, "__module__": base.__module__})


def bind_models(settings: AwsSettings) -> BoundModels:
    """Subclasses of every metadata model whose Meta points at ``settings``' tables.

    All of them, and transactions, go through one pynamodb Connection (one botocore client):
    by default each model class would build its own client, and creating one costs about 0.1 s
    of CPU, which a Lambda cold start or a test run would pay seven times over.
    """
    connection = Connection(
        region=settings.region,
        host=settings.endpoint_url,
        connect_timeout_seconds=_CONNECT_TIMEOUT_S,
        read_timeout_seconds=_READ_TIMEOUT_S,
        max_retry_attempts=_MAX_RETRY_ATTEMPTS,
    )
    models = BoundModels(
        controller_lease=_bind(ControllerLeaseItem, settings, CLUSTER_TABLE),
        metadata_version=_bind(MetadataVersionItem, settings, CLUSTER_TABLE),
        broker_epoch_counter=_bind(BrokerEpochCounterItem, settings, CLUSTER_TABLE),
        producer_id_block=_bind(ProducerIdBlockItem, settings, CLUSTER_TABLE),
        broker=_bind(BrokerItem, settings, BROKERS_TABLE),
        topic=_bind(TopicItem, settings, TOPICS_TABLE),
        partition=_bind(PartitionItem, settings, PARTITIONS_TABLE),
        connection=connection,
    )
    tables_added: set[str] = set()
    for model in models.all_models():
        # pynamodb builds a model's TableConnection lazily in _get_connection (pinned pynamodb 6.x);
        # its inner Connection has not created a client yet, so swapping it costs nothing.
        table_connection = model._get_connection()
        if model.Meta.table_name not in tables_added:
            connection.add_meta_table(table_connection.get_meta_table())
            tables_added.add(model.Meta.table_name)
        table_connection.connection = connection
    return models
