"""Tiered storage throughput against its peers, measured in the same run on the same moto server.

Upload: the tiering uploader (PartitionUploader.run_once: manifest row COPY_STARTED, .log object and
".indexes" object, COPY_FINISHED) over sealed segments written by PartitionLog, against boto3
``put_object`` of the very same segment bytes (already in memory) to the same bucket, one object
after the other. Each run tiers the segments as a new partition, so nothing is skipped; the two
sides alternate which goes first.

Remote fetch: a broker process (local stack) holds two topics with the same batches; on the tiered
one every sealed segment was uploaded and deleted locally. A Kafka-protocol client (FloeClient,
1 MiB per fetch, a consumer's max.partition.fetch.bytes default) reads the same offset range from
each: the tiered topic's fetches are served from S3 by range GETs, the other's from local segments.
As a ceiling, boto3 ``get_object`` of the same segment objects, whole and one after the other, is
timed too.

Reports medians, the ratio of the medians and the median of per-run ratios (each run measures
both sides back to back), and writes bench/results/tiering.json.

    .venv/bin/python bench/tiering_bench.py [--runs 7] [--segments 4] [--segment-mib 32] [--fetch-mib 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import boto3  # noqa: E402

from bench.machine import result_header, write_result  # noqa: E402
from broker_core.aws import AwsSettings  # noqa: E402
from broker_core.client import FloeClient  # noqa: E402
from broker_core.local_moto import start_moto_server  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.log import LogConfig, PartitionLog  # noqa: E402
from broker_core.records.batch import SimpleRecord, build_batch  # noqa: E402
from tiered_storage.manifest import ManifestStore  # noqa: E402
from tiered_storage.object_store import SegmentObjectStore  # noqa: E402
from tiered_storage.uploader import PartitionUploader  # noqa: E402

MIB = 1024 * 1024
BATCH_BYTES = 16 * 1024
RECORD_VALUE_BYTES = 100
DISTINCT_BATCHES = 64
FETCH_BYTES = 1024 * 1024
TIERED_TOPIC = "bench-tiered"
LOCAL_TOPIC = "bench-local"
FETCH_SEGMENT_MIB = 8  # segment.bytes of the two remote-fetch topics


def build_batches() -> list[bytes]:
    """DISTINCT_BATCHES batches of at most 16 KiB with 100-byte random values, built before any timing."""
    now_ms = time.time_ns() // 1_000_000
    batches = []
    for number in range(DISTINCT_BATCHES):
        count = BATCH_BYTES // RECORD_VALUE_BYTES
        while True:
            records = [SimpleRecord(value=os.urandom(RECORD_VALUE_BYTES), timestamp=now_ms + number)] * count
            batch = build_batch(records)
            if len(batch) <= BATCH_BYTES:
                break
            count -= 1
        batches.append(batch)
    return batches


def paired_ratios(side_s: list[float], peer_s: list[float]) -> list[float]:
    """Throughput ratio side/peer of each run: the two ran back to back, so load from other
    processes on the machine hits both alike; the median of these is the headline ratio."""
    return [round(peer / side, 3) for side, peer in zip(side_s, peer_s, strict=True)]


# -- upload ----------------------------------------------------------------------------------


class BenchPartition:
    """A led partition as the uploader sees it: every sealed segment is below the high watermark."""

    def __init__(self, log: PartitionLog) -> None:
        self.topic = "bench"
        self.index = 0
        self.topic_id = str(uuid.uuid4())
        self.log = log
        self.leader_epoch = 0
        self.high_watermark = log.log_end_offset
        self.is_leader = True


def write_segments(directory: Path, batches: list[bytes], segments: int, segment_mib: int) -> PartitionLog:
    log = PartitionLog.open(
        directory / "bench-0",
        LogConfig(segment_bytes=segment_mib * MIB, file_delete_delay_ms=0),
        topic="bench",
    )
    number = 0
    while len(log.segments) <= segments:
        log.append(batches[number % DISTINCT_BATCHES])
        number += 1
    return log


def time_uploader(log: PartitionLog, settings: AwsSettings, manifest: ManifestStore) -> float:
    partition = BenchPartition(log)

    async def upload() -> float:
        async with SegmentObjectStore(settings) as objects:
            uploader = PartitionUploader(partition, manifest, objects)
            start = time.perf_counter()
            committed = await uploader.run_once()
            elapsed = time.perf_counter() - start
            assert len(committed) == len(log.segments) - 1
            await objects.delete_objects([key for row in committed for key in (row.log_key, row.indexes_key)])
            return elapsed

    return asyncio.run(upload())


def time_put_object(contents: list[bytes], settings: AwsSettings) -> float:
    s3 = boto3.client("s3", **settings.boto3_kwargs())
    keys = [f"raw/{uuid.uuid4()}" for _ in contents]
    start = time.perf_counter()
    for key, body in zip(keys, contents, strict=True):
        s3.put_object(Bucket=settings.bucket, Key=key, Body=body)
    elapsed = time.perf_counter() - start
    s3.delete_objects(Bucket=settings.bucket, Delete={"Objects": [{"Key": key} for key in keys]})
    return elapsed


def bench_upload(args: argparse.Namespace, batches: list[bytes], directory: Path) -> dict[str, object]:
    for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
        os.environ.setdefault(name, value)
    moto = start_moto_server("127.0.0.1", 0, log_path=directory / "moto.log")
    try:
        settings = AwsSettings(moto.endpoint_url, "us-east-1", "bench", "bench-")
        boto3.client("s3", **settings.boto3_kwargs()).create_bucket(Bucket=settings.bucket)
        manifest = ManifestStore(settings)
        manifest.ensure_table()
        log = write_segments(directory, batches, args.segments, args.segment_mib)
        sealed = log.segments[:-1]
        contents = [segment.log_path.read_bytes() for segment in sealed]
        total_bytes = sum(len(c) for c in contents)
        time_put_object(contents[:1], settings)  # warm-up: connections, moto's first bucket write
        raw_s, tiering_s = [], []
        for run in range(args.runs):
            pair = [
                ("raw", lambda: time_put_object(contents, settings)),
                ("tiering", lambda: time_uploader(log, settings, manifest)),
            ]
            for name, measure in pair if run % 2 == 0 else reversed(pair):
                (raw_s if name == "raw" else tiering_s).append(measure())
        log.close()
    finally:
        moto.stop()
    raw_rates = [round(total_bytes / MIB / s, 1) for s in raw_s]
    tiering_rates = [round(total_bytes / MIB / s, 1) for s in tiering_s]
    raw_median, tiering_median = statistics.median(raw_rates), statistics.median(tiering_rates)
    return {
        "paired_ratios": paired_ratios(tiering_s, raw_s),
        "median_paired_ratio": statistics.median(paired_ratios(tiering_s, raw_s)),
        "segments": len(contents),
        "bytes_per_run": total_bytes,
        "raw_put_object_mib_per_s": raw_rates,
        "tiering_mib_per_s": tiering_rates,
        "raw_median_mib_per_s": raw_median,
        "tiering_median_mib_per_s": tiering_median,
        "ratio": round(tiering_median / raw_median, 3),
        "goal": 0.8,
    }


# -- remote fetch ----------------------------------------------------------------------------


async def produce_everywhere(stack: LocalStack, batches: list[bytes], count: int) -> None:
    async with FloeClient(stack.bootstrap_servers) as client:
        for topic, configs in (
            (
                TIERED_TOPIC,
                {"remote.storage.enable": "true", "segment.bytes": str(FETCH_SEGMENT_MIB * MIB), "local.retention.ms": "1"},
            ),
            (LOCAL_TOPIC, {"segment.bytes": str(FETCH_SEGMENT_MIB * MIB)}),
        ):
            await client.create_topic(topic, 1, 1, configs=configs)
        for number in range(count):
            batch = batches[number % DISTINCT_BATCHES]
            await client.produce(TIERED_TOPIC, batch, 0)
            await client.produce(LOCAL_TOPIC, batch, 0)


async def fetch_range(stack: LocalStack, topic: str, end_offset: int) -> tuple[float, int]:
    async with FloeClient(stack.bootstrap_servers) as client:
        offset, received = 0, 0
        start = time.perf_counter()
        while offset < end_offset:
            result = await client.fetch_raw(topic, 0, offset, max_bytes=FETCH_BYTES, max_wait_ms=0)
            received += len(result.records)
            offset = result.next_offset
        return time.perf_counter() - start, received


def time_get_objects(settings: AwsSettings, keys: list[str]) -> float:
    """boto3 get_object of the tiered segment objects, whole and one after the other: what the object
    store serves to a single plain reader, the ceiling remote fetch works under."""
    s3 = boto3.client("s3", **settings.boto3_kwargs())
    start = time.perf_counter()
    for key in keys:
        s3.get_object(Bucket=settings.bucket, Key=key)["Body"].read()
    return time.perf_counter() - start


def wait_for_tiering(
    stack: LocalStack, manifest: ManifestStore, topic_id: str, timeout_s: float = 300.0
) -> int:
    """Wait until every sealed segment of the tiered topic is in S3 and gone locally; return the remote end."""
    directory = stack.processes[1].data_dir / f"{TIERED_TOPIC}-0"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        local = sorted(int(path.stem) for path in directory.glob("*.log"))
        head = manifest.partition_head(topic_id, 0)
        if head is not None and len(local) == 1 and head.end_offset + 1 == local[0]:
            return head.end_offset + 1
        time.sleep(0.2)
    raise RuntimeError("tiering did not finish")


def bench_remote_fetch(args: argparse.Namespace, batches: list[bytes], directory: Path) -> dict[str, object]:
    from broker_core.metadata.store import MetadataStore

    overrides = {"remote.log.manager.task.interval.ms": "200", **dict(args.set)}
    stack = LocalStack(directory=directory / "stack", overrides=overrides)
    stack.start()
    try:
        count = args.fetch_mib * MIB // BATCH_BYTES
        asyncio.run(produce_everywhere(stack, batches, count))
        topic_id = MetadataStore(stack.aws).get_topic(TIERED_TOPIC).topic_id
        manifest = ManifestStore(stack.aws)
        end_offset = wait_for_tiering(stack, manifest, topic_id)
        log_keys = [row.log_key for row in manifest.list_segments(topic_id, 0)]
        remote_s, local_s, get_s = [], [], []
        received = 0
        for run in range(args.runs):
            pair = [("remote", TIERED_TOPIC), ("local", LOCAL_TOPIC)]
            for name, topic in pair if run % 2 == 0 else reversed(pair):
                seconds, received = asyncio.run(fetch_range(stack, topic, end_offset))
                (remote_s if name == "remote" else local_s).append(seconds)
            get_s.append(time_get_objects(stack.aws, log_keys))
    finally:
        stack.stop(save_state=False)
    remote_rates = [round(received / MIB / s, 1) for s in remote_s]
    local_rates = [round(received / MIB / s, 1) for s in local_s]
    remote_median, local_median = statistics.median(remote_rates), statistics.median(local_rates)
    get_rates = [round(received / MIB / s, 1) for s in get_s]
    return {
        "s3_get_object_mib_per_s": get_rates,
        "s3_get_object_median_mib_per_s": statistics.median(get_rates),
        "remote_vs_get_object": round(remote_median / statistics.median(get_rates), 3),
        "paired_ratios": paired_ratios(remote_s, local_s),
        "median_paired_ratio": statistics.median(paired_ratios(remote_s, local_s)),
        "bytes_per_run": received,
        "offsets_per_run": end_offset,
        "fetch_max_bytes": FETCH_BYTES,
        "remote_mib_per_s": remote_rates,
        "local_mib_per_s": local_rates,
        "remote_median_mib_per_s": remote_median,
        "local_median_mib_per_s": local_median,
        "ratio": round(remote_median / local_median, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--segments", type=int, default=4, help="sealed segments tiered per upload run")
    parser.add_argument("--segment-mib", type=int, default=32)
    parser.add_argument(
        "--fetch-mib", type=int, default=64,
        help=f"data produced to each topic for the fetch bench (more than {FETCH_SEGMENT_MIB}: segments of that size are tiered)"
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="directory for the files (default: a temp dir)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        type=lambda pair: tuple(pair.split("=", 1)),
        metavar="KEY=VALUE",
        help="a broker setting for the remote fetch stack, e.g. remote.log.reader.chunk.bytes=8388608",
    )
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "results" / "tiering.json")
    args = parser.parse_args()
    if args.fetch_mib <= FETCH_SEGMENT_MIB:
        # Nothing would be sealed, so nothing tiered: the fetch bench would wait for S3 in vain.
        parser.error(f"--fetch-mib must be more than the fetch topics' {FETCH_SEGMENT_MIB} MiB segments")

    batches = build_batches()
    directory = Path(tempfile.mkdtemp(prefix="floe-tiering-bench-", dir=args.dir))
    try:
        upload = bench_upload(args, batches, directory)
        print(
            f"upload        put_object {upload['raw_median_mib_per_s']:8.1f} MiB/s   tiering "
            f"{upload['tiering_median_mib_per_s']:8.1f} MiB/s   ratio of medians {upload['ratio']:.3f}   "
            f"median paired ratio {upload['median_paired_ratio']:.3f} (goal >= 0.8)"
        )
        fetch = bench_remote_fetch(args, batches, directory)
        print(
            f"remote fetch  local      {fetch['local_median_mib_per_s']:8.1f} MiB/s   remote  "
            f"{fetch['remote_median_mib_per_s']:8.1f} MiB/s   ratio of medians {fetch['ratio']:.3f}   "
            f"median paired ratio {fetch['median_paired_ratio']:.3f}   (get_object of the same objects "
            f"{fetch['s3_get_object_median_mib_per_s']:.1f} MiB/s)"
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    result = {
        **result_header("tiering"),
        "runs": args.runs,
        "upload": upload,
        "remote_fetch": fetch,
    }
    write_result(args.output, result)
    print(f"wrote {args.output.name}")


if __name__ == "__main__":
    main()
