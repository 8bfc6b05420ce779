"""A hosted replica's high watermark across restarts and truncation."""

from __future__ import annotations

from pathlib import Path

from broker_core.log.config import LogConfig
from broker_core.server.partition import Partition
from tests.support.batches import make_batch

TOPIC_ID = "3f0a6c1e-0000-4000-8000-000000000001"


def open_leader(directory: Path, isr: tuple[int, ...] = (1,), min_isr: int = 1) -> Partition:
    partition = Partition.open(directory, "t", 0, TOPIC_ID, LogConfig(), broker_id=1)
    partition.min_insync_replicas = min_isr
    partition.become_leader(leader_epoch=0, partition_epoch=0, replicas=(1, 2, 3), isr=isr)
    return partition


def test_a_restarted_leader_alone_in_the_isr_keeps_the_high_watermark_it_had(tmp_path: Path) -> None:
    partition = open_leader(tmp_path, isr=(1,))
    for _ in range(3):
        partition.append_as_leader(make_batch(n_records=10))
    assert partition.high_watermark == 30
    partition.close()

    # min.insync.replicas 2 with the leader alone in the ISR freezes the HW (KIP-966): without the
    # checkpoint it would stay at 0 and hide records consumers could already read.
    reopened = open_leader(tmp_path, isr=(1,), min_isr=2)
    assert reopened.high_watermark == 30
    reopened.close()


def test_the_saved_high_watermark_never_exceeds_what_the_log_still_holds(tmp_path: Path) -> None:
    partition = open_leader(tmp_path)
    partition.append_as_leader(make_batch(n_records=10))
    partition.append_as_leader(make_batch(n_records=10))
    partition.close()

    follower = Partition.open(tmp_path, "t", 0, TOPIC_ID, LogConfig(), broker_id=1)
    follower.become_follower(leader_id=2, leader_epoch=1, partition_epoch=1, replicas=(1, 2), isr=(1, 2))
    follower.truncate_to(10)
    follower.close()

    assert Partition.open(tmp_path, "t", 0, TOPIC_ID, LogConfig(), broker_id=1).high_watermark == 10
