"""The broker's view of the cluster and the replicas it hosts.

`MetadataImage` indexes one consistent snapshot read from DynamoDB (brokers, topics, partition
states). `ReplicaManager.apply` reconciles the hosted replicas with a new image: it opens logs for
partitions newly assigned here, switches roles on leader changes, and closes and removes the
replicas of deleted topics. It runs on the event loop; opening a log (recovery) is quick enough for
the partition counts a broker hosts here, and happens only when assignments change.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_core.metadata.state import BrokerState
from broker_core.settings import effective

from .config import BrokerConfig
from .partition import Partition

log = logging.getLogger(__name__)


@dataclass
class MetadataImage:
    version: int = -1
    brokers: dict[int, Any] = field(default_factory=dict)
    topics: dict[str, Any] = field(default_factory=dict)
    topics_by_id: dict[str, Any] = field(default_factory=dict)
    partitions: dict[tuple[str, int], Any] = field(default_factory=dict)
    controller_id: int = -1

    @classmethod
    def from_snapshot(cls, snapshot: Any, controller_id: int = -1) -> MetadataImage:
        image = cls(version=snapshot.version, controller_id=controller_id)
        for broker in snapshot.brokers:
            image.brokers[broker.broker_id] = broker
        for topic in snapshot.topics.values():
            image.topics[topic.name] = topic
            image.topics_by_id[topic.topic_id] = topic
        for states in snapshot.partitions.values():
            for state in states:
                image.partitions[(state.topic, state.partition)] = state
        return image

    def live_brokers(self) -> list[Any]:
        return [b for b in self.brokers.values() if b.state is BrokerState.RUNNING]

    def partitions_of(self, topic: str) -> list[Any]:
        description = self.topics.get(topic)
        if description is None:
            return []
        return [self.partitions[(topic, p)] for p in range(description.num_partitions) if (topic, p) in self.partitions]


class ReplicaManager:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.data_dir = Path(config.data_dir)
        self.partitions: dict[tuple[str, int], Partition] = {}

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def apply(self, image: MetadataImage) -> list[Partition]:
        """Bring hosted replicas in line with ``image``; returns partitions that became followers."""
        me = self.config.broker_id
        new_followers: list[Partition] = []
        for key, state in image.partitions.items():
            if me not in state.replicas:
                continue
            topic = image.topics.get(state.topic)
            if topic is None:
                continue
            partition = self.partitions.get(key)
            if partition is None or partition.topic_id != topic.topic_id:
                if partition is not None:
                    partition.close()
                partition = Partition.open(
                    self.data_dir, state.topic, state.partition, topic.topic_id,
                    self.config.log_config(topic.configs), me,
                )
                self.partitions[key] = partition
            replicas, isr = tuple(state.replicas), tuple(state.isr)
            partition.min_insync_replicas = int(effective(topic.configs, self.config, "min.insync.replicas"))
            if state.leader == me:
                partition.become_leader(state.leader_epoch, state.partition_epoch, replicas, isr)
            elif (partition.leader_id, partition.leader_epoch) != (state.leader, state.leader_epoch) or partition.is_leader:
                partition.become_follower(state.leader, state.leader_epoch, state.partition_epoch, replicas, isr)
                new_followers.append(partition)
            else:
                partition.replicas, partition.isr, partition.partition_epoch = replicas, isr, state.partition_epoch
        for key in list(self.partitions):
            state = image.partitions.get(key)
            if state is None or me not in state.replicas:
                self._drop(key, delete=state is None)
        return new_followers

    def _drop(self, key: tuple[str, int], *, delete: bool) -> None:
        partition = self.partitions.pop(key)
        partition.close()
        if delete:
            log.info("removing replica %s-%d of a deleted topic", *key)
            shutil.rmtree(partition.log.directory, ignore_errors=True)

    def close(self) -> None:
        for partition in self.partitions.values():
            partition.close()
        self.partitions.clear()
