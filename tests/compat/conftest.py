"""Fixtures for the client compatibility tests: one local stack per test module, the records every
client sends, and a look at the batches the broker stored, so a test can tell that each codec
really went over the wire compressed with that codec."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from broker_core.local_stack import LocalStack
from broker_core.records.header import Compression, iter_headers
from tests.support.stack import running_stack

# Codec names as every Kafka client spells them, in the order the tests produce them.
CODEC_NAMES = {Compression.NONE: "none", Compression.GZIP: "gzip", Compression.SNAPPY: "snappy",
               Compression.LZ4: "lz4", Compression.ZSTD: "zstd"}
RECORDS_PER_CODEC = 30


@dataclass(frozen=True, slots=True)
class SentRecord:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


@pytest.fixture(scope="module")
def compat_stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One broker (and moto) for the whole test module."""
    with running_stack(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])) as stack:
        yield stack


@pytest.fixture(scope="module")
def records_by_codec() -> dict[str, list[SentRecord]]:
    """RECORDS_PER_CODEC keyed records with headers per codec name.

    Timestamps are CreateTimes a few minutes in the past, strictly increasing over the whole
    sequence and 2 ms apart, so a lookup of ``timestamp + 1`` falls between two records. Values
    repeat a phrase so that every client really compresses them (some skip compression that does
    not pay). Keys and values are ASCII without ':' so that kcat can read them from a text file.
    """
    base = time.time_ns() // 1_000_000 - 300_000
    records: dict[str, list[SentRecord]] = {}
    for codec_index, name in enumerate(CODEC_NAMES.values()):
        records[name] = [
            SentRecord(
                key=f"{name}-key-{i}".encode(),
                value=(f"{name} record {i} " * 8).encode(),
                headers=(("codec", name.encode()), ("index", str(i).encode()), ("empty", b"")),
                timestamp_ms=base + 2 * (codec_index * RECORDS_PER_CODEC + i),
            )
            for i in range(RECORDS_PER_CODEC)
        ]
    return records


@pytest.fixture(scope="module")
def stored_codecs(compat_stack: LocalStack) -> Callable[[str, int], list[str]]:
    """A function giving the codec names of a partition's stored batches in log order, runs of one
    codec collapsed to one entry (read from the broker's segment files)."""

    def codecs(topic: str, partition: int) -> list[str]:
        directory = compat_stack.processes[1].data_dir / f"{topic}-{partition}"
        names: list[str] = []
        for segment in sorted(directory.glob("*.log"), key=lambda path: int(path.stem)):
            for _, header in iter_headers(Path(segment).read_bytes()):
                name = CODEC_NAMES[header.compression]
                if not names or names[-1] != name:
                    names.append(name)
        return names

    return codecs


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """For the admin API modules: ``BROKERS`` brokers (default 1) with the module's ``BROKER_OVERRIDES``."""
    directory = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    with running_stack(directory, getattr(request.module, "BROKERS", 1),
                       getattr(request.module, "BROKER_OVERRIDES", None)) as running:
        yield running


@pytest.fixture(scope="module")
def kp_admin(stack: LocalStack) -> Iterator[KafkaAdminClient]:
    """kafka-python's admin client on ``stack``."""
    client = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers, client_id="compat-admin")
    yield client
    client.close()

