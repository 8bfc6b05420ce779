"""read_committed reads of tiered history: the transaction index travels with the segment to S3.

A broker tiers a topic whose log alternates committed and aborted transactions, then deletes the
local segments; kcat (librdkafka, read_committed by default) and a raw read_committed Fetch from
offset 0 are then served from S3 and must still skip every aborted record.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import boto3
import pytest

from broker_core.client import FloeClient
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.records import SimpleRecord
from tests.support.stack import running_stack
from tests.support.transactions import READ_COMMITTED, raw_fetch, txn_batch, write_markers
from tests.support.waiting import wait_until
from tiered_storage.indexes import decode_indexes
from tiered_storage.manifest import ManifestStore

pytestmark = pytest.mark.slow

TOPIC = "txn-history"
WAIT_S = 120.0
TRANSACTIONS = 48
PAD = "p" * 1500


async def write_history(stack: LocalStack) -> list[bytes]:
    """Transactions of producer 100+i, every third one aborted; returns the committed values in order."""
    committed = []
    async with FloeClient(stack.bootstrap_servers) as client:
        await client.create_topic(TOPIC, 1, 1, configs={
            "remote.storage.enable": "true", "segment.bytes": str(16 * 1024), "local.retention.ms": "1"})
        for i in range(TRANSACTIONS):
            values = [f"t{i}-r{r}-{PAD}" for r in range(3)]
            await client.produce_many(TOPIC, {0: txn_batch(100 + i, values, 0)})
            aborted = i % 3 == 1
            await write_markers(client, TOPIC, 100 + i, not aborted)
            if not aborted:
                committed += [v.encode() for v in values]
        # Plain records after the last marker roll the segments that hold the transactions.
        for r in range(20):
            await client.produce(TOPIC, [SimpleRecord(value=f"tail-{r}-{PAD}".encode())], 0)
            committed.append(f"tail-{r}-{PAD}".encode())
    return committed


def local_start(stack: LocalStack) -> int:
    directory = stack.processes[1].data_dir / f"{TOPIC}-0"
    return min(int(path.stem) for path in directory.glob("*.log"))


def test_read_committed_from_s3_skips_the_aborted_transactions(tmp_path: Path) -> None:
    with running_stack(tmp_path, overrides={"remote.log.manager.task.interval.ms": "200"}) as stack:
        committed = asyncio.run(write_history(stack))
        manifest = ManifestStore(stack.aws)

        tid = MetadataStore(stack.aws).get_topic(TOPIC).topic_id
        wait_until(lambda: len(manifest.list_segments(tid, 0)) >= 3, "three tiered segments", WAIT_S)
        wait_until(lambda: local_start(stack) > manifest.list_segments(tid, 0)[0].end_offset,
                   "the first tiered segment to leave the local disk", WAIT_S)

        first_row = manifest.list_segments(tid, 0)[0]
        s3 = boto3.client("s3", **stack.aws.boto3_kwargs())
        indexes = decode_indexes(s3.get_object(Bucket=stack.aws.bucket, Key=first_row.indexes_key)["Body"].read())
        # Transaction 1 (producer 101) aborted: records at 4-6, its marker at 7.
        first_aborted = indexes.aborted_transactions[0]
        assert (first_aborted.producer_id, first_aborted.first_offset, first_aborted.last_offset) == (101, 4, 7)

        async def fetch_first():
            async with FloeClient(stack.bootstrap_servers) as client:
                return await raw_fetch(client, TOPIC, 0, READ_COMMITTED)

        first = asyncio.run(fetch_first())
        assert (101, 4) in [(a.producer_id, a.first_offset) for a in first.aborted_transactions]

        command = ["kcat", "-b", stack.bootstrap_servers, "-C", "-t", TOPIC, "-p", "0", "-o", "beginning",
                   "-e", "-q", "-X", "isolation.level=read_committed", "-f", "%s\\n"]
        result = subprocess.run(command, capture_output=True, timeout=120, check=True)
        assert result.stdout.splitlines() == committed
