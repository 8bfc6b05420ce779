"""A new replica's files, and its first leader epoch held in memory until the log's first flush."""

from __future__ import annotations

import os
from pathlib import Path

from broker_core.log.config import LogConfig
from broker_core.log.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, EpochEntry, LeaderEpochCheckpoint
from broker_core.log.partition_log import PartitionLog
from broker_core.server.partition import Partition
from tests.support.batches import leader_batches, make_batch

TOPIC_ID = "3f0a6c1e-0000-4000-8000-000000000002"
NOW = 1_700_000_000_000


def new_leader(data: Path, epoch: int = 0, index: int = 0) -> Partition:
    """What `ReplicaManager._open` and `apply` do for a replica of a topic just created."""
    partition = Partition.open(data, "t", index, TOPIC_ID, LogConfig(), broker_id=1)
    partition.log.begin_first_epoch(epoch)
    partition.become_leader(leader_epoch=epoch, partition_epoch=0, replicas=(1,), isr=(1,))
    return partition


def crash(partition: Partition) -> None:
    """A process killed: its descriptors go, nothing is flushed or written."""
    for segment in partition.log.segments:
        os.close(segment.fd)


def checkpoint_file(data: Path, index: int = 0) -> Path:
    return data / f"t-{index}" / LEADER_EPOCH_CHECKPOINT_FILE


def test_a_new_replica_writes_its_directory_marker_and_segment_and_nothing_else(tmp_path: Path) -> None:
    partition = new_leader(tmp_path)
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == ["00000000000000000000.log", "partition.metadata"]
    # The epoch is known in memory: OffsetsForLeaderEpoch answers as if the file held it.
    assert partition.log.leader_epochs.entries == (EpochEntry(0, 0),)
    assert partition.log.leader_epochs.end_offset_for(0, partition.log_end_offset) == (0, 0)
    partition.append_as_leader(make_batch(n_records=5))
    assert not checkpoint_file(tmp_path).exists()  # an append of that epoch writes no file either
    assert partition.log.leader_epochs.end_offset_for(0, partition.log_end_offset) == (0, 5)
    partition.close()
    assert checkpoint_file(tmp_path).read_text() == "0\n1\n0 0\n"  # the close's flush wrote it
    reopened = Partition.open(tmp_path, "t", 0, TOPIC_ID, LogConfig(), broker_id=1)
    assert reopened.log.leader_epochs.entries == (EpochEntry(0, 0),)
    assert reopened.log.log_end_offset == 5
    reopened.close()


def test_a_replica_killed_before_its_first_append_opens_as_an_empty_log(tmp_path: Path) -> None:
    crash(new_leader(tmp_path))
    reopened = Partition.open(tmp_path, "t", 0, TOPIC_ID, LogConfig(), broker_id=1)
    assert (reopened.log.log_end_offset, reopened.high_watermark, reopened.log.leader_epochs.entries) == (0, 0, ())
    # The replica manager records the first epoch again, as at the creation.
    assert reopened.log.begin_first_epoch(0)
    reopened.close()


def test_a_replica_killed_after_appends_rebuilds_the_unwritten_epoch_from_its_batches(tmp_path: Path) -> None:
    partition = new_leader(tmp_path, epoch=0)
    partition.append_as_leader(make_batch(n_records=3))
    partition.append_as_leader(make_batch(n_records=4))
    crash(partition)
    assert not checkpoint_file(tmp_path).exists()
    reopened = Partition.open(tmp_path, "t", 0, TOPIC_ID, LogConfig(), broker_id=1)
    assert reopened.log.log_end_offset == 7
    assert reopened.log.leader_epochs.entries == (EpochEntry(0, 0),)  # recovery read the batches' epoch
    reopened.close()


def test_a_flush_writes_the_epoch_before_the_recovery_point_passes_its_batches(tmp_path: Path) -> None:
    partition = new_leader(tmp_path)
    partition.append_as_leader(make_batch(n_records=3))
    partition.log.flush()
    assert partition.log.recovery_point == 3
    assert checkpoint_file(tmp_path).read_text() == "0\n1\n0 0\n"
    crash(partition)  # recovery no longer reads those batches: the file must hold the epoch
    reopened = Partition.open(tmp_path, "t", 0, TOPIC_ID, LogConfig(), broker_id=1)
    assert reopened.log.leader_epochs.entries == (EpochEntry(0, 0),)
    reopened.close()


def test_a_rolls_flush_on_a_worker_writes_the_epoch_before_the_recovery_point_moves(tmp_path: Path) -> None:
    partition = new_leader(tmp_path)
    handed: list = []
    partition.log.run_in_background = handed.append
    partition.append_as_leader(make_batch(n_records=3))
    partition.log.roll(now_ms=NOW)
    # Nothing yet: until the recovery point moves, a killed process leaves no file and recovery
    # rebuilds the epoch from the batches. The flush's step (on the worker) writes it first.
    assert not checkpoint_file(tmp_path).exists() and len(handed) == 1
    handed[0]()
    assert partition.log.recovery_point == 3
    assert checkpoint_file(tmp_path).read_text() == "0\n1\n0 0\n"
    partition.close()


def test_a_later_epoch_writes_the_first_one_with_it_and_truncation_forgets_it(tmp_path: Path) -> None:
    partition = new_leader(tmp_path)
    partition.append_as_leader(make_batch(n_records=2))
    partition.become_leader(leader_epoch=3, partition_epoch=1, replicas=(1,), isr=(1,))
    partition.append_as_leader(make_batch(n_records=2))
    assert partition.log.leader_epochs.entries == (EpochEntry(0, 0), EpochEntry(3, 2))
    partition.close()  # the later epoch's write ran on the partition's worker, and close pays what is owed
    assert checkpoint_file(tmp_path).read_text() == "0\n2\n0 0\n3 2\n"

    follower = new_leader(tmp_path, index=1)
    follower.become_follower(leader_id=2, leader_epoch=1, partition_epoch=1, replicas=(1, 2), isr=(1, 2))
    follower.truncate_to(0)  # nothing to cut: the in-memory entry stays, still unwritten
    assert follower.log.leader_epochs.entries == (EpochEntry(0, 0),)
    follower.log.truncate_fully_and_start_at(10)
    assert follower.log.leader_epochs.entries == () and not checkpoint_file(tmp_path, 1).exists()
    follower.close()


def test_the_cache_of_a_new_directory_reads_no_file_and_takes_one_unwritten_entry(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    path.write_text("not a checkpoint")  # a new directory holds none; were it read, this would raise
    cache = LeaderEpochCheckpoint(path, new=True)
    assert cache.entries == () and cache.assign_unwritten(2, 0) and cache.unwritten
    assert not cache.assign_unwritten(3, 0)  # only into an empty cache
    cache.clear()
    assert cache.entries == () and not cache.unwritten and path.read_text() == "not a checkpoint"
    cache.assign_unwritten(2, 0)
    cache.write_pending()
    assert path.read_text() == "0\n1\n2 0\n" and not cache.unwritten


def test_an_empty_new_log_answers_retention_and_delete_records_as_empty(tmp_path: Path) -> None:
    log = PartitionLog.create(tmp_path, LogConfig(retention_ms=1), topic="t", partition=0)
    log.begin_first_epoch(0)
    assert log.enforce_retention(now_ms=NOW + 10_000) == 0
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    log.close()


def test_a_first_entry_a_follower_writes_without_fsyncs_owes_a_durable_write_before_the_recovery_point_moves(
        tmp_path: Path) -> None:
    # A replica added to a partition whose leader is at epoch 2: its first batches carry epoch 2.
    (tmp_path / "t-0").mkdir()
    log = PartitionLog.create(tmp_path / "t-0", LogConfig(), topic="t", partition=0)
    log.append_as_follower(leader_batches(0, [3], epoch=2), now_ms=NOW)
    assert log.leader_epochs.entries == (EpochEntry(2, 0),)
    assert log.leader_epochs.unwritten and not log.leader_epochs.due_before_batches
    log.flush()  # a power loss after this must find the epoch of the batches below the recovery point
    assert log.recovery_point == 3 and not log.leader_epochs.unwritten
    assert checkpoint_file(tmp_path).read_text() == "0\n1\n2 0\n"
    log.close()
