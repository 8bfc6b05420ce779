"""Partition log throughput against the raw file system peer, measured in the same run.

Write path: PartitionLog.append of pre-built 16 KiB RecordBatch v2 batches of 100-byte records (header
parse, CRC-32C check, offset rewrite, write, index update) against os.write of the very same bytes to a
file in the same directory. Read path: PartitionLog.read (index lookup, header walk to whole-batch
bounds) plus os.sendfile to a loopback TCP socket, against os.sendfile of the same file in the same
chunk size to the same kind of socket; a thread drains the receiving end. Both paths run warm (page
cache), without fsync, alternating which side goes first. Reports medians and their ratios and writes
bench/results/log_append.json.

    .venv/bin/python bench/log_append.py [--runs 5] [--mib 1024]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import cpu_pressure, result_header, write_result  # noqa: E402
from broker_core.log import LogConfig, PartitionLog  # noqa: E402
from broker_core.records.batch import SimpleRecord, build_batch  # noqa: E402

BATCH_BYTES = 16 * 1024
RECORD_VALUE_BYTES = 100
DISTINCT_BATCHES = 64
FETCH_BYTES = 1024 * 1024  # a consumer's max.partition.fetch.bytes default
MIB = 1024 * 1024


def build_batches() -> list[bytes]:
    """DISTINCT_BATCHES batches of at most 16 KiB each with 100-byte values, built before any timing."""
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


def write_raw(directory: Path, batches: list[bytes], count: int) -> float:
    path = directory / "raw.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        started = time.perf_counter()
        for number in range(count):
            os.write(fd, batches[number % DISTINCT_BATCHES])
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
    path.unlink()
    return elapsed


def write_log(directory: Path, batches: list[bytes], count: int) -> float:
    log_directory = directory / "bench-0"
    log = PartitionLog.open(log_directory, LogConfig(), topic="bench")
    append = log.append
    started = time.perf_counter()
    for number in range(count):
        append(batches[number % DISTINCT_BATCHES])
    elapsed = time.perf_counter() - started
    # Drop the files like the raw side does, without close()'s fsync: a gigabyte of writeback per run
    # would disturb the runs that follow.
    for segment in log.segments:
        segment.close()
    shutil.rmtree(log_directory)
    return elapsed


class LoopbackSink:
    """A connected loopback TCP pair whose receiving end a thread drains until told to stop."""

    def __init__(self) -> None:
        listener = socket.create_server(("127.0.0.1", 0))
        self.sender = socket.create_connection(listener.getsockname())
        self.receiver, _ = listener.accept()
        listener.close()
        self.received = 0
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        buffer = bytearray(4 * MIB)
        while True:
            count = self.receiver.recv_into(buffer)
            if not count:
                return
            self.received += count

    def close(self) -> int:
        self.sender.shutdown(socket.SHUT_WR)
        self._thread.join()
        self.sender.close()
        self.receiver.close()
        return self.received


def send_all(sock_fd: int, fd: int, position: int, length: int) -> None:
    while length:
        sent = os.sendfile(sock_fd, fd, position, length)
        position += sent
        length -= sent


def fetch_ranges(log: PartitionLog) -> list[tuple[int, int]]:
    """The (position, length) byte ranges that reading the whole log FETCH_BYTES at a time sends.

    The raw peer sends exactly these ranges, so the two read paths move the same bytes in the same
    pieces and differ only by the log's offset lookups (exact 1 MiB pieces measured differently on
    loopback than the log's batch-aligned ones, in either direction, depending on the kernel).
    """
    ranges, offset = [], 0
    while offset < log.log_end_offset:
        file_slice = log.read(offset, FETCH_BYTES)
        ranges.append((file_slice.position, file_slice.length))
        offset = file_slice.last_offset + 1
    return ranges


def read_raw(path: Path, size: int, ranges: list[tuple[int, int]]) -> float:
    sink = LoopbackSink()
    fd = os.open(path, os.O_RDONLY)
    sock_fd = sink.sender.fileno()
    started = time.perf_counter()
    for position, length in ranges:
        send_all(sock_fd, fd, position, length)
    received = sink.close()
    elapsed = time.perf_counter() - started
    os.close(fd)
    assert received == size, (received, size)
    return elapsed


def read_log(log: PartitionLog, size: int) -> float:
    sink = LoopbackSink()
    sock_fd = sink.sender.fileno()
    read = log.read
    end = log.log_end_offset
    started = time.perf_counter()
    offset = 0
    while offset < end:
        file_slice = read(offset, FETCH_BYTES)
        assert file_slice is not None
        send_all(sock_fd, file_slice.fd, file_slice.position, file_slice.length)
        offset = file_slice.last_offset + 1
    received = sink.close()
    elapsed = time.perf_counter() - started
    assert received == size, (received, size)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, default=1024, help="data written and read per run")
    parser.add_argument(
        "--dir", type=Path, default=None, help="directory for the files (default: a temp dir)"
    )
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "results" / "log_append.json")
    args = parser.parse_args()

    pressure_before = cpu_pressure()
    batches = build_batches()
    batch_size = sum(len(b) for b in batches) / len(batches)
    count = int(args.mib * MIB // batch_size)
    total_bytes = sum(len(batches[n % DISTINCT_BATCHES]) for n in range(count))
    directory = Path(tempfile.mkdtemp(prefix="floe-bench-", dir=args.dir))
    try:
        write_raw_s, write_log_s = [], []
        for run in range(args.runs):
            pair = [("raw", write_raw), ("log", write_log)]
            for name, function in pair if run % 2 == 0 else reversed(pair):
                (write_raw_s if name == "raw" else write_log_s).append(function(directory, batches, count))

        # One segment for the whole read set, so the raw peer can send that very file.
        log = PartitionLog.open(directory / "read-0", LogConfig(segment_bytes=2**31 - 1), topic="bench")
        for number in range(count):
            log.append(batches[number % DISTINCT_BATCHES])
        segment_path = log.active_segment.log_path
        assert len(log.segments) == 1 and segment_path.stat().st_size == total_bytes
        ranges = fetch_ranges(log)
        read_raw(segment_path, total_bytes, ranges)
        read_log(log, total_bytes)
        read_raw_s, read_log_s = [], []
        for run in range(args.runs):
            if run % 2 == 0:
                read_raw_s.append(read_raw(segment_path, total_bytes, ranges))
                read_log_s.append(read_log(log, total_bytes))
            else:
                read_log_s.append(read_log(log, total_bytes))
                read_raw_s.append(read_raw(segment_path, total_bytes, ranges))
        for segment in log.segments:
            segment.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    def mib_per_s(seconds: list[float]) -> list[float]:
        return [round(total_bytes / MIB / s, 1) for s in seconds]

    result: dict[str, object] = {
        **result_header("log_append"),
        "cpu_pressure_some_avg10_percent": {"before": pressure_before, "after": cpu_pressure()},
        "workload": {
            "bytes_per_run": total_bytes,
            "batches_per_run": count,
            "mean_batch_bytes": round(batch_size),
            "record_value_bytes": RECORD_VALUE_BYTES,
            "fetch_bytes": FETCH_BYTES,
            "runs": args.runs,
        },
    }
    for path_name, raw_s, log_s, goal in (
        ("write", write_raw_s, write_log_s, 0.6),
        ("read", read_raw_s, read_log_s, 0.8),
    ):
        raw_rates, log_rates = mib_per_s(raw_s), mib_per_s(log_s)
        raw_median, log_median = statistics.median(raw_rates), statistics.median(log_rates)
        ratio = round(log_median / raw_median, 3)
        result[path_name] = {
            "raw_mib_per_s": raw_rates,
            "log_mib_per_s": log_rates,
            "raw_median_mib_per_s": raw_median,
            "log_median_mib_per_s": log_median,
            "ratio": ratio,
            "goal": goal,
        }
        print(
            f"{path_name:5}  raw {raw_median:8.1f} MiB/s   log {log_median:8.1f} MiB/s   "
            f"ratio {ratio:.3f} (goal >= {goal})"
        )
    write_result(args.output, result)
    print(f"wrote {args.output.name}")


if __name__ == "__main__":
    main()
