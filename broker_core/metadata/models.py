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
- ``item="change#<version>"``: the metadata change sequence. A change that touches only
  partitions (leader elections, ISR changes) sets ``version`` to exactly ``<version>`` (conditional
  on the version it read) and writes this item in the same transaction: ``partitions`` lists the
  ``<topic id>:<partition>`` keys it changed. A broker whose image is at version w and that sees
  version v reads change#w+1..v and then only those partitions; a missing change item means some
  other kind of change (topic, broker, config) bumped the version, and the broker reads everything.
  ``states`` (when the writer knew them: every partition batch does) holds the new state of each
  of those partitions, as written in the same transaction (JSON, `encode_partition_states`), so a
  broker applies the delta from the change items alone, without reading the partitions.
  Topic creation, CreatePartitions, topic config changes and topic deletion are numbered the same
  way: ``topics`` (JSON, `encode_topic_changes`) holds the topics created or changed, each with the
  replica lists of the partitions it adds (a new partition's whole state follows from them: leader
  the first replica, ISR every replica, epochs 0), and the ids of topics deleted; ``partitions``
  is then empty. A change too large for one item (400 KB: a topic of tens of thousands of
  partitions) writes no change item and readers read everything.
  ``expires_at`` (epoch seconds) is for DynamoDB TTL to clean old items up; correctness never
  depends on it, since a reader that finds an item gone reads everything.
- ``item="producer_ids"``: ``next_start`` of the next free producer-id block and ``version``,
  updated only on a condition on ``version``.
- ``item="broker_configs"``: the dynamic broker configs (IncrementalAlterConfigs on BROKER resources):
  ``configs`` maps ``<default>`` (the cluster-wide default) or a broker id to its settings, and
  ``version`` is the condition of every change.
- ``item="controller_incarnations"``: ``brokers`` (JSON: broker id -> broker epoch), the epoch of
  each broker as of the controller's last complete pass, written (conditional on the controller
  epoch) when it changes, so that a new controller tells a broker registered again since then (a
  new incarnation, whose ISR entries are stale) from one it already counted; ``controller_epoch``
  of the writer.

``<prefix>brokers`` (hash key ``broker_id``, number): one registration per broker id, replaced on
re-registration; ``broker_epoch``, ``host``, ``port``, ``rack``, ``state``, ``heartbeat``
(counter bumped by the broker), ``registered_at_ms`` (wall clock, informational only).

``<prefix>topics`` (hash key ``name``, string): ``topic_id`` (UUID), ``num_partitions``,
``replication_factor``, ``configs`` (string map), ``config_version`` (bumped by every config
change, the condition of config updates), ``created_at_ms``.

``<prefix>partitions`` (hash key ``topic_id``, string; range key ``partition``, number):
``topic`` (name), ``replicas`` and ``isr`` (number lists), ``leader`` (-1 = none),
``leader_epoch``, ``partition_epoch`` (bumped by every update; the condition of updates),
``adding_replicas`` and ``removing_replicas`` (number lists, during a reassignment). Keyed by
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
from broker_core.dynamodb_tables import bind_model, share_connection

CLUSTER_TABLE = "cluster"
BROKERS_TABLE = "brokers"
TOPICS_TABLE = "topics"
PARTITIONS_TABLE = "partitions"

CONTROLLER_ITEM = "controller"
METADATA_VERSION_ITEM = "metadata_version"
BROKER_EPOCH_ITEM = "broker_epoch"
PRODUCER_IDS_ITEM = "producer_ids"
BROKER_CONFIGS_ITEM = "broker_configs"
CONTROLLER_INCARNATIONS_ITEM = "controller_incarnations"
CHANGE_ITEM_PREFIX = "change#"



class ControllerLeaseItem(Model):
    item = UnicodeAttribute(hash_key=True)
    holder = NumberAttribute()
    controller_epoch = NumberAttribute()
    heartbeat = NumberAttribute()
    lease_duration_ms = NumberAttribute()


class MetadataVersionItem(Model):
    item = UnicodeAttribute(hash_key=True)
    version = NumberAttribute(default=0)


class ControllerIncarnationsItem(Model):
    item = UnicodeAttribute(hash_key=True)
    brokers = UnicodeAttribute()  # JSON {broker id: broker epoch}
    controller_epoch = NumberAttribute()


class MetadataChangeItem(Model):
    item = UnicodeAttribute(hash_key=True)
    version = NumberAttribute()
    partitions = ListAttribute(of=UnicodeAttribute)
    states = UnicodeAttribute(null=True)
    topics = UnicodeAttribute(null=True)
    brokers = UnicodeAttribute(null=True)
    expires_at = NumberAttribute()


class BrokerEpochCounterItem(Model):
    item = UnicodeAttribute(hash_key=True)
    last_epoch = NumberAttribute(default=0)


class ProducerIdBlockItem(Model):
    item = UnicodeAttribute(hash_key=True)
    next_start = NumberAttribute()
    version = NumberAttribute()


class BrokerConfigsItem(Model):
    item = UnicodeAttribute(hash_key=True)
    configs = MapAttribute(default=dict)  # resource ("<default>" or a broker id) -> {setting: value}
    version = NumberAttribute(default=0)


class BrokerItem(Model):
    broker_id = NumberAttribute(hash_key=True)
    broker_epoch = NumberAttribute()
    host = UnicodeAttribute()
    port = NumberAttribute()
    rack = UnicodeAttribute(null=True)
    state = UnicodeAttribute()
    heartbeat = NumberAttribute()
    registered_at_ms = NumberAttribute()
    endpoints = MapAttribute(null=True)  # listener name -> "host:port"
    principal = UnicodeAttribute(null=True)  # absent in registrations written before brokers named one


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
    # KIP-455 reassignment in progress; absent (or empty) when none is.
    adding_replicas = ListAttribute(of=NumberAttribute, null=True)
    removing_replicas = ListAttribute(of=NumberAttribute, null=True)


@dataclass(frozen=True)
class BoundModels:
    """The metadata models bound to one table prefix, region and endpoint, and their connection."""

    controller_lease: type[ControllerLeaseItem]
    metadata_version: type[MetadataVersionItem]
    metadata_change: type[MetadataChangeItem]
    broker_epoch_counter: type[BrokerEpochCounterItem]
    producer_id_block: type[ProducerIdBlockItem]
    broker_configs: type[BrokerConfigsItem]
    controller_incarnations: type[ControllerIncarnationsItem]
    broker: type[BrokerItem]
    topic: type[TopicItem]
    partition: type[PartitionItem]
    connection: Connection

    def all_models(self) -> tuple[type[Model], ...]:
        return (
            self.controller_lease,
            self.metadata_version,
            self.metadata_change,
            self.broker_epoch_counter,
            self.producer_id_block,
            self.broker_configs,
            self.controller_incarnations,
            self.broker,
            self.topic,
            self.partition,
        )

    def one_model_per_table(self) -> tuple[type[Model], ...]:
        """A model for each distinct table (the cluster singletons share one table)."""
        return (self.controller_lease, self.broker, self.topic, self.partition)


def bind_models(settings: AwsSettings) -> BoundModels:
    """Subclasses of every metadata model whose Meta points at ``settings``' tables.

    All of them, and transactions, go through one pynamodb Connection (one botocore client).
    """
    bound = {
        "controller_lease": bind_model(ControllerLeaseItem, settings, CLUSTER_TABLE),
        "metadata_version": bind_model(MetadataVersionItem, settings, CLUSTER_TABLE),
        "metadata_change": bind_model(MetadataChangeItem, settings, CLUSTER_TABLE),
        "broker_epoch_counter": bind_model(BrokerEpochCounterItem, settings, CLUSTER_TABLE),
        "producer_id_block": bind_model(ProducerIdBlockItem, settings, CLUSTER_TABLE),
        "broker_configs": bind_model(BrokerConfigsItem, settings, CLUSTER_TABLE),
        "controller_incarnations": bind_model(ControllerIncarnationsItem, settings, CLUSTER_TABLE),
        "broker": bind_model(BrokerItem, settings, BROKERS_TABLE),
        "topic": bind_model(TopicItem, settings, TOPICS_TABLE),
        "partition": bind_model(PartitionItem, settings, PARTITIONS_TABLE),
    }
    return BoundModels(**bound, connection=share_connection(bound.values(), settings))
