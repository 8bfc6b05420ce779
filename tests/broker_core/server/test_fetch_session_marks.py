"""Which partitions an incremental fetch session reads: settled ones only once their replica marks them.

The session side (`FetchSession.begin_read`, `settle`, `mark`, `wakeup`) with the replica side
(`Partition` marking the sessions that watch it, and a follower parked in its session counting as
caught up only while that session keeps reading).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker_core.log.config import LogConfig
from broker_core.protocol.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID
from broker_core.replication import fetcher as fetcher_module
from broker_core.replication.fetcher import ReplicaFetcher
from broker_core.replication.isr import proposed_isr
from broker_core.server.fetch_sessions import CachedPartition, FetchSession, FetchSessionCache, new_context
from broker_core.server.partition import Partition
from tests.support.batches import make_batch

TOPIC_ID = "3f0a6c1e-0000-4000-8000-000000000002"
STAMP = (7, 0, "User:ANONYMOUS", "127.0.0.1", "PLAINTEXT", 12, 2, 0, "")
LAG_MAX_MS = 30_000


def asked(partition: int, offset: int = 0) -> CachedPartition:
    return CachedPartition("t", None, partition, offset, 1 << 20)


def quiet_answer(partition: int, high_watermark: int = 0) -> dict:
    return {"partition_index": partition, "error_code": 0, "high_watermark": high_watermark,
            "last_stable_offset": high_watermark, "log_start_offset": 0, "preferred_read_replica": -1,
            "records": b"", "aborted_transactions": None}


def open_session(cache: FetchSessionCache, partitions: int, *, privileged: bool = False) -> FetchSession:
    context = new_context(cache, session_id=INVALID_SESSION_ID, epoch=INITIAL_EPOCH,
                          asked=[asked(p) for p in range(partitions)], forgotten=[], uses_topic_ids=False,
                          privileged=privileged, now_ms=0.0)
    session_id, _ = context.select(cache, [(p, quiet_answer(p.partition)) for p in context.partitions], 0.0)
    return cache.get(session_id)


def read_and_settle(session: FetchSession, stamp: tuple = STAMP, now_ms: float = 1.0) -> list[int]:
    """One read of the session in which every partition read answers quiet: the partitions read."""
    read = session.begin_read(stamp, now_ms)
    for p in read:
        session.settle(p.key)
    return [p.partition for p in read]


def test_an_idle_session_reads_every_partition_once_then_none() -> None:
    session = open_session(FetchSessionCache(10), 5)
    assert read_and_settle(session) == [0, 1, 2, 3, 4]  # its first read: what it holds was not read with it
    assert read_and_settle(session) == []
    assert read_and_settle(session) == []


def test_a_marked_partition_is_read_again_and_wakes_a_waiting_long_poll() -> None:
    async def scenario() -> None:
        session = open_session(FetchSessionCache(10), 5)
        read_and_settle(session)
        assert session.begin_read(STAMP, 2.0) == []
        wakeup = session.wakeup()
        assert not wakeup.done()
        session.mark(("t", 3))
        assert wakeup.done()
        assert read_and_settle(session) == [3]
        assert not session.wakeup().done()

    asyncio.run(scenario())


def test_a_partition_not_settled_is_read_every_time() -> None:
    session = open_session(FetchSessionCache(10), 3)
    session.begin_read(STAMP, 1.0)
    # Partition 1 had records (or an error, or records past its fetch offset): it is not settled.
    session.settle(("t", 0))
    session.settle(("t", 2))
    assert [p.partition for p in session.begin_read(STAMP, 2.0)] == [1]
    assert [p.partition for p in session.begin_read(STAMP, 3.0)] == [1]


def test_a_partition_marked_while_it_was_read_is_not_settled() -> None:
    session = open_session(FetchSessionCache(10), 3)
    read_and_settle(session)
    session.mark(("t", 1))
    read = session.begin_read(STAMP, 2.0)
    assert [p.partition for p in read] == [1]
    session.mark(("t", 1))  # an append after the read, before the answer was sent
    assert not session.settle(("t", 1))
    assert read_and_settle(session) == [1]


def test_a_named_partition_is_read_and_a_forgotten_one_no_longer() -> None:
    cache = FetchSessionCache(10)
    session = open_session(cache, 3)
    read_and_settle(session)
    context = new_context(cache, session_id=session.session_id, epoch=session.epoch, asked=[asked(2, offset=9)],
                          forgotten=[("t", 0)], uses_topic_ids=False, privileged=False, now_ms=1.0)
    assert [(p.partition, p.fetch_offset) for p in context.begin_read(STAMP, 1.0)] == [(2, 9)]
    session.mark(("t", 0))
    assert [p.partition for p in context.begin_read(STAMP, 2.0)] == [2]


def test_a_changed_image_acl_or_request_shape_reads_every_partition() -> None:
    session = open_session(FetchSessionCache(10), 3)
    read_and_settle(session)
    newer_image = (8, *STAMP[1:])
    assert read_and_settle(session, newer_image) == [0, 1, 2]
    assert read_and_settle(session, newer_image) == []
    other_principal = (8, 0, "User:mallory", *STAMP[3:])
    assert read_and_settle(session, other_principal) == [0, 1, 2]


def open_leader(directory: Path) -> Partition:
    partition = Partition.open(directory, "t", 0, TOPIC_ID, LogConfig(), broker_id=1)
    partition.min_insync_replicas = 1
    partition.become_leader(leader_epoch=0, partition_epoch=0, replicas=(1, 2), isr=(1, 2))
    return partition


def now_ms() -> float:
    return time.monotonic() * 1000  # the clock Partition.record_follower_fetch reads


def follower_session(cache: FetchSessionCache, partition: Partition) -> FetchSession:
    """A follower (broker 2) session holding only ``partition``, read once (now) and parked there."""
    session = open_session(cache, 1, privileged=True)
    read = session.begin_read(STAMP, now_ms())
    session.watch(read[0].key, partition)
    partition.record_follower_fetch(2, partition.log_end_offset)
    assert session.settle(read[0].key)
    partition.park_follower(2, session)
    return session


def test_appends_truncations_and_log_start_moves_mark_the_sessions_reading_a_replica(tmp_path: Path) -> None:
    partition = open_leader(tmp_path)
    session = follower_session(FetchSessionCache(10), partition)
    assert read_and_settle(session) == []
    partition.append_as_leader(make_batch(n_records=10))
    assert read_and_settle(session) == [0]
    partition.record_follower_fetch(2, 10)  # the high watermark moves to 10
    assert read_and_settle(session) == [0]
    partition.append_as_leader(make_batch(n_records=10))
    read_and_settle(session)
    partition.log.roll()
    partition.record_follower_fetch(2, 20)
    read_and_settle(session)
    partition.log.delete_records_before(10)  # DeleteRecords, retention and tiering move it in the log
    assert read_and_settle(session) == [0]
    partition.close()


def test_a_closed_session_is_marked_no_more(tmp_path: Path) -> None:
    partition = open_leader(tmp_path)
    cache = FetchSessionCache(10)
    session = follower_session(cache, partition)
    cache.remove(session.session_id)
    partition.append_as_leader(make_batch(n_records=1))
    assert session.marked == set()
    partition.close()


def test_a_parked_follower_stays_in_the_isr_while_its_session_reads_and_drops_when_it_stops(tmp_path: Path) -> None:
    partition = open_leader(tmp_path)
    session = follower_session(FetchSessionCache(10), partition)
    start = now_ms()
    # The session keeps reading (nothing new to read) for longer than replica.lag.time.max.ms.
    for later in range(500, 2 * LAG_MAX_MS, 500):
        assert session.begin_read(STAMP, start + later) == []
    assert proposed_isr(partition, {1, 2}, LAG_MAX_MS, start + 2 * LAG_MAX_MS) == (1, 2)
    # It stops fetching: after replica.lag.time.max.ms without a read it is dropped.
    last_read_ms = session.last_read_ms
    assert proposed_isr(partition, {1, 2}, LAG_MAX_MS, last_read_ms + LAG_MAX_MS) == (1, 2)
    assert proposed_isr(partition, {1, 2}, LAG_MAX_MS, last_read_ms + LAG_MAX_MS + 1) == (1,)
    partition.close()


def test_an_append_fixes_a_parked_followers_caught_up_time_at_its_sessions_last_read(tmp_path: Path) -> None:
    partition = open_leader(tmp_path)
    session = follower_session(FetchSessionCache(10), partition)
    read_at = now_ms() + 5_000
    session.begin_read(STAMP, read_at)
    partition.append_as_leader(make_batch(n_records=10))
    # The follower has not fetched since the append: caught up as of its session's last read, no later.
    session.begin_read(STAMP, read_at + 10 * LAG_MAX_MS)
    assert partition.followers[2].caught_up_ms() == read_at
    assert proposed_isr(partition, {1, 2}, LAG_MAX_MS, read_at + LAG_MAX_MS + 1) == (1,)
    partition.close()


def test_a_forgotten_partition_stops_counting_its_follower_as_fetching(tmp_path: Path) -> None:
    partition = open_leader(tmp_path)
    cache = FetchSessionCache(10)
    session = follower_session(cache, partition)
    parked_at = partition.followers[2].caught_up_ms()  # the fetch that parked it
    new_context(cache, session_id=session.session_id, epoch=session.epoch, asked=[], forgotten=[("t", 0)],
                uses_topic_ids=False, privileged=True, now_ms=parked_at)
    session.begin_read(STAMP, parked_at + 1_000)
    session.begin_read(STAMP, parked_at + 10 * LAG_MAX_MS)
    assert partition.followers[2].caught_up_ms() == parked_at
    partition.close()


def test_a_replica_fetcher_rebuilds_a_fetch_position_only_after_its_replica_changed(tmp_path: Path) -> None:
    context = SimpleNamespace(config=SimpleNamespace(get_int=lambda name: 500))

    async def scenario() -> None:
        partition = Partition.open(tmp_path, "t", 0, TOPIC_ID, LogConfig(), broker_id=1)
        partition.become_follower(leader_id=2, leader_epoch=0, partition_epoch=0, replicas=(1, 2), isr=(1, 2))
        fetcher = ReplicaFetcher(context, leader_id=2)
        fetcher.follow(partition)
        followed = fetcher.partitions[("t", 0)]
        first = followed.fetch_position(1 << 20)
        assert (first.fetch_offset, first.log_start_offset) == (0, 0)
        assert followed.fetch_position(1 << 20) is first  # nothing changed: the same position
        partition.append_as_follower(make_batch(n_records=10))
        assert followed.fetch_position(1 << 20).fetch_offset == 10
        partition.log.roll()
        partition.log.delete_records_before(10)  # the leader's log start, followed
        assert followed.fetch_position(1 << 20).log_start_offset == 10
        partition.truncate_fully_and_start_at(25)
        assert followed.fetch_position(1 << 20).fetch_offset == 25
        await fetcher.stop()
        assert fetcher.partitions == {} and partition._sessions == {}  # a stopped fetcher is marked no more
        partition.close()

    asyncio.run(scenario())


def test_a_replica_fetcher_reports_a_spell_of_failures_once_per_interval(caplog: pytest.LogCaptureFixture,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    context = SimpleNamespace(config=SimpleNamespace(get_int=lambda name: 500))
    clock = [100.0]

    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        monkeypatch.setattr(loop, "time", lambda: clock[0])
        fetcher = ReplicaFetcher(context, leader_id=2)
        with caplog.at_level(logging.INFO, logger=fetcher_module.__name__):
            for _ in range(200):  # 10 s of retries every 50 ms, as while a leader is dead
                fetcher._log_failure(ConnectionRefusedError("refused"))
                clock[0] += 0.05
            clock[0] = 110.5  # past the interval since the first report
            fetcher._log_failure(ConnectionRefusedError("refused"))
        return [r.getMessage() for r in caplog.records if r.name == fetcher_module.__name__]

    lines = asyncio.run(scenario())
    assert lines == ["fetcher for leader 2: refused; retrying (1 failed attempts since the last report)",
                     "fetcher for leader 2: refused; retrying (200 failed attempts since the last report)"]
