"""Floe's running cost per GB ingested and per GB read, computed from what a real run of the local stack did.

The run: moto in server mode behind a metering proxy (`bench.aws_meter`: every S3 and DynamoDB
request counted by operation, DynamoDB capacity units computed by table), three broker processes,
one topic of 6 partitions, RF 3, min.insync.replicas=2, tiered to S3 (``remote.storage.enable``),
with small segments so that a few tens of MiB make as many segments as a few tens of GiB would make
at the 1 GiB default. Its phases, each counted apart:

1. ``idle``: the stack with its topic and no traffic, ``--idle-s`` seconds (the brokers' own
   heartbeats, metadata polls, controller lease: what a cluster costs per hour before any record);
2. ``produce``: ``--mib`` MiB of 1 KiB records with acks=all (confluent-kafka, librdkafka defaults);
3. ``tier``: until every sealed segment is in S3 (uploads and manifest commits);
4. ``consume_local``: a consumer group reads everything from the brokers' disks;
5. ``evict``: ``local.retention.bytes`` drops to 1, so the brokers delete their tiered local copies;
6. ``consume_s3``: a second group reads everything again, now served from S3 by the brokers.

Bytes are measured too: the leaders' and the followers' log bytes on disk (what replication carried),
and the bytes each consumer received. `model` then turns the counters into prices: per GiB ingested
and per GiB read, and per month at 10 MiB/s, 100 MiB/s and 1 GiB/s, beside Kafka on EBS across three
AZs and Amazon MSK. Every price is in `PRICES` with its source; every figure that is a choice rather
than a measurement (instances, retention, how many times data is read, where clients sit) is in
`ASSUMPTIONS`. The DynamoDB capacity the background polling costs is measured per broker and second,
and scaled by the broker count the assumptions give.

    .venv/bin/python bench/cost_model.py --mib 48 --idle-s 30     # bench/results/cost_model.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer  # noqa: E402

from bench.aws_meter import S3_FREE, S3_PUT_CLASS, AwsMeter  # noqa: E402
from bench.machine import result_header, write_result  # noqa: E402
from broker_core.client import FloeClient  # noqa: E402
from broker_core.local_moto import MotoServer, start_moto_server  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402

GIB = 1024**3
MIB = 1024**2
SECONDS_PER_MONTH = 730 * 3600  # AWS prices a month as 730 hours
TOPIC = "cost"
PARTITIONS = 6
REPLICATION_FACTOR = 3
RECORD_BYTES = 1024
BROKERS = 3
# The brokers' defaults the projection to production segment sizes uses (broker_core.settings).
MULTIPART_THRESHOLD_BYTES = 32 * MIB  # remote.log.s3.multipart.threshold.bytes
MULTIPART_PART_BYTES = 8 * MIB  # remote.log.s3.multipart.part.bytes
READER_CHUNK_BYTES = 4 * MIB  # remote.log.reader.chunk.bytes
NVME_GB_PER_I4I_XLARGE = 937

# Prices: us-east-1, on-demand, in USD, as listed on AWS's public price pages (read 2026-11-27; the
# script does not fetch them, so check them against the pages before relying on the totals).
PRICES: dict[str, dict[str, Any]] = {
    "s3_standard_gb_month": {"usd": 0.023, "source": "https://aws.amazon.com/s3/pricing/ (S3 Standard, first 50 TB/month)"},
    "s3_put_class_per_1000": {"usd": 0.005, "source": "https://aws.amazon.com/s3/pricing/ (PUT, COPY, POST, LIST requests)"},
    "s3_get_class_per_1000": {"usd": 0.0004, "source": "https://aws.amazon.com/s3/pricing/ (GET, SELECT and all other requests)"},
    "dynamodb_write_request_unit_per_million": {
        "usd": 0.625, "source": "https://aws.amazon.com/dynamodb/pricing/on-demand/ (write request units, since 2024-11-01)"},
    "dynamodb_read_request_unit_per_million": {
        "usd": 0.125, "source": "https://aws.amazon.com/dynamodb/pricing/on-demand/ (read request units, since 2024-11-01)"},
    "cross_az_gb_each_direction": {
        "usd": 0.01, "source": "https://aws.amazon.com/ec2/pricing/on-demand/ (Data Transfer within the same region: "
                               "across Availability Zones, $0.01/GB in and $0.01/GB out)"},
    "ec2_i4i_xlarge_hour": {"usd": 0.343, "source": "https://aws.amazon.com/ec2/pricing/on-demand/ (i4i.xlarge, Linux: "
                                                    "4 vCPU, 32 GiB, 937 GB NVMe)"},
    "ec2_m6i_xlarge_hour": {"usd": 0.192, "source": "https://aws.amazon.com/ec2/pricing/on-demand/ (m6i.xlarge, Linux: "
                                                    "4 vCPU, 16 GiB)"},
    "ebs_gp3_gb_month": {"usd": 0.08, "source": "https://aws.amazon.com/ebs/pricing/ (gp3 storage)"},
    "ebs_gp3_mbps_month": {"usd": 0.04, "source": "https://aws.amazon.com/ebs/pricing/ (gp3 throughput over 125 MB/s)"},
    "msk_kafka_m5_xlarge_hour": {"usd": 0.42, "source": "https://aws.amazon.com/msk/pricing/ (Standard broker kafka.m5.xlarge)"},
    "msk_storage_gb_month": {"usd": 0.10, "source": "https://aws.amazon.com/msk/pricing/ (Standard broker storage; "
                                                     "replication between brokers is not charged as data transfer)"},
}

# Choices, not measurements: change them to fit a deployment.
ASSUMPTIONS: dict[str, Any] = {
    "retention_days": 7,
    "reads_per_byte_ingested": 1.0,  # each byte consumed once (one consumer group)
    "share_of_reads_from_s3": 0.1,  # catch-up reads below the local copies; the rest is tail reads from disk
    "segment_bytes": GIB,  # segment.bytes, Kafka's default: S3 requests and manifest rows are per segment
    "partitions_per_broker": 100,  # partitions read by consumer groups (offset commits on a clock)
    "disk_fill": 0.7,  # EBS volumes (Kafka, MSK) sized for retention x RF at 70 % full
    "clients_in_each_az": "producers and consumers spread evenly over the 3 AZs, one replica of each partition per AZ",
    "broker_ingress_mib_s": 60,  # produce + replication in per broker an xlarge broker is sized for
    "floe_instance": "i4i.xlarge (NVMe for the hot copies)",
    "kafka_instance": "m6i.xlarge with gp3 EBS",
    "msk_instance": "kafka.m5.xlarge, storage sized as for Kafka on EBS",
}


# -- the run -------------------------------------------------------------------------------


def log_bytes(data_dir: Path, topic: str, partition: int) -> tuple[int, int]:
    """(bytes in .log files, number of .log files) of one replica."""
    directory = data_dir / f"{topic}-{partition}"
    files = list(directory.glob("*.log")) if directory.exists() else []
    return sum(path.stat().st_size for path in files), len(files)


async def leaders(bootstrap: str) -> dict[int, int]:
    async with FloeClient(bootstrap) as client:
        info = await client.describe_topic(TOPIC)
        return {p.partition: p.leader for p in info.partitions}


def replica_bytes(stack: LocalStack, leader_of: dict[int, int]) -> dict[str, int]:
    leader_bytes = follower_bytes = sealed = 0
    for broker_id, broker in stack.processes.items():
        for partition, leader in leader_of.items():
            size, files = log_bytes(broker.data_dir, TOPIC, partition)
            if broker_id == leader:
                leader_bytes += size
                sealed += max(0, files - 1)
            else:
                follower_bytes += size
    return {"leader_log_bytes": leader_bytes, "follower_log_bytes": follower_bytes, "leader_sealed_segments": sealed}


def local_segments(stack: LocalStack, leader_of: dict[int, int]) -> int:
    return sum(log_bytes(stack.processes[leader].data_dir, TOPIC, partition)[1]
               for partition, leader in leader_of.items())


def s3_requests(meter: AwsMeter, phases: tuple[str, ...], operation: str) -> int:
    snapshot = meter.snapshot()
    return sum(snapshot.get(phase, {}).get("s3", {}).get(operation, {}).get("requests", 0) for phase in phases)


def produce(bootstrap: str, mib: int) -> dict[str, Any]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    records = mib * MIB // RECORD_BYTES
    value = os.urandom(RECORD_BYTES - 16)
    errors: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(str(error))

    started = time.monotonic()
    for number in range(records):
        key = f"key-{number:012d}".encode()
        while True:
            try:
                producer.produce(TOPIC, value=value, key=key, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(120)
    if left or errors:
        raise RuntimeError(f"produce failed: {left} undelivered, errors {errors[:3]}")
    return {"records": records, "payload_bytes": records * RECORD_BYTES, "seconds": round(time.monotonic() - started, 2)}


def consume(bootstrap: str, group: str, records: int, timeout_s: float = 300) -> dict[str, Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.partition.eof": False})
    consumer.subscribe([TOPIC])
    received = payload = 0
    started = time.monotonic()
    try:
        while received < records:
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"group {group} read {received} of {records} records in {timeout_s} s")
            for message in consumer.consume(1000, 1.0):
                if message.error():
                    continue
                received += 1
                payload += len(message.value() or b"") + len(message.key() or b"")
        seconds = time.monotonic() - started
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return {"records": received, "payload_bytes": payload, "seconds": round(seconds, 2)}


def wait_until(condition: Any, timeout_s: float, what: str, poll_s: float = 0.5) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"{what}: not done within {timeout_s} s")
        time.sleep(poll_s)
    return round(time.monotonic() - started, 2)


def run(mib: int, segment_mib: int, idle_s: float) -> dict[str, Any]:
    durations: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="floe-cost-") as directory:
        moto = start_moto_server(log_path=Path(directory) / "moto.log")
        meter = AwsMeter(moto.host, moto.port).start()
        # Only the segment size and the local retention check differ from the brokers' defaults, so
        # the idle cluster polls DynamoDB as a production one would.
        stack = LocalStack(directory=Path(directory) / "stack", brokers=BROKERS, overrides={
            "log.segment.bytes": str(segment_mib * MIB),
            "log.retention.check.interval.ms": "1000",
        })
        stack.moto = MotoServer(moto.host, meter.port, moto.process)  # the stack talks to moto through the meter
        try:
            meter.phase = "start"
            stack.start()
            bootstrap = stack.bootstrap_servers

            async def create() -> None:
                async with FloeClient(bootstrap) as client:
                    await client.create_topic(TOPIC, PARTITIONS, REPLICATION_FACTOR, {
                        "remote.storage.enable": "true", "min.insync.replicas": "2"})

            asyncio.run(create())
            leader_of = asyncio.run(leaders(bootstrap))
            time.sleep(3)  # let the start-up work (registration, first polls) settle before idling

            meter.phase = "idle"
            time.sleep(idle_s)
            durations["idle"] = idle_s

            meter.phase = "produce"
            produced = produce(bootstrap, mib)
            durations["produce"] = produced["seconds"]

            meter.phase = "tier"
            on_disk = replica_bytes(stack, leader_of)
            expected = on_disk["leader_sealed_segments"]
            durations["tier"] = wait_until(
                lambda: s3_requests(meter, ("produce", "tier"), "PutObject") >= 2 * expected, 300,
                f"tiering {expected} sealed segments", poll_s=0.2)

            meter.phase = "consume_local"
            local_read = consume(bootstrap, "cost-tail-readers", produced["records"])
            durations["consume_local"] = local_read["seconds"]

            meter.phase = "evict"
            started = time.monotonic()

            async def evict() -> None:
                async with FloeClient(bootstrap) as client:
                    await client.alter_topic_configs(TOPIC, {"local.retention.bytes": "1"})

            asyncio.run(evict())
            wait_until(lambda: local_segments(stack, leader_of) <= PARTITIONS, 120, "deleting local tiered copies")
            durations["evict"] = round(time.monotonic() - started, 2)

            meter.phase = "consume_s3"
            s3_read = consume(bootstrap, "cost-replay-readers", produced["records"])
            durations["consume_s3"] = s3_read["seconds"]
            meter.phase = "end"
        finally:
            stack.stop(save_state=False)
            meter.stop()
            moto.stop()
    setup = {"brokers": BROKERS, "partitions": PARTITIONS, "replication_factor": REPLICATION_FACTOR,
             "record_bytes": RECORD_BYTES, "mib": mib, "segment_bytes": segment_mib * MIB, "idle_s": idle_s,
             "reader_chunk_bytes": READER_CHUNK_BYTES}
    return {"setup": setup, "produced": produced, "replicas": on_disk, "consumed_local": local_read, "consumed_s3": s3_read,
            "durations_s": durations, "phases": meter.snapshot()}


# -- the model ------------------------------------------------------------------------------


def _s3_requests(phase: dict[str, Any]) -> dict[str, float]:
    put = get = 0
    for operation, tally in phase.get("s3", {}).items():
        if operation in S3_FREE:
            continue
        if operation in S3_PUT_CLASS:
            put += tally["requests"]
        else:
            get += tally["requests"]
    return {"put_class": put, "get_class": get}


def _dynamodb_units(phase: dict[str, Any]) -> dict[str, dict[str, float]]:
    return {table: {key: sum(op[key] for op in operations.values()) for key in ("requests", "read_units", "write_units")}
            for table, operations in phase.get("dynamodb", {}).items()}


def _above_background(phase: dict[str, dict[str, float]], idle: dict[str, dict[str, float]], idle_s: float,
                      seconds: float) -> dict[str, dict[str, float]]:
    """A phase's DynamoDB units less what the idle cluster spends in as long (never below zero)."""
    result = {}
    for table, units in phase.items():
        base = idle.get(table, {})
        result[table] = {key: max(0.0, units[key] - base.get(key, 0.0) * seconds / idle_s)
                         for key in ("requests", "read_units", "write_units")}
    return result


def _sum_tables(*phases: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    total: dict[str, dict[str, float]] = {}
    for phase in phases:
        for table, units in phase.items():
            into = total.setdefault(table, {"requests": 0.0, "read_units": 0.0, "write_units": 0.0})
            for key in into:
                into[key] += units[key]
    return total


def _scaled(tables: dict[str, dict[str, float]], divisor: float, only: tuple[str, ...] | None = None
            ) -> dict[str, dict[str, float]]:
    return {table: {key: round(value / divisor, 4) for key, value in units.items()}
            for table, units in tables.items() if (only is None or table.endswith(only)) and any(units.values())}


GROUP_TABLES = ("groups", "group_offsets")
SEGMENT_TABLES = ("segments",)


def measured_rates(run_result: dict[str, Any]) -> dict[str, Any]:
    """The run's counters as rates: per sealed segment (S3 and the manifest: they scale with segments,
    not bytes), per byte (replication, reads), per broker-second (the idle cluster) and per
    group-partition-second (consumer groups commit on a clock, not per byte)."""
    phases, durations, setup = run_result["phases"], run_result["durations_s"], run_result["setup"]
    replicas = run_result["replicas"]
    segments = replicas["leader_sealed_segments"]
    idle_s = durations["idle"]
    dynamo = {name: _dynamodb_units(phases.get(name, {})) for name in phases}
    idle = dynamo.get("idle", {})

    def above(name: str) -> dict[str, dict[str, float]]:
        return _above_background(dynamo.get(name, {}), idle, idle_s, durations[name])

    write_path = _sum_tables(above("produce"), above("tier"), above("consume_local"))
    consume_s = durations["consume_local"] + durations["consume_s3"]
    groups = _sum_tables(above("consume_local"), above("consume_s3"))
    s3_write = [_s3_requests(phases.get(name, {})) for name in ("produce", "tier", "consume_local")]
    s3_replay = _s3_requests(phases.get("consume_s3", {}))
    put_objects = sum(phases.get(name, {}).get("s3", {}).get("PutObject", {}).get("requests", 0)
                      for name in ("produce", "tier", "consume_local"))
    chunk_gets_per_segment = math.ceil(setup["segment_bytes"] / setup["reader_chunk_bytes"])
    return {
        "sealed_segments": segments,
        "segment_bytes": setup["segment_bytes"],
        "replicated_bytes_per_ingested_byte": round(replicas["follower_log_bytes"] / replicas["leader_log_bytes"], 4),
        "log_bytes_per_payload_byte": round(replicas["leader_log_bytes"] / run_result["produced"]["payload_bytes"], 4),
        "s3_objects_per_segment": round(put_objects / segments, 3),
        "s3_put_class_requests_per_segment": round(sum(r["put_class"] for r in s3_write) / segments, 3),
        "s3_get_class_requests_per_segment_written": round(sum(r["get_class"] for r in s3_write) / segments, 3),
        "s3_get_class_requests_per_segment_read": round(s3_replay["get_class"] / segments, 3),
        "s3_get_requests_per_segment_read_besides_chunks": round(s3_replay["get_class"] / segments
                                                                 - chunk_gets_per_segment, 3),
        "dynamodb_per_segment_tiered": _scaled(write_path, segments, SEGMENT_TABLES),
        "dynamodb_per_segment_read_from_s3": _scaled(above("consume_s3"), segments, SEGMENT_TABLES),
        "dynamodb_per_group_partition_second": _scaled(groups, consume_s * PARTITIONS, GROUP_TABLES),
        "dynamodb_per_broker_second_idle": _scaled(idle, idle_s * BROKERS),
    }


def _units_total(tables: dict[str, dict[str, float]], key: str) -> float:
    return sum(units[key] for units in tables.values())


def _price(name: str) -> float:
    return float(PRICES[name]["usd"])


def _dynamodb_usd(tables: dict[str, dict[str, float]], times: float) -> float:
    return times * (_units_total(tables, "write_units") / 1e6 * _price("dynamodb_write_request_unit_per_million")
                    + _units_total(tables, "read_units") / 1e6 * _price("dynamodb_read_request_unit_per_million"))


def s3_put_requests_per_segment(rates: dict[str, Any], segment_bytes: int) -> float:
    """PUT-class requests to tier one segment of ``segment_bytes``: the run's objects besides the log
    (the indexes object), plus the log object: one PUT, or a multipart upload above the threshold."""
    if segment_bytes < MULTIPART_THRESHOLD_BYTES:
        log_requests = 1
    else:
        log_requests = 2 + math.ceil(segment_bytes / MULTIPART_PART_BYTES)  # create, parts, complete
    return rates["s3_objects_per_segment"] - 1 + log_requests


def s3_get_requests_per_segment(rates: dict[str, Any], segment_bytes: int) -> float:
    """GETs to read one whole segment from S3: the run's GETs besides the log chunks, plus the chunks."""
    return rates["s3_get_requests_per_segment_read_besides_chunks"] + math.ceil(segment_bytes / READER_CHUNK_BYTES)


def brokers_for(mib_s: float) -> int:
    """Brokers, a multiple of 3 (one per AZ per step), for produce plus replication traffic at RF 3."""
    needed = math.ceil(mib_s * REPLICATION_FACTOR / ASSUMPTIONS["broker_ingress_mib_s"])
    return max(3, 3 * math.ceil(needed / 3))


def per_gib(rates: dict[str, Any]) -> dict[str, dict[str, float]]:
    """USD for one GiB on its way in and on its way out, at the production segment size."""
    segment_bytes = ASSUMPTIONS["segment_bytes"]
    segments_per_gib = GIB / segment_bytes
    cross_az = 2 * _price("cross_az_gb_each_direction")  # paid on both sides of the AZ boundary
    ingest = {
        "s3_put_requests": s3_put_requests_per_segment(rates, segment_bytes) * segments_per_gib / 1000
        * _price("s3_put_class_per_1000"),
        "dynamodb_manifest": _dynamodb_usd(rates["dynamodb_per_segment_tiered"], segments_per_gib),
        "cross_az_replication": rates["replicated_bytes_per_ingested_byte"] * cross_az,
        "cross_az_producer": 2 / 3 * cross_az,
        "s3_storage_per_month": _price("s3_standard_gb_month"),
    }
    read_s3 = {
        "s3_get_requests": s3_get_requests_per_segment(rates, segment_bytes) * segments_per_gib / 1000
        * _price("s3_get_class_per_1000"),
        "dynamodb_manifest": _dynamodb_usd(rates["dynamodb_per_segment_read_from_s3"], segments_per_gib),
        "cross_az_consumer": 2 / 3 * cross_az,
        "cross_az_consumer_kip392": 0.0,
    }
    read_disk = {"cross_az_consumer": 2 / 3 * cross_az, "cross_az_consumer_kip392": 0.0}
    return {"ingest": {k: round(v, 6) for k, v in ingest.items()},
            "read_from_s3": {k: round(v, 6) for k, v in read_s3.items()},
            "read_from_disk": {k: round(v, 6) for k, v in read_disk.items()}}


def monthly_costs(rates: dict[str, Any], mib_s: float) -> dict[str, Any]:
    """USD per month at ``mib_s`` of records for Floe, Kafka on EBS over 3 AZs, and MSK."""
    unit = per_gib(rates)
    gib_month = mib_s * SECONDS_PER_MONTH / 1024
    read_gib = gib_month * ASSUMPTIONS["reads_per_byte_ingested"]
    read_s3 = read_gib * ASSUMPTIONS["share_of_reads_from_s3"]
    retained_gib = mib_s * ASSUMPTIONS["retention_days"] * 86400 / 1024
    brokers = brokers_for(mib_s)
    hours = SECONDS_PER_MONTH / 3600
    partitions = ASSUMPTIONS["partitions_per_broker"] * brokers
    cross_az = 2 * _price("cross_az_gb_each_direction")
    producers_cross_az = gib_month * 2 / 3 * cross_az
    consumers_cross_az = read_gib * 2 / 3 * cross_az

    floe = {
        "brokers": brokers,
        "ec2_nvme": brokers * hours * _price("ec2_i4i_xlarge_hour"),
        "s3_storage": retained_gib * _price("s3_standard_gb_month"),
        "s3_put_requests": unit["ingest"]["s3_put_requests"] * gib_month,
        "s3_get_requests": unit["read_from_s3"]["s3_get_requests"] * read_s3,
        "dynamodb_manifest": unit["ingest"]["dynamodb_manifest"] * gib_month
        + unit["read_from_s3"]["dynamodb_manifest"] * read_s3,
        "dynamodb_brokers_idle": _dynamodb_usd(rates["dynamodb_per_broker_second_idle"], brokers * SECONDS_PER_MONTH),
        "dynamodb_consumer_groups": _dynamodb_usd(rates["dynamodb_per_group_partition_second"],
                                                  partitions * SECONDS_PER_MONTH),
        "cross_az_replication": gib_month * rates["replicated_bytes_per_ingested_byte"] * cross_az,
        "cross_az_producers": producers_cross_az,
        "cross_az_consumers": consumers_cross_az,
    }
    ebs_gib = retained_gib * REPLICATION_FACTOR / ASSUMPTIONS["disk_fill"]
    ebs_mb_s_per_broker = mib_s * REPLICATION_FACTOR * 1.048576 / brokers
    kafka = {
        "brokers": brokers,
        "ec2": brokers * hours * _price("ec2_m6i_xlarge_hour"),
        "ebs_storage": ebs_gib * _price("ebs_gp3_gb_month"),
        "ebs_throughput": brokers * max(0.0, ebs_mb_s_per_broker - 125) * _price("ebs_gp3_mbps_month"),
        "cross_az_replication": gib_month * (REPLICATION_FACTOR - 1) * cross_az,
        "cross_az_producers": producers_cross_az,
        "cross_az_consumers": consumers_cross_az,
    }
    msk = {
        "brokers": brokers,
        "msk_brokers": brokers * hours * _price("msk_kafka_m5_xlarge_hour"),
        "msk_storage": ebs_gib * _price("msk_storage_gb_month"),
        "cross_az_replication": 0.0,  # not charged inside an MSK cluster
        "cross_az_producers": producers_cross_az,
        "cross_az_consumers": consumers_cross_az,
    }
    for costs in (floe, kafka, msk):
        costs["total"] = sum(value for key, value in costs.items() if key != "brokers")
        # KIP-392: consumers fetch from the replica in their own AZ (client.rack)
        costs["total_with_kip392"] = costs["total"] - costs["cross_az_consumers"]
        for key in costs:
            if key != "brokers":
                costs[key] = round(costs[key], 2)
    return {"floe": floe, "kafka_ebs_3az": kafka, "msk": msk,
            "ingested_gib_per_month": round(gib_month), "read_gib_per_month": round(read_gib),
            "partitions": partitions,
            # How long the brokers' NVMe (RF 3 copies, 70 % full) keeps records before only S3 holds them.
            "floe_hot_hours_on_nvme": round(brokers * NVME_GB_PER_I4I_XLARGE * ASSUMPTIONS["disk_fill"] * 1e9
                                            / (REPLICATION_FACTOR * mib_s * MIB) / 3600, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=48, help="MiB of records to produce")
    parser.add_argument("--segment-mib", type=int, default=1, help="segment.bytes of the run, in MiB")
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "cost_model.json")
    args = parser.parse_args()

    load_before = os.getloadavg()
    measured = run(args.mib, args.segment_mib, args.idle_s)
    rates = measured_rates(measured)
    document = {
        **result_header("cost_model"),
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "prices": PRICES,
        "assumptions": ASSUMPTIONS,
        "measured": measured,
        "rates": rates,
        "usd_per_gib": per_gib(rates),
        "usd_per_month": {f"{rate} MiB/s": monthly_costs(rates, rate) for rate in (10, 100, 1024)},
    }
    write_result(args.output, document)
    print(json.dumps({"rates": rates, "usd_per_gib": document["usd_per_gib"],
                      "usd_per_month": document["usd_per_month"]}, indent=1))


if __name__ == "__main__":
    main()
