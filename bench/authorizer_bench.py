"""What authorization costs: produce and fetch throughput with the authorizer on, against the same broker
without one, in the same run; and the cost of one decision.

One broker (local stack, PLAINTEXT: every client is User:ANONYMOUS), librdkafka clients. Each run
starts two stacks in turn (their order alternates between runs):

- **off**: no ``authorizer.class.name`` (Floe's default): every check answers at once.
- **on**: the StandardAuthorizer with 1000 ACLs for other principals and topics (literal and
  prefixed) plus the ones the clients need (WRITE/READ on a prefix of the topic, READ on the group).
  Not a super user: every request is decided by the ACLs.

In each, a producer sends 200-byte values as fast as it can for ``--seconds`` (acks=1, small
batches, so many Produce requests are checked), then a consumer reads them back. The figures are
on/off ratios of records per second (goal: 1.0 within noise; a check is a few dictionary lookups).
In process, one `Authorizer.authorize` call is timed with 0 and with 10 000 ACLs.
Medians of ``--runs`` runs go to bench/results/authorizer_bench.json.

    .venv/bin/python bench/authorizer_bench.py [--runs 3] [--seconds 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.machine import result_header, write_result  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.metadata.store import MetadataStore  # noqa: E402
from broker_core.security.acl_store import AclStore  # noqa: E402
from broker_core.security.acls import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from broker_core.security.authorizer import STANDARD_AUTHORIZER_NAMES, Authorizer  # noqa: E402

TOPIC, GROUP = "bench-authz", "bench-authz-group"
VALUE = b"a" * 200
OTHER_ACLS = 1000
PRODUCER_SETTINGS = {"acks": "1", "linger.ms": "1", "batch.size": "16384", "queue.buffering.max.kbytes": "16384",
                     "message.timeout.ms": "120000"}


def other_acls(count: int) -> list[AclBinding]:
    """ACLs that do not concern the bench's clients, half literal and half prefixed, half allow and half deny."""
    found = []
    for i in range(count):
        pattern = PatternType.LITERAL if i % 2 else PatternType.PREFIXED
        permission = AclPermission.ALLOW if i % 4 < 2 else AclPermission.DENY
        found.append(AclBinding(ResourceType.TOPIC, f"team-{i}.", pattern, f"User:app-{i}", "*",
                                AclOperation.WRITE, permission))
    return found


CLIENT_ACLS = [
    AclBinding(ResourceType.TOPIC, "bench-", PatternType.PREFIXED, "User:ANONYMOUS", "*", op, AclPermission.ALLOW)
    for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.CREATE)
] + [AclBinding(ResourceType.GROUP, GROUP, PatternType.LITERAL, "User:ANONYMOUS", "*", AclOperation.READ,
                AclPermission.ALLOW)]


def produce_for(servers: str, seconds: float) -> float:
    producer = Producer({"bootstrap.servers": servers, **PRODUCER_SETTINGS})
    delivered = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            delivered[0] += 1

    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        try:
            producer.produce(TOPIC, VALUE, partition=0, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.001)
        producer.poll(0)
    producer.flush(120)
    return delivered[0] / (time.perf_counter() - start)


def consume_all(servers: str, count: int) -> float:
    consumer = Consumer({"bootstrap.servers": servers, "group.id": GROUP, "enable.auto.commit": False,
                         "fetch.max.bytes": 1048576, "max.partition.fetch.bytes": 262144})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    read = 0
    start = time.perf_counter()
    while read < count and time.perf_counter() - start < 300:
        read += sum(1 for m in consumer.consume(10000, timeout=1.0) if m.error() is None)
    elapsed = time.perf_counter() - start
    consumer.close()
    return read / elapsed


def one_configuration(authorized: bool, seconds: float) -> dict[str, float]:
    overrides = {"authorizer.class.name": STANDARD_AUTHORIZER_NAMES[0]} if authorized else {}
    with tempfile.TemporaryDirectory(prefix="authz-bench-") as directory, \
            LocalStack(directory=Path(directory), brokers=1, overrides=overrides) as stack:
        if authorized:
            store = AclStore(stack.aws)
            store.ensure_table()
            for binding in other_acls(OTHER_ACLS) + CLIENT_ACLS:
                store.create(binding)
            MetadataStore(stack.aws).bump_metadata_version()  # the broker re-reads the ACLs within a poll
            time.sleep(2)
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(60)
        produced = produce_for(stack.bootstrap_servers, seconds)
        consumed = consume_all(stack.bootstrap_servers, int(produced * seconds * 0.9))
        return {"produce_records_per_s": produced, "consume_records_per_s": consumed}


def decision_ns(authorizer: Authorizer) -> float:
    calls = 200_000
    seconds = min(timeit.repeat(lambda: authorizer.authorize("User:ANONYMOUS", "127.0.0.1", AclOperation.WRITE,
                                                             ResourceType.TOPIC, TOPIC), number=calls, repeat=5))
    return seconds / calls * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    runs = []
    for run in range(args.runs):
        order = (False, True) if run % 2 == 0 else (True, False)
        figures = {authorized: one_configuration(authorized, args.seconds) for authorized in order}
        on, off = figures[True], figures[False]
        runs.append({"off": off, "on": on,
                     "produce_ratio": on["produce_records_per_s"] / off["produce_records_per_s"],
                     "consume_ratio": on["consume_records_per_s"] / off["consume_records_per_s"]})
        print(f"run {run + 1}: produce on/off {runs[-1]['produce_ratio']:.3f} "
              f"({on['produce_records_per_s']:.0f} / {off['produce_records_per_s']:.0f} records/s), "
              f"consume on/off {runs[-1]['consume_ratio']:.3f}", flush=True)
    per_call = {"disabled_ns": decision_ns(Authorizer.disabled())}
    for others in (0, OTHER_ACLS, 10 * OTHER_ACLS):
        bindings = other_acls(others) + CLIENT_ACLS
        per_call[f"{len(bindings)}_acls_ns"] = decision_ns(Authorizer(True, (), False, bindings))
    result = {
        **result_header("authorizer_bench"),
        "seconds": args.seconds, "other_acls": OTHER_ACLS, "value_bytes": len(VALUE),
        "median_produce_ratio": statistics.median(r["produce_ratio"] for r in runs),
        "median_consume_ratio": statistics.median(r["consume_ratio"] for r in runs),
        "decision": per_call,
        "runs": runs,
    }
    print({k: result[k] for k in ("median_produce_ratio", "median_consume_ratio", "decision")})
    write_result(REPO_ROOT / "bench" / "results" / "authorizer_bench.json", result)


if __name__ == "__main__":
    main()
