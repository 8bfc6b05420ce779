"""A decompression bomb in a produce request: CORRUPT_MESSAGE, nothing appended, the broker keeps serving.

The bombs are well-formed batches (valid header and CRC-32C) whose records section inflates to
hundreds of MiB (gzip, zstd, lz4) or whose xerial snappy block claims 2 GiB; each fits in
message.max.bytes, so only the decompression limit stands between it and the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker_core.client import FloeClient, KafkaError
from broker_core.local_stack import LocalStack
from broker_core.records import Compression, SimpleRecord, build_batch
from tests.support.bombs import bomb_batch, bomb_payload
from tests.support.stack import running_stack

MIB = 1024 * 1024
BOMB_SIZES = {Compression.GZIP: 200 * MIB, Compression.ZSTD: 200 * MIB, Compression.LZ4: 200 * MIB,
              Compression.SNAPPY: 2**31}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(Path(tmp_path_factory.mktemp("bombs"))) as running:
        yield running


async def produce_bomb_then_good(servers: str, topic: str, codec: Compression) -> tuple[KafkaError, list, list]:
    async with FloeClient(servers, retries=0) as client:
        await client.create_topic(topic, 1, 1)
        bomb = bomb_batch(codec, bomb_payload(codec, BOMB_SIZES[codec]))
        with pytest.raises(KafkaError) as raised:
            await client.produce_many(topic, {0: bomb})
        after_bomb = (await client.fetch(topic, 0, 0, max_wait_ms=0)).records
        good = build_batch([SimpleRecord(value=b"still here")], compression=codec)
        await client.produce_many(topic, {0: good})
        after_good = (await client.fetch(topic, 0, 0, max_wait_ms=0)).records
        return raised.value, after_bomb, after_good


@pytest.mark.parametrize("codec", list(BOMB_SIZES), ids=lambda codec: codec.name.lower())
def test_a_bomb_is_refused_with_corrupt_message_and_nothing_is_appended(stack: LocalStack, codec: Compression) -> None:
    error, after_bomb, after_good = asyncio.run(
        produce_bomb_then_good(stack.bootstrap_servers, f"bomb-{codec.name.lower()}", codec))
    assert error.code == ErrorCode.corrupt_message
    assert str(64 * MIB) in error.message and "floe.message.max.decompressed.bytes" in error.message
    assert after_bomb == []
    assert [(r.offset, r.value) for r in after_good] == [(0, b"still here")]
    assert stack.processes[1].alive()
