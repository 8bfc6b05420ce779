"""kcat (the command-line librdkafka client) against a Floe broker: metadata, every codec, reading
back, offsets by time, errors.

kcat cannot create topics, so confluent-kafka's AdminClient (the same librdkafka) creates them;
everything else goes through the `kcat` binary (Debian package `kcat`), with JSON output (-J) where
kcat has it. kcat's producer stamps records with the current time, so timestamps are checked
against the time window of the produce run rather than against values chosen by the test.

librdkafka before 2.11.1 compresses with gzip, snappy and lz4 only for brokers that still serve
Produce v0 (librdkafka issues 4948 and 4956; fixed by "Fix feature version ranges", #5130). Floe's
oldest Produce is v3, Kafka 4.0's floor, so an older kcat sends those batches uncompressed, as it
would to Kafka 4.0; zstd needs Produce v7 and is unaffected. The test expects exactly that.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "kcat-records"
TOPIC_PARTITIONS = 3
# Small segments, so reading back from earliest crosses several of them.
TOPIC_CONFIGS = {"segment.bytes": "4096", "retention.ms": "86400000"}
SMALL_TOPIC = "kcat-small-messages"
SMALL_MAX_MESSAGE_BYTES = 1024
UNKNOWN_TOPIC = "kcat-no-such-topic"
TIMEOUT_S = 60


def kcat(compat_stack: Any, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    binary = shutil.which("kcat")
    assert binary is not None, "kcat is not installed (Debian/Ubuntu package `kcat`)"
    return subprocess.run([binary, "-b", compat_stack.bootstrap_servers, *args], input=stdin,
                          capture_output=True, timeout=TIMEOUT_S)


def librdkafka_version() -> tuple[int, ...]:
    binary = shutil.which("kcat")
    assert binary is not None, "kcat is not installed (Debian/Ubuntu package `kcat`)"
    found = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", subprocess.run([binary, "-V"], capture_output=True,
                                                                     text=True).stdout)
    assert found is not None, "kcat -V names no librdkafka version"
    return tuple(int(part) for part in found.groups())


def codecs_sent_by(version: tuple[int, ...], codecs: list[str]) -> list[str]:
    """The codecs librdkafka ``version`` really uses when asked for ``codecs`` (runs collapsed)."""
    used = [codec if version >= (2, 11, 1) or codec in ("none", "zstd") else "none" for codec in codecs]
    return [codec for i, codec in enumerate(used) if i == 0 or used[i - 1] != codec]


def consume(compat_stack: Any, topic: str, *args: str) -> list[dict[str, Any]]:
    """Messages of partition 0 as kcat's JSON objects, from the given start until the end."""
    result = kcat(compat_stack, "-C", "-t", topic, "-p", "0", "-e", "-J", *args)
    assert result.returncode == 0, result.stderr.decode()
    return [json.loads(line) for line in result.stdout.decode().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def created(compat_stack: Any) -> None:
    admin = AdminClient({"bootstrap.servers": compat_stack.bootstrap_servers})
    futures = admin.create_topics([
        NewTopic(TOPIC, num_partitions=TOPIC_PARTITIONS, replication_factor=1, config=TOPIC_CONFIGS),
        NewTopic(SMALL_TOPIC, num_partitions=1, replication_factor=1,
                 config={"max.message.bytes": str(SMALL_MAX_MESSAGE_BYTES)}),
    ])
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def produced(compat_stack: Any, created: None, records_by_codec: dict) -> tuple[int, int]:
    """Produce every codec's records to partition 0 with one kcat run per codec, keys split from
    values at ':' and the same headers on every record of a run; the (start, end) wall-clock ms."""
    start_ms = time.time_ns() // 1_000_000
    for codec, records in records_by_codec.items():
        lines = b"".join(r.key + b":" + r.value + b"\n" for r in records)
        result = kcat(compat_stack, "-P", "-t", TOPIC, "-p", "0", "-K", ":", "-z", codec,
                      "-H", f"codec={codec}", "-H", "empty=", "-X", "linger.ms=20", stdin=lines)
        assert result.returncode == 0, result.stderr.decode()
    return start_ms, time.time_ns() // 1_000_000


def test_metadata_lists_the_broker_and_a_created_topic(compat_stack: Any, created: None) -> None:
    result = kcat(compat_stack, "-L", "-J")
    assert result.returncode == 0, result.stderr.decode()
    metadata = json.loads(result.stdout)
    assert metadata["brokers"] == [{"id": 1, "name": f"127.0.0.1:{compat_stack.processes[1].port}"}]
    assert metadata["controllerid"] == 1
    topics = {t["topic"]: t for t in metadata["topics"]}
    assert set(topics) == {TOPIC, SMALL_TOPIC}
    assert "error" not in topics[TOPIC]
    assert sorted((p["partition"], p["leader"], p["replicas"], p["isrs"]) for p in topics[TOPIC]["partitions"]) == [
        (i, 1, [{"id": 1}], [{"id": 1}]) for i in range(TOPIC_PARTITIONS)
    ]


def test_keyed_records_with_headers_in_every_codec_read_back_intact_from_earliest(
        compat_stack: Any, records_by_codec: dict, produced: tuple[int, int], stored_codecs: Any) -> None:
    start_ms, end_ms = produced
    # Each codec's batches reached the log compressed as kcat sent them, in the order produced.
    assert stored_codecs(TOPIC, 0) == codecs_sent_by(librdkafka_version(), list(records_by_codec))

    received = consume(compat_stack, TOPIC, "-o", "beginning")
    expected = [(codec, r) for codec, records in records_by_codec.items() for r in records]
    assert [m["offset"] for m in received] == list(range(len(expected)))
    assert [(m["key"], m["payload"], m["headers"]) for m in received] == [
        (r.key.decode(), r.value.decode(), ["codec", codec, "empty", ""]) for codec, r in expected
    ]
    timestamps = [m["ts"] for m in received]
    assert {m["tstype"] for m in received} == {"create"}
    assert timestamps == sorted(timestamps)
    assert start_ms <= timestamps[0] and timestamps[-1] <= end_ms


def test_offsets_by_timestamp_start_at_the_first_record_at_or_after_it(
        compat_stack: Any, produced: tuple[int, int]) -> None:
    received = consume(compat_stack, TOPIC, "-o", "beginning")
    timestamps = [m["ts"] for m in received]
    for index in (0, 45, 100, len(received) - 1):
        expected_offset = timestamps.index(timestamps[index])  # records of one batch share a timestamp
        (first,) = consume(compat_stack, TOPIC, "-o", f"s@{timestamps[index]}", "-c", "1")
        assert (first["offset"], first["ts"]) == (expected_offset, timestamps[index])
        query = kcat(compat_stack, "-Q", "-J", "-t", f"{TOPIC}:0:{timestamps[index]}")
        assert json.loads(query.stdout)[TOPIC]["0"]["offset"] == expected_offset
    # After the last record there is nothing to start from.
    assert consume(compat_stack, TOPIC, "-o", f"s@{timestamps[-1] + 1}") == []
    query = kcat(compat_stack, "-Q", "-J", "-t", f"{TOPIC}:0:{timestamps[-1] + 1}")
    assert json.loads(query.stdout)[TOPIC]["0"]["offset"] == -1


def test_an_unknown_topic_is_reported_as_unknown(compat_stack: Any, created: None) -> None:
    listed = kcat(compat_stack, "-L", "-J", "-t", UNKNOWN_TOPIC)
    (topic,) = json.loads(listed.stdout)["topics"]
    assert (topic["topic"], topic["error"], topic["partitions"]) == (
        UNKNOWN_TOPIC, "Broker: Unknown topic or partition", [])
    produced = kcat(compat_stack, "-P", "-t", UNKNOWN_TOPIC, "-X", "topic.metadata.propagation.max.ms=1000",
                    stdin=b"lost\n")
    assert produced.returncode == 1
    assert "Delivery failed for message: Broker: Unknown topic or partition" in produced.stderr.decode()
    consumed = kcat(compat_stack, "-C", "-t", UNKNOWN_TOPIC, "-p", "0", "-e")
    assert consumed.returncode == 1
    assert f"Topic {UNKNOWN_TOPIC} error: Broker: Unknown topic or partition" in consumed.stderr.decode()


def test_a_record_over_max_message_bytes_gets_message_too_large_and_nothing_is_written(
        compat_stack: Any, created: None) -> None:
    refused = kcat(compat_stack, "-P", "-t", SMALL_TOPIC, "-p", "0",
                   stdin=b"x" * (4 * SMALL_MAX_MESSAGE_BYTES) + b"\n")
    assert refused.returncode == 1
    assert "Delivery failed for message: Broker: Message size too large" in refused.stderr.decode()
    fits = kcat(compat_stack, "-P", "-t", SMALL_TOPIC, "-p", "0", stdin=b"fits\n")
    assert fits.returncode == 0, fits.stderr.decode()
    # The refused batch took no offset: the record that fits is the partition's first.
    assert [(m["offset"], m["payload"]) for m in consume(compat_stack, SMALL_TOPIC, "-o", "beginning")] == [(0, "fits")]
