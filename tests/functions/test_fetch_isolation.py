"""The HTTP fetch's ``isolation`` parameter: read_committed by default, from the broker and from S3.

Transactions are written as a producer and a coordinator write them (transactional batches, then
WriteTxnMarkers); the S3 case tiers by hand a log whose .txnindex the uploader's way carries along.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from broker_core.client import FloeClient
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from broker_core.records import SimpleRecord
from tests.emr_jobs.tiered_log import BESIDE_THE_LEADER_EPOCH, tier_segments
from tests.functions.http_api import HttpApi
from tests.support.transactions import log_with_transactions, txn_batch, write_markers


def values(api: HttpApi, topic: str, query: str = "") -> tuple[list[str], dict]:
    answer = api.get(f"/v1/topics/{topic}/partitions/0/records?offset=0&format=string{query}")
    assert answer.status == 200, answer.body
    return [r["value"]["data"] for r in answer.body["records"]], answer.body


def test_the_broker_path_is_read_committed_unless_asked_otherwise(
        api: HttpApi, http_stack: LocalStack, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1)

    async def write() -> None:
        async with FloeClient(http_stack.bootstrap_servers) as client:
            await client.produce_many(topic, {0: txn_batch(61, ["kept-1", "kept-2"], 0)})   # 0-1
            await client.produce_many(topic, {0: txn_batch(62, ["dropped"], 0)})           # 2
            await write_markers(client, topic, 61, True)                                   # 3
            await write_markers(client, topic, 62, False)                                  # 4
            await client.produce(topic, [SimpleRecord(value=b"plain")], 0)                # 5
            await client.produce_many(topic, {0: txn_batch(63, ["open"], 0)})             # 6
            await client.produce(topic, [SimpleRecord(value=b"after-open")], 0)           # 7

    asyncio.run(write())
    committed, body = values(api, topic)
    assert committed == ["kept-1", "kept-2", "plain"]
    assert body["next_offset"] == 6
    everything, _ = values(api, topic, "&isolation=read_uncommitted")
    assert everything == ["kept-1", "kept-2", "dropped", "plain", "open", "after-open"]
    assert api.get(f"/v1/topics/{topic}/partitions/0/records?isolation=serializable").status == 422


def test_the_s3_path_leaves_out_aborted_transactions_with_the_tiered_transaction_index(
        api: HttpApi, http_stack: LocalStack, make_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = make_topic(partitions=1, configs={"remote.storage.enable": "true", "retention.ms": "-1"})
    description = MetadataStore(http_stack.aws).get_topic(topic)
    log = log_with_transactions(tmp_path / f"{topic}-0")
    tier_segments(http_stack.aws, log, description, 0, leader_epoch=BESIDE_THE_LEADER_EPOCH)
    seen, next_offset = [], 0
    while next_offset < 8:
        answer = api.get(f"/v1/topics/{topic}/partitions/0/records?offset={next_offset}&format=string")
        assert answer.status == 200, answer.body
        assert answer.body["source"] == "s3"
        seen += [r["value"]["data"] for r in answer.body["records"]]
        next_offset = answer.body["next_offset"]
    assert seen == ["plain", "c1"]
    raw = api.get(f"/v1/topics/{topic}/partitions/0/records?offset=0&format=string&isolation=read_uncommitted")
    assert [r["value"]["data"] for r in raw.body["records"]] == ["a1", "a2"]
