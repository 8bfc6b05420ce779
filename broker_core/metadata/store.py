"""MetadataStore: every read and conditional write of cluster metadata in DynamoDB.

Brokers, front ends and the controller all go through this class; it hands out the frozen
dataclasses of ``broker_core.metadata.state`` and never pynamodb items. It is assembled from one
module per job: ``tables`` (the tables, transactions and the metadata version every change bumps),
``brokers`` (registrations, heartbeats, fencing), ``topics`` (topics, configs and partitions) and
``producer_ids`` (producer-id blocks), ``broker_configs`` (dynamic broker configs); this module adds what reads across them, the cluster
snapshot. Every write that can race is conditional on an integer: broker epoch for broker writes,
partition epoch for partition updates, controller epoch (checked on the lease item in the same
transaction) for controller writes, ``config_version`` for topic configs, ``version`` for
producer-id blocks. Each metadata change bumps the metadata version in the same DynamoDB
transaction, so a broker that sees the version unchanged knows nothing it caches has changed.

Thread-safety: a MetadataStore holds no mutable state of its own and may be shared by threads;
pynamodb is synchronous, so brokers call it from worker threads, never from the event loop.
Conditional writes that are safe to retry (transaction conflicts, throttling, read-merge-write of
configs and producer ids) are retried with bounded, jittered backoff (``broker_core.retry``);
DynamoDB being unreachable surfaces as MetadataUnavailableError.
"""

from __future__ import annotations

from broker_core.metadata.broker_configs import BrokerConfigStore
from broker_core.metadata.producer_ids import ProducerIdAllocator
from broker_core.metadata.state import ClusterSnapshot, PartitionState
from broker_core.metadata.tables import PARTITION_PAGE_SIZE, metadata_failures
from broker_core.metadata.topics import TopicCatalog, partition_from_item, validate_topic_name

__all__ = ["MetadataStore", "validate_topic_name"]


class MetadataStore(TopicCatalog, ProducerIdAllocator, BrokerConfigStore):
    """Cluster metadata in four DynamoDB tables named ``settings.table_prefix`` + base name.

    Partition items whose topic id no topic refers to (left by a process that died while creating
    or deleting a topic) are skipped by `snapshot`.
    """

    @metadata_failures
    def partitions_led_by(self, broker_id: int) -> list[PartitionState]:
        """Partitions of existing topics whose leader is ``broker_id``."""
        snapshot = self.snapshot()
        return [p for partitions in snapshot.partitions.values() for p in partitions if p.leader == broker_id]

    @metadata_failures
    def snapshot(self) -> ClusterSnapshot:
        """Brokers, topics and partitions with consistent reads, tagged with the metadata version.

        The version is read first, so the snapshot holds at least every change up to it.
        """
        version = self.metadata_version()
        brokers = tuple(self.list_brokers())
        topics = {t.name: t for t in self.list_topics()}
        names_by_id = {t.topic_id: t.name for t in topics.values()}
        grouped: dict[str, list[PartitionState]] = {name: [] for name in topics}
        for item in self.models.partition.scan(consistent_read=True, page_size=PARTITION_PAGE_SIZE):
            name = names_by_id.get(item.topic_id)
            # A partition at or above its topic's count is one CreatePartitions is still adding.
            if name is not None and int(item.partition) < topics[name].num_partitions:
                grouped[name].append(partition_from_item(item))
        partitions = {
            name: tuple(sorted(states, key=lambda p: p.partition)) for name, states in grouped.items()
        }
        return ClusterSnapshot(version=version, brokers=brokers, topics=topics, partitions=partitions,
                               broker_configs=self.broker_configs())
