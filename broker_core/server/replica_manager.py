"""The replicas a broker hosts, kept in line with the cluster's metadata.

`ReplicaManager.apply` reconciles the hosted replicas with a new image: it opens logs for
partitions newly assigned here, switches roles on leader changes, and closes and removes the
replicas of deleted topics and those reassigned to other brokers; given the partitions a metadata
delta changed, it looks at those only. It runs on the event loop. Opening a log is file work (a new
log's files; after a crash, recovery of the active segment and its fsyncs): for hundreds of
replicas that is seconds, in which a broker on the event loop would send no heartbeat and answer no
request, so the caller first opens the missing replicas in a worker thread with `open_missing`
and hands them to `apply`.

A log that leaves (its replica closed for good, or a stray directory found at startup by
`remove_stray_logs`) is renamed to a ``-delete`` directory at once and removed after
``file.delete.delay.ms`` by the broker (`broker_core.log.log_directories`), as Kafka does.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from broker_core.log.config import LogConfig
from broker_core.log.log_directories import LogDeletions, stray_partition_directories
from broker_core.metadata.image import MetadataImage
from broker_core.metadata.state import BrokerState, PartitionState, TopicDescription
from broker_core.settings import effective

from .config import BrokerConfig
from .partition import Partition

log = logging.getLogger(__name__)

# Replicas to open before `open_missing` uses threads, and how many.
PARALLEL_OPEN_MIN = 32
OPEN_THREADS = 4


def _names(keys: list[tuple[str, int]], shown: int = 10) -> str:
    """``t-0, t-1`` for a few partitions; their count and the first few for many."""
    names = ", ".join(f"{topic}-{index}" for topic, index in keys[:shown])
    if len(keys) <= shown:
        return f"[{names}]"
    return f"{len(keys)} partitions [{names}, ...]"


class ReplicaManager:
    """The hosted `Partition` of every (topic, partition) whose replica list names this broker.

    Invariant: after `apply(image)`, ``partitions`` holds exactly the replicas ``image`` assigns here,
    each in the role (leader or follower, epochs, ISR) the image gives it, with the topic's
    ``min.insync.replicas`` resolved once per image. Only the event loop calls it.
    """

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.data_dir = Path(config.data_dir)
        self.partitions: dict[tuple[str, int], Partition] = {}
        # The brokers the last applied image showed FENCED (see `_exclude_fenced`).
        self._fenced: frozenset[int] = frozenset()
        # The broker default (log.segment.delete.delay.ms), as Kafka's LogManager times log deletions.
        self.deletions = LogDeletions(config.log_config().file_delete_delay_ms)

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    @staticmethod
    def _states(image: MetadataImage, changed: Collection[tuple[str, int]] | None
                ) -> list[tuple[tuple[str, int], PartitionState]]:
        if changed is None:
            return list(image.partitions.items())
        return [(key, image.partitions[key]) for key in changed if key in image.partitions]

    def open_missing(self, image: MetadataImage,
                     changed: Collection[tuple[str, int]] | None = None) -> dict[tuple[str, int], Partition]:
        """Open the logs of the replicas `apply` (with the same arguments) would open: those ``image``
        assigns here that are not hosted, or hosted under another topic id. Touches only files and
        the new objects, so it may run in a worker thread while the event loop serves requests; the
        caller hands the result to `apply` (or closes it if it does not). Many replicas (a topic
        created, a broker restarted) are opened by a few threads at once: most of the time of each
        is file-system calls, which release the GIL."""
        me = self.config.broker_id
        wanted: list[tuple[tuple[str, int], PartitionState, TopicDescription]] = []
        for key, state in self._states(image, changed):
            topic = image.topics.get(state.topic)
            if me not in state.replicas or topic is None:
                continue
            hosted = self.partitions.get(key)
            if hosted is not None:
                continue  # the same replica, or one of the old topic whose directory `apply` closes first
            wanted.append((key, state, topic))
        # One per topic (a comprehension over `wanted` would resolve it once per replica: a third of
        # the CPU of opening a new topic's 1,000 replicas).
        log_configs: dict[str, LogConfig] = {}
        for _, _, topic in wanted:
            if topic.name not in log_configs:
                log_configs[topic.name] = self.config.log_config(topic.configs)
        opened: dict[tuple[str, int], Partition] = {}
        try:
            if len(wanted) < PARALLEL_OPEN_MIN:
                for key, state, topic in wanted:
                    opened[key] = self._open(state, topic, log_configs[topic.name])
            else:
                with ThreadPoolExecutor(max_workers=OPEN_THREADS, thread_name_prefix="replica-open") as pool:
                    futures = [(key, pool.submit(self._open, state, topic, log_configs[topic.name]))
                               for key, state, topic in wanted]
                    failure: BaseException | None = None
                    for key, future in futures:
                        try:
                            opened[key] = future.result()
                        except BaseException as exc:  # the others are still collected, to be closed
                            failure = failure or exc
                    if failure is not None:
                        raise failure
        except BaseException:
            for partition in opened.values():
                partition.close()
            raise
        return opened

    def _open(self, state: PartitionState, topic: TopicDescription, log_config: LogConfig) -> Partition:
        partition = Partition.open(self.data_dir, state.topic, state.partition, topic.topic_id, log_config,
                                   self.config.broker_id)
        if state.leader_epoch == 0:
            # A partition still at its first leader epoch (a new topic or partition) holds batches of
            # epoch 0 only: recording it now, in the thread that opens the log, spares the event loop
            # a checkpoint rewrite with two fsyncs at each replica's first append (at a topic of
            # 1,000 partitions, seconds of the event loop on every broker).
            partition.log.begin_first_epoch(0)
        return partition

    def apply(self, image: MetadataImage, changed: Collection[tuple[str, int]] | None = None,
              opened: dict[tuple[str, int], Partition] | None = None) -> list[Partition]:
        """Bring hosted replicas in line with ``image``; returns partitions that became followers.

        With ``changed`` (a metadata delta: only these partitions' states differ from the image
        applied before) only those partitions are looked at, so a leader election that moves
        hundreds of partitions costs one pass over them, not over every partition hosted.
        ``opened`` are replicas `open_missing` opened for this image; any it holds that are not
        taken are closed.
        """
        new_followers: list[Partition] = []
        ready = dict(opened or {})
        try:
            self._apply(image, changed, ready, new_followers)
        finally:
            for partition in ready.values():
                partition.close()
        self._exclude_fenced(image, changed)
        return new_followers

    def _exclude_fenced(self, image: MetadataImage, changed: Collection[tuple[str, int]] | None) -> None:
        """Tell each partition led here which of its ISR members' brokers are FENCED
        (`Partition.exclude_fenced`): every partition when the fenced set changed (a fence reaches a
        broker as a broker-state delta naming no partition) or on a full apply, else the changed ones."""
        fenced = frozenset(b.broker_id for b in image.brokers.values() if b.state is BrokerState.FENCED)
        if changed is None or fenced != self._fenced:
            targets: Collection[Partition] = list(self.partitions.values())
        else:
            targets = [p for key in changed if (p := self.partitions.get(key)) is not None]
        self._fenced = fenced
        for partition in targets:
            if partition.is_leader or partition.fenced_out:
                partition.exclude_fenced(fenced)

    def _apply(self, image: MetadataImage, changed: Collection[tuple[str, int]] | None,
               ready: dict[tuple[str, int], Partition], new_followers: list[Partition]) -> None:
        me = self.config.broker_id
        # Replicas this pass opened, by role: logged in one line (a topic of 1,000 partitions was
        # 1,000 log lines on each broker's event loop, a fifth of its creation time there).
        new_leaders: list[tuple[str, int]] = []
        new_followers_opened: list[tuple[str, int]] = []
        if changed is not None:
            for key in changed:
                if key in self.partitions and key not in image.partitions:
                    # Its topic deleted (a delta): the log is deleted as in the full pass below.
                    self._drop(key, delete=True)
        for key, state in self._states(image, changed):
            if me not in state.replicas:
                if changed is not None and key in self.partitions:
                    # Reassigned away (a delta): deleted as in the full pass below.
                    self._drop(key, delete=True)
                continue
            topic = image.topics.get(state.topic)
            if topic is None:
                continue
            partition = self.partitions.get(key)
            opened = partition is None or partition.topic_id != topic.topic_id
            if opened:
                if partition is not None:
                    partition.close()
                prepared = ready.pop(key, None)
                if prepared is not None and prepared.topic_id == topic.topic_id:
                    partition = prepared
                else:
                    if prepared is not None:
                        prepared.close()
                    partition = self._open(state, topic, self.config.log_config(topic.configs))
                self.partitions[key] = partition
            elif partition.applied_configs != topic.configs:
                partition.log.reconfigure(self.config.log_config(topic.configs))
            partition.applied_configs = topic.configs
            replicas, isr = tuple(state.replicas), tuple(state.isr)
            partition.min_insync_replicas = int(effective(topic.configs, self.config, "min.insync.replicas"))
            if state.leader == me:
                partition.become_leader(state.leader_epoch, state.partition_epoch, replicas, isr, announce=not opened)
                if opened:
                    new_leaders.append(key)
            elif (partition.leader_id, partition.leader_epoch) != (state.leader, state.leader_epoch) or partition.is_leader:
                partition.become_follower(state.leader, state.leader_epoch, state.partition_epoch, replicas, isr,
                                          announce=not opened)
                new_followers.append(partition)
                if opened:
                    new_followers_opened.append(key)
            else:
                partition.replicas, partition.isr, partition.partition_epoch = replicas, isr, state.partition_epoch
        if new_leaders or new_followers_opened:
            log.info("opened %d replicas: leader of %s, follower of %s", len(new_leaders) + len(new_followers_opened),
                     _names(new_leaders), _names(new_followers_opened))
        if changed is not None:
            return
        for key in list(self.partitions):
            state = image.partitions.get(key)
            if state is None or me not in state.replicas:
                # A replica reassigned away goes as Kafka's StopReplica(delete) does: its log is deleted.
                self._drop(key, delete=True)

    def _drop(self, key: tuple[str, int], *, delete: bool) -> None:
        partition = self.partitions.pop(key)
        partition.close()
        if delete:
            log.info("removing replica %s-%d (topic deleted or replica reassigned away)", *key)
            self.deletions.schedule(partition.log.directory)

    def remove_stray_logs(self, image: MetadataImage) -> list[Path]:
        """At startup, after the first `apply` of a complete image: rename for deletion every partition
        directory that ``image`` does not assign to this broker (a topic deleted, or the replica
        reassigned away, while the broker was down), and schedule the removal of ``-delete`` directories
        an earlier run left. Returns the stray directories' new paths."""
        me = self.config.broker_id

        def assigned_here(key: tuple[str, int]) -> bool:
            state = image.partitions.get(key)
            return state is not None and me in state.replicas

        self.deletions.adopt_leftovers(self.data_dir)
        stray = stray_partition_directories(self.data_dir, self.partitions.keys(), assigned_here)
        if stray and not image.topics:
            # No topic at all: more likely a wrong table prefix than a cluster whose every topic went.
            # Kept directories are never served, and a re-created topic discards them by its topic id.
            log.warning("the metadata describes no topic: keeping %d partition directories not assigned to "
                        "broker %d (check the table prefix)", len(stray), me)
            return []
        renamed = []
        for directory in stray:
            log.warning("stray log %s: partition not assigned to broker %d (topic deleted or replica "
                        "reassigned away while it was down); deleting it", directory.name, me)
            moved = self.deletions.schedule(directory)
            if moved is not None:
                renamed.append(moved)
        return renamed

    def close(self) -> None:
        for partition in self.partitions.values():
            partition.close()
        self.partitions.clear()
