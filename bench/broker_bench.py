"""Broker throughput and memory against Redis Streams and raw sendfile, side by side in one run.

- **Produce**: N records of 100 bytes, acks=1, one partition on one broker, loaded by librdkafka
  twice: `kcat -P` from a file and confluent-kafka's Producer from Python (both tuned for batching:
  1 MB batches, 20 ms linger, queues deep enough for all N); the faster one is the headline. Peer:
  Redis Streams (`redis-server --appendonly yes --appendfsync no`) loaded by
  `redis-benchmark -P 256 -c 4 -n N XADD <key> * field <100-byte value>`.
- **Consume**: the same records read back from offset 0 by the same client (kcat -C, and
  confluent-kafka's Consumer for its topic) against Redis `XRANGE ... COUNT 10000` paged from Python
  (redis-py with the hiredis parser).
- **Raw fetch**: a minimal Fetch loop over a blocking socket using Floe's own framing (8 MiB per
  fetch, bytes discarded once the next offset is known) against `os.sendfile` of the same segment
  files in 8 MiB chunks to a loopback socket from another process.
- **Memory**: the broker's RSS (psutil), sampled every 10 ms during the produce runs.

Runs alternate which side goes first; the table shows medians. Results go to
bench/results/broker_bench.json.

    .venv/bin/python bench/broker_bench.py [--runs 3] [--records 2000000]
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import confluent_kafka  # noqa: E402
import psutil  # noqa: E402
import redis  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.machine import machine_info, result_header, write_result  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.protocol.api_keys import ApiKey  # noqa: E402
from broker_core.protocol.framing import decode_response, encode_request  # noqa: E402
from broker_core.protocol.messages import build_entity, request_class  # noqa: E402
from broker_core.records import iter_headers  # noqa: E402

VALUE_BYTES = 100
FETCH_BYTES = 8 * 1024 * 1024  # per Fetch and per sendfile call; librdkafka's max.partition.fetch.bytes below
REDIS_XRANGE_COUNT = 10_000
FETCH_VERSION, LIST_OFFSETS_VERSION = 12, 7
SIZE = struct.Struct(">i")
MB = 1_000_000
# librdkafka settings for both loaders: big batches, a short linger, queues that hold every record.
PRODUCER_SETTINGS = {
    "acks": "1", "linger.ms": "20", "batch.size": "1000000", "batch.num.messages": "1000000",
    "queue.buffering.max.messages": "2100000", "queue.buffering.max.kbytes": "2097151",
}
KCAT_CONSUMER_SETTINGS = {"fetch.max.bytes": "52428800", "max.partition.fetch.bytes": str(FETCH_BYTES),
                          "queued.min.messages": "1000000"}
CONFLUENT_CONSUMER_SETTINGS = {**KCAT_CONSUMER_SETTINGS, "fetch.queue.backoff.ms": "10",
                               "queued.max.messages.kbytes": "1048576"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kcat_options(settings: dict[str, str]) -> list[str]:
    return [arg for key, value in settings.items() for arg in ("-X", f"{key}={value}")]


class RssSampler:
    """The peak RSS of one process, sampled on a thread every 10 ms while active."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RssSampler:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            self._stop.wait(0.01)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


# Floe ------------------------------------------------------------------------------------------


class RawBrokerConnection:
    """One blocking socket to the broker, speaking Fetch and ListOffsets through Floe's framing."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0
        self.buffer = bytearray(2 * FETCH_BYTES)

    def close(self) -> None:
        self.sock.close()

    def _call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, "broker-bench",
                                         build_entity(request_class(api_key, version), body)))
        size = SIZE.unpack(self._receive(4))[0]
        # kio reads only read-only buffers, so the frame is viewed through toreadonly().
        _, response = decode_response(api_key, version, self._receive(size).toreadonly())
        return response

    def _receive(self, count: int) -> memoryview:
        if count > len(self.buffer):
            self.buffer = bytearray(count)
        view = memoryview(self.buffer)[:count]
        received = 0
        while received < count:
            got = self.sock.recv_into(view[received:], count - received)
            if not got:
                raise ConnectionError("broker closed the connection")
            received += got
        return view

    def log_end_offset(self, topic: str) -> int:
        response = self._call(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        return response.topics[0].partitions[0].offset

    def fetch(self, topic: str, offset: int) -> tuple[int, int]:
        """(records bytes received, next offset) for one Fetch of FETCH_BYTES at ``offset``."""
        response = self._call(ApiKey.FETCH, FETCH_VERSION, {
            "replica_id": -1, "max_wait": datetime.timedelta(0), "min_bytes": 1, "max_bytes": FETCH_BYTES,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": FETCH_BYTES}]}],
        })
        records = response.responses[0].partitions[0].records or b""
        next_offset = offset
        for _, header in iter_headers(records):
            next_offset = header.next_offset
        return len(records), next_offset


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=60)


def floe_produce_kcat(stack: LocalStack, topic: str, records_file: Path, records: int,
                      raw: RawBrokerConnection) -> dict[str, float]:
    create_topic(stack.bootstrap_servers, topic)
    with RssSampler(stack.processes[1].pid) as rss:
        started = time.perf_counter()
        subprocess.run(["kcat", "-b", stack.bootstrap_servers, "-P", "-t", topic, "-p", "0", "-l", str(records_file),
                        *kcat_options(PRODUCER_SETTINGS)], check=True, stdin=subprocess.DEVNULL)
        elapsed = time.perf_counter() - started
    if raw.log_end_offset(topic) != records:
        raise RuntimeError(f"{topic} holds {raw.log_end_offset(topic)} records, not {records}")
    return {"records_per_s": records / elapsed, "seconds": elapsed, "broker_peak_rss_mb": rss.peak / MB}


def floe_produce_confluent(stack: LocalStack, topic: str, records: int, raw: RawBrokerConnection) -> dict[str, float]:
    create_topic(stack.bootstrap_servers, topic)
    value = b"v" * VALUE_BYTES
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, **PRODUCER_SETTINGS})
    produce = producer.produce
    with RssSampler(stack.processes[1].pid) as rss:
        started = time.perf_counter()
        for _ in range(records):
            produce(topic, value, partition=0)
        if producer.flush(120) != 0:
            raise RuntimeError("confluent-kafka producer did not deliver every record")
        elapsed = time.perf_counter() - started
    if raw.log_end_offset(topic) != records:
        raise RuntimeError(f"{topic} holds {raw.log_end_offset(topic)} records, not {records}")
    return {"records_per_s": records / elapsed, "seconds": elapsed, "broker_peak_rss_mb": rss.peak / MB}


def floe_consume_kcat(stack: LocalStack, topic: str, records: int) -> dict[str, float]:
    started = time.perf_counter()
    subprocess.run(["kcat", "-b", stack.bootstrap_servers, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                    "-c", str(records), "-q", "-f", "%s\n", *kcat_options(KCAT_CONSUMER_SETTINGS)],
                   check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=600)
    elapsed = time.perf_counter() - started
    return {"records_per_s": records / elapsed, "seconds": elapsed}


def floe_consume_confluent(stack: LocalStack, topic: str, records: int) -> dict[str, float]:
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "broker-bench",
                         "enable.auto.commit": False, **CONFLUENT_CONSUMER_SETTINGS})
    consumer.assign([TopicPartition(topic, 0, 0)])
    received = 0
    started = time.perf_counter()
    while received < records:
        received += len(consumer.consume(num_messages=100_000, timeout=1.0))
    elapsed = time.perf_counter() - started
    consumer.close()
    return {"records_per_s": records / elapsed, "seconds": elapsed}


def floe_raw_fetch(raw: RawBrokerConnection, topic: str, records: int) -> dict[str, float]:
    offset, total = 0, 0
    started = time.perf_counter()
    while offset < records:
        received, offset = raw.fetch(topic, offset)
        total += received
    elapsed = time.perf_counter() - started
    return {"mb_per_s": total / elapsed / MB, "bytes": total, "seconds": elapsed}


# peers -----------------------------------------------------------------------------------------


def _serve_sendfile(listener: socket.socket, paths: list[str]) -> None:
    connection, _ = listener.accept()
    with connection:
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                offset, size = 0, os.fstat(fd).st_size
                while offset < size:
                    offset += os.sendfile(connection.fileno(), fd, offset, min(FETCH_BYTES, size - offset))
            finally:
                os.close(fd)


def raw_sendfile(paths: list[Path]) -> dict[str, float]:
    """The segment files sent with os.sendfile from another process to a loopback socket that this one drains."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    sender = multiprocessing.get_context("fork").Process(target=_serve_sendfile,
                                                         args=(listener, [str(p) for p in paths]))
    sender.start()
    buffer = bytearray(FETCH_BYTES)
    total = 0
    started = time.perf_counter()
    with socket.create_connection(listener.getsockname()) as sock:
        while True:
            got = sock.recv_into(buffer)
            if not got:
                break
            total += got
    elapsed = time.perf_counter() - started
    sender.join()
    listener.close()
    return {"mb_per_s": total / elapsed / MB, "bytes": total, "seconds": elapsed}


class RedisPeer:
    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--appendonly", "yes",
             "--appendfsync", "no", "--save", "", "--dir", str(directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.version = self.client.info("server")["redis_version"]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)

    def produce(self, key: str, records: int) -> dict[str, float]:
        value = "v" * VALUE_BYTES
        started = time.perf_counter()
        subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.port), "-P", "256", "-c", "4",
                        "-n", str(records), "-q", "XADD", key, "*", "field", value],
                       check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        elapsed = time.perf_counter() - started
        # -P 256 over 4 clients may add a few entries past N; count what is there.
        written = self.client.xlen(key)
        return {"records_per_s": written / elapsed, "seconds": elapsed, "records": written}

    def consume(self, key: str) -> dict[str, float]:
        xrange = self.client.xrange
        received, start = 0, "-"
        started = time.perf_counter()
        while True:
            entries = xrange(key, min=start, max="+", count=REDIS_XRANGE_COUNT)
            if not entries:
                break
            received += len(entries)
            start = b"(" + entries[-1][0]
        elapsed = time.perf_counter() - started
        return {"records_per_s": received / elapsed, "seconds": elapsed, "records": received}


# the run ---------------------------------------------------------------------------------------


def one_run(number: int, stack: LocalStack, peer: RedisPeer, records_file: Path, records: int) -> dict[str, Any]:
    raw = RawBrokerConnection(stack.host, stack.processes[1].port)
    kcat_topic, confluent_topic, key = f"bench-kcat-{number}", f"bench-confluent-{number}", f"bench-{number}"
    result: dict[str, Any] = {}
    floe_first = number % 2 == 0
    try:
        for side in ("floe", "redis") if floe_first else ("redis", "floe"):
            if side == "floe":
                result["produce_kcat"] = floe_produce_kcat(stack, kcat_topic, records_file, records, raw)
                result["produce_confluent"] = floe_produce_confluent(stack, confluent_topic, records, raw)
            else:
                result["produce_redis"] = peer.produce(key, records)
        for side in ("floe", "redis") if floe_first else ("redis", "floe"):
            if side == "floe":
                result["consume_kcat"] = floe_consume_kcat(stack, kcat_topic, records)
                result["consume_confluent"] = floe_consume_confluent(stack, confluent_topic, records)
            else:
                result["consume_redis"] = peer.consume(key)
        segments = sorted((stack.processes[1].data_dir / f"{kcat_topic}-0").glob("*.log"))
        for side in ("floe", "sendfile") if floe_first else ("sendfile", "floe"):
            if side == "floe":
                result["raw_fetch"] = floe_raw_fetch(raw, kcat_topic, records)
            else:
                result["raw_sendfile"] = raw_sendfile(segments)
    finally:
        raw.close()
        peer.client.delete(key)
    return result


def median_of(runs: list[dict[str, Any]], measure: str, field: str) -> float:
    return statistics.median(run[measure][field] for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "results" / "broker_bench.json")
    args = parser.parse_args()
    for tool in ("kcat", "redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (make sysdeps)")

    with tempfile.TemporaryDirectory(prefix="broker-bench-") as scratch:
        directory = Path(scratch)
        records_file = directory / "records.txt"
        with records_file.open("wb") as out:
            line = b"v" * VALUE_BYTES + b"\n"
            out.write(line * args.records)
        stack = LocalStack(directory=directory / "stack", brokers=1)
        stack.start()
        peer = RedisPeer(directory / "redis")
        try:
            idle_rss = psutil.Process(stack.processes[1].pid).memory_info().rss / MB
            runs = []
            for number in range(args.runs):
                run = one_run(number, stack, peer, records_file, args.records)
                runs.append(run)
                print(f"run {number + 1}/{args.runs}: " + ", ".join(
                    f"{name} {value.get('records_per_s', value.get('mb_per_s')):,.0f}" for name, value in run.items()),
                    flush=True)
        finally:
            peer.stop()
            stack.stop(save_state=False)

    median = {
        "produce_kcat_records_per_s": median_of(runs, "produce_kcat", "records_per_s"),
        "produce_confluent_records_per_s": median_of(runs, "produce_confluent", "records_per_s"),
        "produce_redis_records_per_s": median_of(runs, "produce_redis", "records_per_s"),
        "consume_kcat_records_per_s": median_of(runs, "consume_kcat", "records_per_s"),
        "consume_confluent_records_per_s": median_of(runs, "consume_confluent", "records_per_s"),
        "consume_redis_records_per_s": median_of(runs, "consume_redis", "records_per_s"),
        "raw_fetch_mb_per_s": median_of(runs, "raw_fetch", "mb_per_s"),
        "raw_sendfile_mb_per_s": median_of(runs, "raw_sendfile", "mb_per_s"),
    }
    produce_client = "kcat" if median["produce_kcat_records_per_s"] >= median["produce_confluent_records_per_s"] \
        else "confluent"
    peak_rss = max(max(run["produce_kcat"]["broker_peak_rss_mb"], run["produce_confluent"]["broker_peak_rss_mb"])
                   for run in runs)
    ratios = {
        "produce": median[f"produce_{produce_client}_records_per_s"] / median["produce_redis_records_per_s"],
        "consume": median[f"consume_{produce_client}_records_per_s"] / median["consume_redis_records_per_s"],
        "raw_fetch": median["raw_fetch_mb_per_s"] / median["raw_sendfile_mb_per_s"],
    }
    goals = {"produce": 2.0, "consume": 2.0, "raw_fetch": 0.5, "broker_peak_rss_mb": 150.0}
    result = {
        **result_header("broker_bench", {**machine_info(), "load_average_at_end": os.getloadavg()}),
        "versions": {"librdkafka_kcat": subprocess.run(["kcat", "-V"], capture_output=True, text=True).stdout.split(
            "librdkafka ")[1].split()[0], "librdkafka_confluent": confluent_kafka.libversion()[0],
            "redis": peer.version},
        "settings": {"records": args.records, "value_bytes": VALUE_BYTES, "runs": args.runs,
                     "producer": PRODUCER_SETTINGS, "kcat_consumer": KCAT_CONSUMER_SETTINGS,
                     "confluent_consumer": CONFLUENT_CONSUMER_SETTINGS, "fetch_bytes": FETCH_BYTES,
                     "redis_xrange_count": REDIS_XRANGE_COUNT},
        "headline_client": produce_client,
        "runs": runs,
        "median": median,
        "broker_idle_rss_mb": idle_rss,
        "broker_peak_rss_mb": peak_rss,
        "ratios": ratios,
        "goals": goals,
        "goals_met": {"produce": ratios["produce"] >= goals["produce"], "consume": ratios["consume"] >= goals["consume"],
                      "raw_fetch": ratios["raw_fetch"] >= goals["raw_fetch"],
                      "broker_peak_rss_mb": peak_rss <= goals["broker_peak_rss_mb"]},
    }
    write_result(args.output, result)

    client = "kcat" if produce_client == "kcat" else "confluent-kafka"
    print(f"\nmedians of {args.runs} runs, {args.records:,} records of {VALUE_BYTES} bytes (headline client: {client})")
    print(f"produce  Floe {median[f'produce_{produce_client}_records_per_s']:>12,.0f} rec/s   Redis "
          f"{median['produce_redis_records_per_s']:>12,.0f} rec/s   ratio {ratios['produce']:.2f} (goal >= 2)")
    print(f"consume  Floe {median[f'consume_{produce_client}_records_per_s']:>12,.0f} rec/s   Redis "
          f"{median['consume_redis_records_per_s']:>12,.0f} rec/s   ratio {ratios['consume']:.2f} (goal >= 2)")
    print(f"fetch    Floe {median['raw_fetch_mb_per_s']:>12,.0f} MB/s    sendfile "
          f"{median['raw_sendfile_mb_per_s']:>9,.0f} MB/s    ratio {ratios['raw_fetch']:.2f} (goal >= 0.5)")
    print(f"memory   broker peak RSS {peak_rss:.0f} MB (idle {idle_rss:.0f} MB; goal <= 150 MB)")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
