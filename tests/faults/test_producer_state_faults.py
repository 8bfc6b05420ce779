"""Idempotent-producer state through what replication does to a replica: a clean shutdown, its
divergent tail truncated, the new leader's batches copied in, then a crash, then leadership.

The state rebuilt after the crash must describe the log as it is, so a producer retrying a batch
whose acknowledgement it lost gets the batch's original offsets back instead of a second copy.
These run on Partition objects and their files directly; the crash is a copy of the directory
taken without closing the log (what SIGKILL leaves behind).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from broker_core.log.config import LogConfig
from broker_core.records import SimpleRecord, build_batch, iter_records
from broker_core.server.partition import Partition

TOPIC = "payments"
TOPIC_ID = "5d0c5b9e-0000-4000-8000-000000000001"
REPLICA, OTHER = 1, 2
PRODUCER, OTHER_PRODUCER = 1000, 2000


def idempotent_batch(producer_id: int, first_sequence: int, count: int, *, base_offset: int = 0,
                     leader_epoch: int = -1) -> bytes:
    return build_batch(
        [SimpleRecord(value=f"{producer_id}:{first_sequence + i}".encode()) for i in range(count)],
        base_offset=base_offset, partition_leader_epoch=leader_epoch,
        producer_id=producer_id, producer_epoch=0, base_sequence=first_sequence)


def open_replica(data_dir: Path) -> Partition:
    return Partition.open(data_dir, TOPIC, 0, TOPIC_ID, LogConfig(), REPLICA)


def values_in(partition: Partition) -> list[bytes]:
    return [r.value for r in iter_records(partition.log.read_bytes(0, 2**20, max_offset=partition.log_end_offset))]


def crash_copy(partition_dir: Path, data_dir: Path) -> Path:
    """The partition's files as SIGKILL leaves them: copied while the log is open, nothing closed."""
    shutil.copytree(partition_dir, data_dir / partition_dir.name)
    return data_dir


def test_a_retry_after_truncation_refetch_and_crash_gets_its_original_offsets_not_a_second_copy(tmp_path: Path) -> None:
    first_life = tmp_path / "before-crash"
    replica = open_replica(first_life)
    replica.become_leader(0, 0, (REPLICA, OTHER), (REPLICA, OTHER))
    replica.append_as_leader(idempotent_batch(PRODUCER, 0, 10))  # offsets 0-9, replicated
    replica.append_as_leader(idempotent_batch(OTHER_PRODUCER, 0, 10))  # offsets 10-19, never replicated
    replica.close()  # controlled shutdown: a producer-state snapshot at offset 20

    # Back as a follower of the new leader (epoch 1), which has offsets 0-9 only: the tail goes, and
    # the leader's next batches are copied in: the first producer's next batch, the other's retry.
    replica = open_replica(first_life)
    replica.become_follower(OTHER, 1, 1, (REPLICA, OTHER), (REPLICA, OTHER))
    replica.truncate_to(10)
    replica.append_as_follower(idempotent_batch(PRODUCER, 10, 10, base_offset=10, leader_epoch=1))
    replica.append_as_follower(idempotent_batch(OTHER_PRODUCER, 0, 10, base_offset=20, leader_epoch=1))

    # SIGKILL, restart, and this replica is elected leader (epoch 2). The producer never got the
    # acknowledgement for sequences 10-19 from the old leader, so it sends them again.
    restarted = open_replica(crash_copy(replica.log.directory, tmp_path / "after-crash"))
    restarted.become_leader(2, 2, (REPLICA, OTHER), (REPLICA,))
    answer = restarted.append_as_leader(idempotent_batch(PRODUCER, 10, 10))

    assert (answer.base_offset, answer.last_offset) == (10, 19)
    assert restarted.log_end_offset == 30
    assert values_in(restarted).count(f"{PRODUCER}:10".encode()) == 1


def test_a_retry_after_two_truncations_gets_its_original_offsets_not_a_second_copy(tmp_path: Path) -> None:
    replica = open_replica(tmp_path)
    replica.become_leader(0, 0, (REPLICA, OTHER), (REPLICA, OTHER))
    replica.append_as_leader(idempotent_batch(PRODUCER, 0, 10))  # offsets 0-9, replicated
    replica.append_as_leader(idempotent_batch(OTHER_PRODUCER, 0, 10))  # offsets 10-19, never replicated
    replica.close()

    replica = open_replica(tmp_path)
    replica.become_follower(OTHER, 1, 1, (REPLICA, OTHER), (REPLICA, OTHER))
    replica.truncate_to(10)
    replica.append_as_follower(idempotent_batch(PRODUCER, 10, 10, base_offset=10, leader_epoch=1))
    replica.append_as_follower(idempotent_batch(OTHER_PRODUCER, 0, 10, base_offset=20, leader_epoch=1))
    replica.append_as_follower(idempotent_batch(OTHER_PRODUCER, 10, 10, base_offset=30, leader_epoch=1))
    # Another leader change: this replica's last batch (30-39) was not on the leader of epoch 2.
    replica.become_follower(OTHER, 2, 2, (REPLICA, OTHER), (REPLICA, OTHER))
    replica.truncate_to(30)
    replica.become_leader(3, 3, (REPLICA, OTHER), (REPLICA,))
    answer = replica.append_as_leader(idempotent_batch(PRODUCER, 10, 10))

    assert (answer.base_offset, answer.last_offset) == (10, 19)
    assert replica.log_end_offset == 30


def test_a_replica_restarted_at_the_leaders_log_start_forgets_the_producers_of_the_log_it_dropped(tmp_path: Path) -> None:
    replica = open_replica(tmp_path)
    replica.become_leader(0, 0, (REPLICA, OTHER), (REPLICA, OTHER))
    replica.append_as_leader(idempotent_batch(PRODUCER, 0, 10))  # offsets 0-9
    replica.append_as_leader(idempotent_batch(OTHER_PRODUCER, 0, 10))  # offsets 10-19
    replica.close()  # a producer-state snapshot at offset 20

    # Meanwhile the leader deleted everything below 20 and more: this replica starts over at the
    # leader's log start, and later leads. The producer's sequences 10-49 went with the deleted records.
    replica = open_replica(tmp_path)
    replica.become_follower(OTHER, 1, 1, (REPLICA, OTHER), (REPLICA, OTHER))
    replica.truncate_fully_and_start_at(20)
    replica.become_leader(2, 2, (REPLICA, OTHER), (REPLICA,))
    answer = replica.append_as_leader(idempotent_batch(PRODUCER, 50, 10))

    assert (answer.base_offset, answer.last_offset) == (20, 29)
