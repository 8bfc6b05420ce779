"""A hosted replica's high watermark across restarts and truncation."""

from __future__ import annotations

import asyncio
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


def test_an_acks_all_waiter_wakes_when_the_high_watermark_reaches_its_target_and_not_before(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = open_leader(tmp_path, isr=(1, 2), min_isr=2)
        partition.append_as_leader(make_batch(n_records=10))
        waiter = partition.high_watermark_future(10)
        partition.append_as_leader(make_batch(n_records=10))  # appends alone move nothing
        partition.record_follower_fetch(2, 5)
        await asyncio.sleep(0)
        assert partition.high_watermark == 5 and not waiter.done()
        partition.record_follower_fetch(2, 10)
        assert partition.high_watermark == 10 and waiter.done()
        assert partition.high_watermark_future(10).done()  # already reached: done at once
        partition.close()

    asyncio.run(scenario())


def test_an_acks_all_write_stops_waiting_for_a_fenced_isr_member_until_its_broker_is_counted_again(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = open_leader(tmp_path, isr=(1, 2, 3), min_isr=2)
        partition.record_follower_fetch(2, 0)
        partition.record_follower_fetch(3, 0)
        partition.append_as_leader(make_batch(n_records=10))
        waiter = partition.high_watermark_future(10)
        partition.record_follower_fetch(2, 10)
        await asyncio.sleep(0)
        assert partition.high_watermark == 0 and not waiter.done()  # broker 3 (dead) holds it back

        partition.exclude_fenced({3})  # the metadata shows broker 3 FENCED
        assert partition.in_sync == (1, 2) and partition.isr == (1, 2, 3)
        assert partition.high_watermark == 10 and waiter.done()

        # Broker 3 registered again, still in the stored ISR: it stays uncounted until the ISR check
        # finds it caught up (readmit) or the ISR drops it.
        partition.exclude_fenced(set())
        assert partition.in_sync == (1, 2)
        partition.append_as_leader(make_batch(n_records=10))
        partition.record_follower_fetch(2, 20)
        assert partition.high_watermark == 20
        partition.readmit({3})
        assert partition.in_sync == (1, 2, 3)
        partition.append_as_leader(make_batch(n_records=10))
        partition.record_follower_fetch(2, 30)
        assert partition.high_watermark == 20  # counted again: broker 3 (at offset 0) holds it back

        partition.exclude_fenced({3})
        partition.update_isr((1, 2), 1)  # the controller's write: out of the stored ISR, nothing excluded
        assert partition.fenced_out == frozenset() and partition.in_sync == (1, 2)
        # Two members of three fenced: below min.insync.replicas 2 the HW stays put (KIP-966).
        partition.update_isr((1, 2, 3), 2)
        partition.exclude_fenced({2, 3})
        assert partition.in_sync == (1,)
        partition.append_as_leader(make_batch(n_records=10))
        assert partition.high_watermark == 30
        partition.close()

    asyncio.run(scenario())


def test_a_role_or_isr_change_wakes_every_acks_all_waiter_to_look_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = open_leader(tmp_path, isr=(1, 2), min_isr=2)
        partition.append_as_leader(make_batch(n_records=10))
        shrunk, moved = partition.high_watermark_future(10), partition.high_watermark_future(10)
        partition.update_isr((1,), partition_epoch=1)  # below min.insync.replicas: the HW stays put
        assert shrunk.done() and partition.high_watermark == 0
        again = partition.high_watermark_future(10)
        assert not again.done()
        partition.become_follower(leader_id=2, leader_epoch=1, partition_epoch=2, replicas=(1, 2), isr=(1, 2))
        assert moved.done() and again.done()
        partition.close()

    asyncio.run(scenario())


def test_waiters_that_gave_up_do_not_hold_back_later_ones(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = open_leader(tmp_path, isr=(1, 2), min_isr=2)
        partition.append_as_leader(make_batch(n_records=30))
        abandoned = [partition.high_watermark_future(target) for target in (10, 20)]
        for future in abandoned:
            future.cancel()  # as a timed-out produce does
        later = partition.high_watermark_future(20)
        partition.record_follower_fetch(2, 20)
        assert later.done() and not later.cancelled()
        assert partition._replication_waiters == []  # nothing left behind once the HW passed them
        partition.close()

    asyncio.run(scenario())


def test_a_new_replica_is_created_in_one_pass_and_a_creation_cut_short_is_completed_on_open(tmp_path: Path) -> None:
    fresh = open_leader(tmp_path)
    fresh.log.begin_first_epoch(0)
    # The first epoch is held in memory until the log's first flush (tests/broker_core/log/test_new_log_first_epoch.py).
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == ["00000000000000000000.log", "partition.metadata"]
    fresh.append_as_leader(make_batch(n_records=5))
    fresh.close()
    reopened = open_leader(tmp_path)
    assert (reopened.log.log_end_offset, reopened.high_watermark) == (5, 5)
    reopened.close()

    # A broker killed between the new directory and its files: the next open finds the directory,
    # writes what is missing and recovers an empty log.
    (tmp_path / "t-1").mkdir()
    cut_short = Partition.open(tmp_path, "t", 1, TOPIC_ID, LogConfig(), broker_id=1)
    assert (cut_short.log.log_end_offset, cut_short.high_watermark) == (0, 0)
    assert (tmp_path / "t-1" / "partition.metadata").read_text() == f"version: 0\ntopic_id: {TOPIC_ID}\n"
    cut_short.close()
