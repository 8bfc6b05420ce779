"""`floe local demo` (`make demo`): every path of Floe on one machine, checked end to end.

The demo starts a fresh local stack (moto, three brokers, the HTTP adapter) and then:

1. creates topic ``orders`` over HTTP: 6 partitions, replication factor 3, small segments that
   also roll by time, tiering on;
2. produces orders as JSON through the HTTP front end (500-record requests from a few concurrent
   clients) and through a Kafka client (librdkafka via confluent-kafka, acks=all, idempotent,
   Kafka's murmur2 partitioner), with progress bars;
3. consumes every record with a consumer group (librdkafka, the brokers' classic group protocol),
   keeping a count and a checksum per partition, and commits the group's offsets;
4. seals the last segments (once ``segment.ms`` has passed, one marker record per partition
   rolls them) and waits until the brokers have tiered every segment holding demo records to S3;
5. runs the example Spark job (``emr_jobs.jobs.topic_to_parquet``) over the S3 segments, reads its
   Parquet output and compares it record for record (count and checksum per partition) with what
   the group consumed; and reads offset 0 over HTTP, which now comes straight from S3;
6. prints a summary table and exits 0 only if every check holds.

It needs a JDK for Spark and loopback ports; when one is missing it says so and exits 2.
``--size small`` runs the same steps on fewer records (for CI).
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from broker_core.local_stack import LocalStack, StackError

TOPIC = "orders"
PARTITIONS = 6
REPLICATION_FACTOR = 3
GROUP = "orders-demo"
HTTP_BATCH = 500
HTTP_CLIENTS = 4
SEGMENT_MS = 10_000
CUSTOMERS = 5_000
CONSUME_IDLE_TIMEOUT_S = 120.0
TIERING_TIMEOUT_S = 300.0
SPARK_TIMEOUT_S = 900.0

BROKER_OVERRIDES = {
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "1000",
    "metadata.poll.interval.ms": "200",
    "remote.log.manager.task.interval.ms": "1000",
}


@dataclass(frozen=True)
class DemoSize:
    http_records: int
    kafka_records: int
    segment_bytes: int


SIZES = {
    "full": DemoSize(http_records=200_000, kafka_records=1_000_000, segment_bytes=4 * 1024 * 1024),
    "small": DemoSize(http_records=10_000, kafka_records=50_000, segment_bytes=256 * 1024),
}


class DemoError(Exception):
    """A step of the demo failed; the message says which and what to look at."""


class MissingPrerequisiteError(DemoError):
    """Something the demo needs is not installed or not available on this machine."""


@dataclass
class PartitionTally:
    """Records of one partition: how many, the highest offset, and a checksum of (offset, value)."""

    count: int = 0
    last_offset: int = -1
    checksum: int = 0

    def add(self, offset: int, value: bytes | None) -> None:
        self.count += 1
        self.last_offset = max(self.last_offset, offset)
        self.checksum = (self.checksum + zlib.crc32(value or b"", offset & 0xFFFFFFFF)) & 0xFFFFFFFFFFFFFFFF


@dataclass
class DemoReport:
    http_records: int = 0
    http_seconds: float = 0.0
    kafka_records: int = 0
    kafka_seconds: float = 0.0
    consumed: dict[int, PartitionTally] = field(default_factory=dict)
    consume_seconds: float = 0.0
    tiered_segments: int = 0
    tiered_bytes: int = 0
    tiering_wait_seconds: float = 0.0
    spark: dict[int, PartitionTally] = field(default_factory=dict)
    spark_seconds: float = 0.0
    fetch_source: str = ""

    @property
    def consumed_records(self) -> int:
        return sum(t.count for t in self.consumed.values())

    @property
    def spark_records(self) -> int:
        return sum(t.count for t in self.spark.values())

    @property
    def spark_matches(self) -> bool:
        return bool(self.consumed) and self.spark == self.consumed

    @property
    def passed(self) -> bool:
        return (self.consumed_records == self.http_records + self.kafka_records and self.spark_matches
                and self.fetch_source == "s3")


# prerequisites -----------------------------------------------------------------------------------


def check_prerequisites() -> None:
    """Raise MissingPrerequisiteError naming whatever the demo cannot run without."""
    java = shutil.which("java")
    if java is None:
        raise MissingPrerequisiteError(
            "Java is missing: the Spark step needs a JDK on PATH (`make sysdeps` or "
            "`apt-get install default-jre-headless`)")
    probe = subprocess.run([java, "-version"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        raise MissingPrerequisiteError(f"`java -version` failed: {probe.stderr.decode(errors='replace').strip()}")
    for module, extra in (("pyspark", "spark"), ("confluent_kafka", "dev"), ("aws_lambda_powertools", "lambda"),
                          ("moto", "local")):
        try:
            __import__(module)
        except ImportError:
            raise MissingPrerequisiteError(
                f"Python package {module} is missing: install the project with its extras "
                f"(pip install -e '.[dev]', which includes [{extra}])") from None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe_socket:
            probe_socket.bind(("127.0.0.1", 0))
            probe_socket.listen(1)
    except OSError as error:
        raise MissingPrerequisiteError(f"no loopback port can be opened on 127.0.0.1 ({error}); the local stack "
                                       "serves moto, the brokers and the HTTP API there") from error


# records -----------------------------------------------------------------------------------------


def order(order_id: int, channel: str) -> tuple[str, dict[str, Any]]:
    """(customer key, order) of one demo record."""
    customer = f"customer-{order_id % CUSTOMERS:04d}"
    return customer, {"order_id": order_id, "customer": customer, "amount_cents": (order_id * 7919) % 100_000 + 100,
                      "channel": channel}


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                    TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=console)


def _rate(done: int, started: float) -> str:
    elapsed = time.monotonic() - started
    return f"{done / elapsed:,.0f} rec/s" if elapsed > 0 else ""


class _HttpApi:
    """One keep-alive connection per thread to the HTTP adapter."""

    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self._local = threading.local()

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = http.client.HTTPConnection(self.host, self.port, timeout=120)
        data = None if body is None else json.dumps(body).encode()
        try:
            connection.request(method, path, body=data, headers=self.headers)
            response = connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            self._local.connection = None
            connection.close()
            raise
        return response.status, json.loads(payload) if payload else None


# steps -------------------------------------------------------------------------------------------


def create_topic(api: _HttpApi, size: DemoSize) -> None:
    status, body = api.request("POST", "/v1/topics", {
        "topic_name": TOPIC, "partitions_count": PARTITIONS, "replication_factor": REPLICATION_FACTOR,
        "configs": [{"name": name, "value": value} for name, value in {
            "remote.storage.enable": "true",
            "segment.bytes": str(size.segment_bytes),
            "segment.ms": str(SEGMENT_MS),
            "min.insync.replicas": "2",
        }.items()],
    })
    if status != 201:
        raise DemoError(f"creating topic {TOPIC} (RF {REPLICATION_FACTOR}) over HTTP failed with {status}: {body}")


def produce_over_http(api: _HttpApi, size: DemoSize, progress: Progress, report: DemoReport) -> None:
    task = progress.add_task("produce over HTTP (500/request)", total=size.http_records, rate="")
    started = time.monotonic()
    done = 0
    lock = threading.Lock()

    def send(first: int) -> None:
        nonlocal done
        records = []
        for order_id in range(first, min(first + HTTP_BATCH, size.http_records)):
            customer, value = order(order_id, "http")
            records.append({"key": {"type": "STRING", "data": customer}, "value": {"type": "JSON", "data": value}})
        status, body = api.request("POST", f"/v1/topics/{TOPIC}/records", {"records": records})
        if status != 200:
            raise DemoError(f"HTTP produce answered {status}: {body}")
        with lock:
            done += len(records)
            progress.update(task, completed=done, rate=_rate(done, started))

    with ThreadPoolExecutor(HTTP_CLIENTS, thread_name_prefix="demo-http") as pool:
        for future in [pool.submit(send, first) for first in range(0, size.http_records, HTTP_BATCH)]:
            future.result()
    report.http_records = done
    report.http_seconds = time.monotonic() - started


def produce_over_kafka(bootstrap: str, size: DemoSize, progress: Progress, report: DemoReport) -> None:
    from confluent_kafka import KafkaException, Producer

    task = progress.add_task("produce over Kafka (librdkafka)", total=size.kafka_records, rate="")
    failures: list[str] = []
    delivered = 0

    def on_delivery(error: Any, _message: Any) -> None:
        nonlocal delivered
        if error is not None:
            failures.append(str(error))
        else:
            delivered += 1

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "partitioner": "murmur2_random", "linger.ms": 20, "batch.size": 512 * 1024,
        "compression.type": "lz4", "message.timeout.ms": 120_000,
    })
    started = time.monotonic()
    first = size.http_records
    for order_id in range(first, first + size.kafka_records):
        customer, value = order(order_id, "kafka")
        while True:
            try:
                producer.produce(TOPIC, key=customer.encode(), value=json.dumps(value).encode(), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if order_id % 5_000 == 0:
            producer.poll(0)
            progress.update(task, completed=delivered, rate=_rate(delivered, started))
    while producer.flush(1.0):
        progress.update(task, completed=delivered, rate=_rate(delivered, started))
    progress.update(task, completed=delivered, rate=_rate(delivered, started))
    if failures:
        raise DemoError(f"{len(failures)} Kafka deliveries failed, the first: {failures[0]}")
    if delivered != size.kafka_records:
        raise KafkaException(f"{delivered} of {size.kafka_records} records were delivered")
    report.kafka_records = delivered
    report.kafka_seconds = time.monotonic() - started


def consume_with_group(bootstrap: str, expected: int, progress: Progress, report: DemoReport) -> None:
    from confluent_kafka import Consumer, KafkaError

    task = progress.add_task(f"consume with group {GROUP}", total=expected, rate="")
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 30_000, "fetch.max.bytes": 16 * 1024 * 1024,
    })
    consumer.subscribe([TOPIC])
    tallies = {partition: PartitionTally() for partition in range(PARTITIONS)}
    seen = 0
    started = last_progress = time.monotonic()
    try:
        while seen < expected:
            messages = consumer.consume(num_messages=10_000, timeout=1.0)
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise DemoError(f"the consumer failed: {error}")
                tallies[message.partition()].add(message.offset(), message.value())
                seen += 1
            if messages:
                last_progress = time.monotonic()
                progress.update(task, completed=seen, rate=_rate(seen, started))
            elif time.monotonic() - last_progress > CONSUME_IDLE_TIMEOUT_S:
                raise DemoError(f"the group consumed {seen} of {expected} records, then nothing for "
                                f"{CONSUME_IDLE_TIMEOUT_S:.0f}s")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    report.consumed = {p: t for p, t in tallies.items() if t.count}
    report.consume_seconds = time.monotonic() - started


def seal_and_wait_for_tiering(api: _HttpApi, stack: LocalStack, progress: Progress, report: DemoReport,
                              last_append: float) -> None:
    """Roll every partition's last segment (a marker record, once segment.ms has passed) and wait
    until S3 holds every offset below the markers."""
    from broker_core.metadata.store import MetadataStore
    from tiered_storage.manifest import ManifestStore

    task = progress.add_task("seal segments, wait for S3", total=PARTITIONS, rate="")
    time.sleep(max(0.0, last_append + SEGMENT_MS / 1000 + 1 - time.monotonic()))
    status, body = api.request("POST", f"/v1/topics/{TOPIC}/records", {"records": [
        {"partition_id": p, "value": {"type": "STRING", "data": "end of demo run"}} for p in range(PARTITIONS)]})
    if status != 200:
        raise DemoError(f"the marker records were refused with {status}: {body}")
    markers = {r["partition_id"]: r["offset"] for r in body["results"]}
    topic_id = MetadataStore(stack.aws).get_topic(TOPIC).topic_id
    manifest = ManifestStore(stack.aws)
    started = time.monotonic()
    while True:
        segments = {p: manifest.list_segments(topic_id, p) for p in range(PARTITIONS)}
        ready = [p for p, rows in segments.items() if rows and rows[-1].end_offset >= markers[p] - 1]
        progress.update(task, completed=len(ready), rate=f"{sum(len(r) for r in segments.values())} segments")
        if len(ready) == PARTITIONS:
            break
        if time.monotonic() - started > TIERING_TIMEOUT_S:
            raise DemoError(f"after {TIERING_TIMEOUT_S:.0f}s only partitions {ready} are tiered up to their markers; "
                            f"see the broker logs in {stack.directory / 'logs'}")
        time.sleep(1.0)
    report.tiered_segments = sum(len(rows) for rows in segments.values())
    report.tiered_bytes = sum(s.size_bytes for rows in segments.values() for s in rows)
    report.tiering_wait_seconds = time.monotonic() - started


def run_spark_job(stack: LocalStack, console: Console, report: DemoReport) -> None:
    import pyarrow.parquet as parquet

    output = stack.directory / "parquet" / TOPIC
    log_path = stack.directory / "logs" / "spark.log"
    command = [sys.executable, "-m", "emr_jobs.jobs.topic_to_parquet", "--stack", str(stack.directory),
               "--topic", TOPIC, "--output", str(output),
               # The step shows Spark reading S3 alone: the sealing markers past the tiered end stay out.
               "--tiered-only"]
    started = time.monotonic()
    with console.status("Spark: emr_jobs.jobs.topic_to_parquet over the S3 segments ..."), \
            open(log_path, "wb") as log_file:
        try:
            result = subprocess.run(command, stdout=log_file, stderr=subprocess.STDOUT, timeout=SPARK_TIMEOUT_S)
        except subprocess.TimeoutExpired as error:
            raise DemoError(f"the Spark job ran past {SPARK_TIMEOUT_S:.0f}s; see {log_path}") from error
    if result.returncode != 0:
        raise DemoError(f"the Spark job failed (exit {result.returncode}); see {log_path}")
    report.spark_seconds = time.monotonic() - started
    table = parquet.read_table(output, columns=["partition", "offset", "value"])
    tallies: dict[int, PartitionTally] = {}
    for batch in table.to_batches():
        columns = batch.to_pydict()
        for partition, offset, value in zip(columns["partition"], columns["offset"], columns["value"], strict=True):
            tallies.setdefault(partition, PartitionTally()).add(offset, value)
    report.spark = tallies


def fetch_offset_zero(api: _HttpApi, report: DemoReport) -> None:
    status, body = api.request("GET", f"/v1/topics/{TOPIC}/partitions/0/records?offset=0&max_bytes=1024")
    if status != 200:
        raise DemoError(f"fetching offset 0 over HTTP answered {status}: {body}")
    report.fetch_source = body["source"]


# the run -----------------------------------------------------------------------------------------


def summary(report: DemoReport) -> Table:
    def rate(records: int, seconds: float) -> str:
        return f"{records / seconds:,.0f} records/s" if seconds > 0 else ""

    table = Table(title="Floe demo", show_lines=False)
    table.add_column("step")
    table.add_column("records", justify="right")
    table.add_column("detail")
    table.add_row("produced over HTTP (front end)", f"{report.http_records:,}", rate(report.http_records,
                                                                                      report.http_seconds))
    table.add_row("produced over Kafka (librdkafka)", f"{report.kafka_records:,}", rate(report.kafka_records,
                                                                                         report.kafka_seconds))
    table.add_row(f"consumed by group {GROUP}", f"{report.consumed_records:,}",
                  rate(report.consumed_records, report.consume_seconds))
    table.add_row("tiered to S3", "", f"{report.tiered_segments} segments, {report.tiered_bytes / 2**20:,.1f} MiB, "
                                      f"{report.tiering_wait_seconds:.0f}s after sealing")
    table.add_row("read by Spark from S3", f"{report.spark_records:,}", f"{report.spark_seconds:.0f}s")
    table.add_row("Spark result = consumed records", "", "yes" if report.spark_matches else
                  "NO: counts or checksums differ per partition")
    table.add_row("HTTP fetch of offset 0", "", f"served from {report.fetch_source or '?'}")
    return table


def _run_steps(stack: LocalStack, size: DemoSize, console: Console, report: DemoReport) -> None:
    http = stack.describe()["http"]
    api = _HttpApi(http["url"], http["token"])
    create_topic(api, size)
    console.print(f"topic [bold]{TOPIC}[/]: {PARTITIONS} partitions, replication factor {REPLICATION_FACTOR}, "
                  f"{size.segment_bytes // 1024} KiB segments, tiering on")
    with _progress(console) as progress:
        produce_over_http(api, size, progress, report)
        produce_over_kafka(stack.bootstrap_servers, size, progress, report)
        last_append = time.monotonic()
        consume_with_group(stack.bootstrap_servers, report.http_records + report.kafka_records, progress, report)
        seal_and_wait_for_tiering(api, stack, progress, report, last_append)
    run_spark_job(stack, console, report)
    fetch_offset_zero(api, report)


def run_demo(size_name: str, directory: Path, console: Console | None = None) -> int:
    """Run the demo in a fresh stack under ``directory``; 0 when every check holds."""
    # Piped output (CI, a log file) keeps whole rows instead of wrapping at 80 columns.
    console = console or Console(width=None if sys.stdout.isatty() else 120)
    size = SIZES[size_name]
    try:
        check_prerequisites()
    except MissingPrerequisiteError as error:
        console.print(f"[bold red]floe local demo cannot run:[/] {error}")
        return 2
    directory = Path(directory)
    if directory.exists():
        shutil.rmtree(directory)
    stack = LocalStack(directory=directory, brokers=3, overrides=BROKER_OVERRIDES, http=True)
    report = DemoReport()
    try:
        with console.status("starting the local stack: moto, 3 brokers, the HTTP adapter ..."):
            stack.start()
        console.print(f"local stack up in {stack.directory}: brokers {stack.bootstrap_servers}, "
                      f"HTTP API {stack.http_url}")
        _run_steps(stack, size, console, report)
    except (DemoError, StackError) as error:
        console.print(summary(report))
        console.print(f"[bold red]demo failed:[/] {error}")
        return 1
    finally:
        stack.stop(save_state=False)
    console.print(summary(report))
    if not report.passed:
        console.print("[bold red]demo failed:[/] the records read back do not match the records written")
        return 1
    console.print("[bold green]every record written over HTTP and Kafka was consumed, tiered to S3 and read "
                  "back by Spark[/]")
    return 0
