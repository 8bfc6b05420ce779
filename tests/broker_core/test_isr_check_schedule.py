"""The ISR check looks at a partition only when its ISR may have to change (IsrManager.run_once with
broker_core.replication.isr.next_isr_check_ms), and still drops a follower that stops fetching on time."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from types import SimpleNamespace

from broker_core.log.config import LogConfig
from broker_core.metadata.state import BrokerState, PartitionState
from broker_core.metadata.topics import PartitionBatchResult
from broker_core.replication.isr import IsrManager, next_isr_check_ms
from broker_core.server.partition import Partition

TOPIC_ID = "3f0a6c1e-0000-4000-8000-000000000003"
LAG_MAX_MS = 30_000


class _RecordingStore:
    """The metadata store's AlterPartition write: every proposal is written at the next partition epoch."""

    def __init__(self) -> None:
        self.proposals: list[PartitionState] = []

    def update_partitions(self, proposals: list[tuple[PartitionState, int]]) -> PartitionBatchResult:
        written = []
        for state, epoch in proposals:
            self.proposals.append(state)
            written.append(PartitionState(state.topic, state.topic_id, state.partition, state.replicas, state.leader,
                                          state.leader_epoch, epoch + 1, state.isr))
        return PartitionBatchResult(tuple(written), ())


def leader(directory: Path, index: int) -> Partition:
    partition = Partition.open(directory, "t", index, TOPIC_ID, LogConfig(), broker_id=1)
    partition.become_leader(leader_epoch=0, partition_epoch=0, replicas=(1, 2), isr=(1, 2))
    partition.record_follower_fetch(2, 0)
    return partition


def manager_of(partitions: list[Partition], store: _RecordingStore) -> IsrManager:
    image = SimpleNamespace(
        brokers={b: SimpleNamespace(broker_id=b, state=BrokerState.RUNNING) for b in (1, 2)},
        partitions={(p.topic, p.index): PartitionState(p.topic, TOPIC_ID, p.index, (1, 2), 1, 0, 0, (1, 2))
                    for p in partitions})
    metrics = SimpleNamespace(isr_shrinks=SimpleNamespace(inc=lambda: None),
                              isr_expands=SimpleNamespace(inc=lambda: None))
    context = SimpleNamespace(
        image=image, store=store, metrics=metrics,
        config=SimpleNamespace(get_int=lambda name: {"replica.lag.time.max.ms": LAG_MAX_MS}[name]),
        replicas=SimpleNamespace(partitions={(p.topic, p.index): p for p in partitions}))
    return IsrManager(context)


def test_a_caught_up_partition_is_next_due_when_its_follower_would_lag(tmp_path: Path) -> None:
    partition = leader(tmp_path, 0)
    caught_up = partition.followers[2].caught_up_ms()
    assert next_isr_check_ms(partition, LAG_MAX_MS) == caught_up + LAG_MAX_MS
    partition.update_isr((1,), 1)
    assert next_isr_check_ms(partition, LAG_MAX_MS) == 0.0  # a replica out of the ISR may catch up any time
    partition.close()


def test_a_pass_skips_partitions_not_due_and_a_follower_that_stops_fetching_still_drops_out(tmp_path: Path) -> None:
    partitions = [leader(tmp_path, i) for i in range(3)]
    store = _RecordingStore()
    manager = manager_of(partitions, store)
    asyncio.run(manager.run_once())
    assert store.proposals == []
    assert all(p.isr_check_due_ms > time.monotonic() * 1000 for p in partitions)

    # Partition 1's follower stopped fetching replica.lag.time.max.ms ago (its due time, computed from
    # its caught-up time, has come); the other partitions' followers keep fetching and are not due.
    stalled = partitions[1]
    stalled.followers[2].last_caught_up_ms = time.monotonic() * 1000 - LAG_MAX_MS - 1
    stalled.isr_check_due_ms = next_isr_check_ms(stalled, LAG_MAX_MS)
    asyncio.run(manager.run_once())
    assert [(s.partition, s.isr) for s in store.proposals] == [(1, (1,))]
    assert partitions[1].isr == (1,)
    for p in partitions:
        p.close()


def test_a_follower_replica_is_not_looked_at_until_it_leads(tmp_path: Path) -> None:
    partition = Partition.open(tmp_path, "t", 0, TOPIC_ID, LogConfig(), broker_id=1)
    partition.become_follower(leader_id=2, leader_epoch=0, partition_epoch=0, replicas=(1, 2), isr=(1, 2))
    manager = manager_of([partition], _RecordingStore())
    asyncio.run(manager.run_once())
    assert partition.isr_check_due_ms == math.inf
    partition.become_leader(leader_epoch=1, partition_epoch=1, replicas=(1, 2), isr=(1, 2))
    assert partition.isr_check_due_ms == 0.0
    partition.close()
