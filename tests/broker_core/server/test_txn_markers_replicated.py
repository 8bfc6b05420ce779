"""Transaction markers are replicated like data: a follower that becomes leader serves the same LSO
and the same aborted transactions to read_committed readers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker_core.client import ClientError, FloeClient
from broker_core.records import SimpleRecord
from tests.support.stack import running_stack
from tests.support.transactions import READ_COMMITTED, raw_fetch, txn_batch, write_markers
from tests.support.waiting import wait_until

# Runs in `make faults`, not in `make test`: a leader change on a stack of its own (about 20 s); the default suite must stay under CI's 20-minute budget.
pytestmark = pytest.mark.faults

TOPIC = "txn-replicated"


async def write_history(servers: str) -> int:
    """0-1 producer 801 (aborted, marker 2), 3 producer 802 (committed, marker 4), 5 producer 803
    (open), 6 plain. Returns the leader's id."""
    async with FloeClient(servers) as client:
        info = await client.create_topic(TOPIC, 1, 2)
        await client.produce_many(TOPIC, {0: txn_batch(801, ["a1", "a2"], 0)})
        assert await write_markers(client, TOPIC, 801, False) == {0: 0}
        await client.produce_many(TOPIC, {0: txn_batch(802, ["c1"], 0)})
        assert await write_markers(client, TOPIC, 802, True) == {0: 0}
        await client.produce_many(TOPIC, {0: txn_batch(803, ["o1"], 0)})
        await client.produce(TOPIC, [SimpleRecord(value=b"plain")], 0)
        return info.partitions[0].leader


def test_a_new_leader_answers_read_committed_as_the_old_one_did(tmp_path: Path) -> None:
    with running_stack(tmp_path, brokers=2) as stack:
        old_leader = asyncio.run(write_history(stack.bootstrap_servers))

        async def look(servers: str):
            async with FloeClient(servers) as client:
                info = await client.describe_topic(TOPIC)
                return info.partitions[0], await raw_fetch(client, TOPIC, 0, READ_COMMITTED)

        partition, before = asyncio.run(look(stack.bootstrap_servers))
        assert set(partition.isr) == {1, 2}
        stack.kill_broker(old_leader)
        survivor = next(broker_id for broker_id in (1, 2) if broker_id != old_leader)
        servers = f"127.0.0.1:{stack.processes[survivor].port}"

        def led_by_survivor():
            try:
                partition, after = asyncio.run(look(servers))
            except ClientError:  # metadata still names the killed leader
                return None
            return after if partition.leader == survivor and after.error_code == 0 else None

        after = wait_until(led_by_survivor, "the follower to lead and answer", 60)
        for answer in (before, after):
            assert answer.last_stable_offset == 5
            assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(801, 0)]
