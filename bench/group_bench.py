"""Consumer-group costs on a local stack: rebalance time, and OffsetCommit throughput against DynamoDB itself.

Rebalance: three confluent-kafka consumers (cooperative-sticky, heartbeat.interval.ms 500) own a
6-partition topic; a fourth subscribes. The time from its subscribe() to the moment every
member's own view (on_assign/on_revoke callbacks) holds the final 4-way assignment, every
partition owned exactly once, is one run; the median of --runs runs is reported, and set against
the heartbeat interval: the other members learn of a rebalance only at their next heartbeat, and
cooperative-sticky needs two rounds, so about two heartbeat intervals is the floor.

OffsetCommit: --threads clients, each with its own connection and its own standalone group,
send OffsetCommit requests of one partition as fast as the broker answers them (each answer means
one conditional PutItem landed in DynamoDB). The peer, in the same run, against the same moto
server: the same number of threads calling DynamoDB put_item directly, one item of the same
shape per commit. The ratio broker/direct is the coordinator's overhead; the goal is >= 0.7.

Writes bench/results/group_bench.json.

    .venv/bin/python bench/group_bench.py [--runs 5] [--commits 3000] [--threads 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import boto3  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from bench.machine import result_header, write_result  # noqa: E402
from broker_core.client import BlockingConnection  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.metadata.store import MetadataStore  # noqa: E402
from broker_core.protocol.api_keys import ApiKey  # noqa: E402

PARTITIONS = 6
HEARTBEAT_MS = 500
TOPIC = "bench-groups"
STACK_OVERRIDES = {
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "1000",
    "metadata.poll.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


# rebalance time ----------------------------------------------------------------------------------


class BenchMember(threading.Thread):
    """A consumer that polls in its own thread and tracks its assignment from the rebalance callbacks."""

    def __init__(self, bootstrap: str, group: str, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": HEARTBEAT_MS, "enable.auto.commit": False,
        })
        self.owned: set[int] = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.subscribed_at = 0.0

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.owned |= {tp.partition for tp in partitions}

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.owned -= {tp.partition for tp in partitions}

    def run(self) -> None:
        self.subscribed_at = time.monotonic()
        self.consumer.subscribe([TOPIC], on_assign=self.on_assign, on_revoke=self.on_revoke)
        while not self.stopping.is_set():
            self.consumer.poll(0.05)
        self.consumer.close()

    def partitions(self) -> set[int]:
        with self.lock:
            return set(self.owned)


def settled(members: list[BenchMember]) -> bool:
    views = [m.partitions() for m in members]
    owned = [p for view in views for p in view]
    return all(views) and sorted(owned) == list(range(PARTITIONS))


def wait(condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("the group did not settle")
        time.sleep(0.005)


def rebalance_once(bootstrap: str) -> float:
    group = f"rebalance-{uuid.uuid4().hex[:8]}"
    members = [BenchMember(bootstrap, group, f"member-{i}") for i in range(3)]
    try:
        for member in members:
            member.start()
        wait(lambda: settled(members), 60)
        time.sleep(1.0)  # let heartbeats settle into their rhythm
        fourth = BenchMember(bootstrap, group, "member-3")
        members.append(fourth)
        fourth.start()
        wait(lambda: settled(members), 60)
        return time.monotonic() - fourth.subscribed_at
    finally:
        for member in members:
            member.stopping.set()
        for member in members:
            member.join(timeout=30)


# commit throughput -------------------------------------------------------------------------------


def commit_through_broker(host: str, port: int, commits: int, threads: int) -> float:
    per_thread = commits // threads

    def client(index: int) -> None:
        connection = BlockingConnection(host, port)
        group = f"commit-bench-{uuid.uuid4().hex[:8]}"
        request = {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": index % PARTITIONS, "committed_offset": 0, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}],
        }
        connection.request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0}, 3)  # take the lease before timing
        for offset in range(per_thread):
            request["topics"][0]["partitions"][0]["committed_offset"] = offset
            response = connection.request(ApiKey.OFFSET_COMMIT, request, 8)
            error = response.topics[0].partitions[0].error_code
            if error != 0:
                raise RuntimeError(f"OffsetCommit failed: {error!r}")
        connection.close()

    return _timed(client, threads, per_thread * threads)


def put_item_directly(aws: Any, table: str, commits: int, threads: int) -> float:
    per_thread = commits // threads
    clients = [boto3.client("dynamodb", **aws.boto3_kwargs()) for _ in range(threads)]

    def client(index: int) -> None:
        dynamodb = clients[index]
        group = f"direct-{uuid.uuid4().hex[:8]}"
        for offset in range(per_thread):
            now_ms = time.time_ns() // 1_000_000
            dynamodb.put_item(TableName=table, Item={
                "group_id": {"S": group}, "partition_key": {"S": f"{TOPIC}:{index % PARTITIONS}"},
                "topic": {"S": TOPIC}, "partition": {"N": str(index % PARTITIONS)},
                "committed_offset": {"N": str(offset)}, "leader_epoch": {"N": "-1"}, "metadata": {"S": ""},
                "commit_timestamp_ms": {"N": str(now_ms)}, "coordinator_epoch": {"N": "1"},
            })

    client(0)  # warm the connection pools
    return _timed(client, threads, per_thread * threads)


def _timed(client: Any, threads: int, total: int) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(client, range(threads)))
    return total / (time.perf_counter() - started)


# main --------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "results" / "group_bench.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="floe-group-bench-") as directory:
        stack = LocalStack(directory=Path(directory), brokers=1, overrides=STACK_OVERRIDES)
        stack.start()
        try:
            MetadataStore(stack.aws).create_topic(TOPIC, PARTITIONS, 1)
            time.sleep(1.5)  # the broker sees the topic at its next metadata poll
            bootstrap = stack.bootstrap_servers
            rebalances = []
            for run in range(args.runs):
                rebalances.append(rebalance_once(bootstrap))
                print(f"rebalance run {run + 1}: {rebalances[-1] * 1000:.0f} ms", flush=True)

            port = stack.processes[1].port
            table = stack.aws.table_prefix + "group_offsets"
            broker_rates, direct_rates = [], []
            for run in range(3):
                # Alternate which side goes first so neither always meets a warmer moto.
                if run % 2 == 0:
                    broker_rates.append(commit_through_broker(stack.host, port, args.commits, args.threads))
                    direct_rates.append(put_item_directly(stack.aws, table, args.commits, args.threads))
                else:
                    direct_rates.append(put_item_directly(stack.aws, table, args.commits, args.threads))
                    broker_rates.append(commit_through_broker(stack.host, port, args.commits, args.threads))
                print(f"commit run {run + 1}: broker {broker_rates[-1]:.0f}/s, direct put_item "
                      f"{direct_rates[-1]:.0f}/s", flush=True)
        finally:
            stack.stop(save_state=False)

    rebalance_ms = statistics.median(rebalances) * 1000
    broker_rate = statistics.median(broker_rates)
    direct_rate = statistics.median(direct_rates)
    result = {
        **result_header("group_bench"),
        "rebalance": {
            "scenario": "4th confluent-kafka consumer joins a group of 3, cooperative-sticky, 6 partitions",
            "heartbeat_interval_ms": HEARTBEAT_MS, "runs_ms": [round(r * 1000, 1) for r in rebalances],
            "median_ms": round(rebalance_ms, 1), "median_over_heartbeat_interval": round(rebalance_ms / HEARTBEAT_MS, 2),
        },
        "offset_commit": {
            "threads": args.threads, "commits_per_run": args.commits,
            "broker_commits_per_s": [round(r) for r in broker_rates],
            "direct_put_item_per_s": [round(r) for r in direct_rates],
            "median_broker_commits_per_s": round(broker_rate), "median_direct_put_item_per_s": round(direct_rate),
            "ratio_broker_over_direct": round(broker_rate / direct_rate, 3), "goal": 0.7,
        },
    }
    write_result(args.output, result)
    print(f"rebalance (4th member joins 3): median {rebalance_ms:.0f} ms = "
          f"{rebalance_ms / HEARTBEAT_MS:.2f} x heartbeat interval ({HEARTBEAT_MS} ms)")
    print(f"OffsetCommit through the broker: {broker_rate:.0f}/s; direct put_item: {direct_rate:.0f}/s; "
          f"ratio {broker_rate / direct_rate:.2f} (goal >= 0.7)")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
