"""A follower's large replicated appends are checked and written on a worker thread
(`Partition.append_replicated`); small ones stay on the event loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_core.log import LogConfig
from broker_core.records.header import iter_headers, set_base_offset
from broker_core.server import partition as partition_module
from broker_core.server.partition import Partition
from tests.support.batches import make_batch

TOPIC_ID = "3f0a6c1e-0000-4000-8000-00000000a0a0"
NOW = 1_700_000_000_000


def replicated(base_offset: int, batches: int, records: int = 100, value_size: int = 1000) -> bytes:
    """Batches as a leader sends them: offsets from ``base_offset``, leader epoch 0."""
    out = bytearray()
    for number in range(batches):
        batch = bytearray(make_batch(records, value_size, NOW, value_seed=number))
        set_base_offset(batch, 0, base_offset)
        out += batch
        base_offset += records
    return bytes(out)


def follower(tmp_path: Path) -> Partition:
    partition = Partition.open(tmp_path, "t", 0, TOPIC_ID, LogConfig(), broker_id=1)
    partition.become_follower(leader_id=2, leader_epoch=0, partition_epoch=0, replicas=(1, 2), isr=(1, 2))
    return partition


def test_a_large_replicated_append_is_written_off_the_loop_and_readable_once_it_returns(tmp_path: Path) -> None:
    large = replicated(0, batches=2)
    assert len(large) >= partition_module.REPLICA_APPEND_OFF_LOOP_BYTES

    async def scenario() -> None:
        partition = follower(tmp_path)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        running = asyncio.create_task(ticker())
        info = await partition.append_replicated(large)
        assert ticks > 0  # the loop ran other work while the append was checked and written
        running.cancel()
        assert (info.base_offset, info.last_offset) == (0, 199)
        assert partition.log_end_offset == 200 and partition.log.pending_append is None
        small = await partition.append_replicated(replicated(200, batches=1, records=2, value_size=10))
        assert small.last_offset == 201
        read = [h.base_offset for start in (0, 200) for _, h in iter_headers(partition.log.read_bytes(start, 1 << 22))]
        assert read == [0, 100, 200]
        partition.close()

    asyncio.run(scenario())


def test_a_replica_led_anew_while_its_batches_were_checked_appends_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = follower(tmp_path)
        appending = asyncio.create_task(partition.append_replicated(replicated(0, batches=2)))
        await asyncio.sleep(0)  # the check is under way on a worker thread
        partition.become_leader(leader_epoch=1, partition_epoch=1, replicas=(1, 2), isr=(1,))
        assert await appending is None
        assert partition.log_end_offset == 0 and partition.log.pending_append is None
        partition.close()

    asyncio.run(scenario())
