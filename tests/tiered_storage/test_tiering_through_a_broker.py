"""Tiering end to end: real broker processes on a moto server, produced to and read by real Kafka clients.

"Remote fetch": after the broker tiered a topic and deleted its local segments, kcat reading from
offset 0 gets every record. "Killed mid-upload": a broker SIGKILLed while segments are being
uploaded, then restarted, loses nothing and leaves no duplicate COPY_FINISHED row.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker_core.client import FloeClient
from broker_core.local_stack import LocalStack
from broker_core.metadata.store import MetadataStore
from tests.support.stack import running_stack
from tests.support.waiting import wait_until
from tiered_storage.manifest import ManifestStore, RemoteSegment, SegmentState

pytestmark = pytest.mark.slow

TOPIC = "history"
WAIT_S = 120.0
EARLIEST = -2


def create_topic(stack: LocalStack, configs: dict[str, str]) -> str:
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)]).values():
        future.result(timeout=30)
    return MetadataStore(stack.aws).get_topic(TOPIC).topic_id


def produce(stack: LocalStack, values: list[bytes]) -> None:
    producer = Producer(
        {
            "bootstrap.servers": stack.bootstrap_servers,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 50,
        }
    )
    for value in values:
        producer.produce(TOPIC, value=value, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0


def local_base_offsets(stack: LocalStack) -> list[int]:
    directory = stack.processes[1].data_dir / f"{TOPIC}-0"
    return sorted(int(path.stem) for path in directory.glob("*.log"))


def kcat_read(stack: LocalStack, start: str = "0") -> list[tuple[int, int, bytes]]:
    """(offset, timestamp, value) of every record kcat reads from ``start`` (an offset, or "beginning",
    which librdkafka resolves with ListOffsets) to the end of the partition."""
    command = ["kcat", "-b", stack.bootstrap_servers, "-C", "-t", TOPIC, "-p", "0", "-o", start, "-e", "-q"]
    result = subprocess.run([*command, "-f", "%o %T %s\\n"], capture_output=True, timeout=120, check=True)
    records = []
    for line in result.stdout.splitlines():
        offset, timestamp, value = line.split(b" ", 2)
        records.append((int(offset), int(timestamp), value))
    return records


def list_offsets(stack: LocalStack, timestamps: list[int]) -> list[tuple[int, int]]:
    async def ask() -> list[tuple[int, int]]:
        async with FloeClient(stack.bootstrap_servers) as client:
            return [await client.list_offsets(TOPIC, 0, timestamp) for timestamp in timestamps]

    return asyncio.run(ask())


def finished_rows(manifest: ManifestStore, topic_id: str) -> list[RemoteSegment]:
    return manifest.list_segments(topic_id, 0)


def test_remote_fetch_kcat_read_after_local_segments_were_deleted_gets_every_record(
    tmp_path: Path,
) -> None:
    overrides = {"remote.log.manager.task.interval.ms": "200"}
    with running_stack(tmp_path, overrides=overrides) as stack:
        topic_id = create_topic(
            stack,
            {"remote.storage.enable": "true", "segment.bytes": str(64 * 1024), "local.retention.ms": "1"},
        )
        values = [f"record-{i:06d}-".encode() * 8 for i in range(6000)]
        produce(stack, values)
        manifest = ManifestStore(stack.aws)
        wait_until(lambda: len(finished_rows(manifest, topic_id)) >= 3, "three tiered segments", WAIT_S)
        wait_until(lambda: local_base_offsets(stack)[0] > 0, "local segments to be deleted", WAIT_S)

        rows = finished_rows(manifest, topic_id)
        assert rows[0].base_offset == 0
        assert [r.base_offset for r in rows[1:]] == [r.end_offset + 1 for r in rows[:-1]]
        assert local_base_offsets(stack)[0] <= rows[-1].end_offset + 1

        records = kcat_read(stack)
        assert [offset for offset, _, _ in records] == list(range(len(values)))
        assert [value for _, _, value in records] == values

        # ListOffsets: the earliest offset is in S3, and so is the answer for an old timestamp.
        timestamp = records[10][1]
        first_at_or_after = min(offset for offset, ts, _ in records if ts >= timestamp)
        assert list_offsets(stack, [EARLIEST, timestamp]) == [(0, -1), (first_at_or_after, timestamp)]


# In `make faults`, not `make test`: a kill and restart of its own broker (about 30 s on CI).
@pytest.mark.faults
def test_killed_mid_upload_the_restarted_broker_loses_nothing_and_commits_each_offset_once(
    tmp_path: Path,
) -> None:
    overrides = {
        # The first tiering round runs when the broker starts, before the topic exists; the next
        # one would come in an hour, so everything is produced before any upload starts.
        "remote.log.manager.task.interval.ms": "3600000",
        # Segments go up as multipart uploads of two parts, one at a time, which keeps each
        # upload in flight long enough for the kill to land in the middle of one.
        "remote.log.s3.multipart.threshold.bytes": str(5 * 1024 * 1024),
        "remote.log.s3.multipart.part.bytes": str(5 * 1024 * 1024),
        "remote.log.s3.multipart.concurrency": "1",
    }
    with running_stack(tmp_path, overrides=overrides) as stack:
        topic_id = create_topic(
            stack,
            {
                "remote.storage.enable": "true",
                "segment.bytes": str(8 * 1024 * 1024),
                "local.retention.ms": "1",
            },
        )
        values = [(f"{i:06d}".encode() * 1700)[:10_000] for i in range(4000)]
        produce(stack, values)
        manifest = ManifestStore(stack.aws)
        assert finished_rows(manifest, topic_id) == []

        stack.kill_broker(1, signal.SIGTERM)
        stack.overrides["remote.log.manager.task.interval.ms"] = "100"
        stack.restart_broker(1)
        started: list[RemoteSegment] = []

        def an_upload_is_in_flight() -> bool:
            started[:] = manifest.list_segments(topic_id, 0, SegmentState.COPY_STARTED)
            return bool(started)

        wait_until(an_upload_is_in_flight, "an upload to start", WAIT_S, interval_s=0.05)
        stack.kill_broker(1, signal.SIGKILL)
        started_ids = {row.segment_id for row in started}
        interrupted = [
            row
            for row in manifest.list_segments(topic_id, 0, SegmentState.COPY_STARTED)
            if row.segment_id in started_ids
        ]

        stack.restart_broker(1)
        segments_to_tier = len(local_base_offsets(stack)) - 1
        wait_until(
            lambda: len(finished_rows(manifest, topic_id)) >= segments_to_tier,
            "every sealed segment to be tiered",
            WAIT_S,
        )
        wait_until(lambda: local_base_offsets(stack)[0] > 0, "local segments to be deleted", WAIT_S)

        rows = manifest.list_segments(topic_id, 0, list(SegmentState))
        finished = [r for r in rows if r.state is SegmentState.COPY_FINISHED]
        assert finished[0].base_offset == 0
        assert [r.base_offset for r in finished[1:]] == [r.end_offset + 1 for r in finished[:-1]]
        states = {r.segment_id: r.state for r in rows}
        for row in interrupted:
            # The upload the kill interrupted was fenced and its objects deleted after the restart,
            # and its offsets were uploaded again, once.
            assert states[row.segment_id] is SegmentState.DELETE_FINISHED
            assert [r.base_offset for r in finished].count(row.base_offset) == 1

        records = kcat_read(stack, "beginning")
        assert [offset for offset, _, _ in records] == list(range(len(values)))
        assert [value for _, _, value in records] == values
