"""What TLS and SASL cost on the Kafka listener: one broker, three listeners, the same client and records.

One broker (local stack) listens on PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512) at once, so each
comparison runs against the same process, data and moment; the two sides of a pair alternate which
goes first from run to run.

- **Produce**: confluent-kafka (librdkafka) sends ``--records`` values of ``--value-bytes`` bytes (default
  1000; acks=1) to a fresh one-partition topic over SASL_SSL and over PLAINTEXT; records/s, ratio
  SASL_SSL / PLAINTEXT (goal >= 0.7). ``--client kafka-python`` sends them with kafka-python instead
  (the same settings where it has them), to compare with a client that slices its requests differently.
- **Fetch**: a confluent-kafka consumer reads such a topic from the start over SSL and over PLAINTEXT
  (PLAINTEXT hands the log's file slices to sendfile; TLS reads and encrypts them); ratio SSL / PLAINTEXT
  (goal >= 0.5).
- **Connection set-up**: ``--handshakes`` sequential SCRAM-SHA-512 logins (TCP connect, TLS handshake,
  SaslHandshake, two SaslAuthenticate round trips), each on a new connection, p50 and p99; then logins
  per second with 8 concurrent connectors for 5 s. The client caches its salted password (PBKDF2 once,
  as a long-running client could), so its per-login CPU is TLS and a few HMACs, and the figure is
  bounded by the broker (and by TLS on both sides sharing the machine's 2 cores).

Throughput on a shared machine swings with the neighbours' load, so each run also records the broker
process's CPU time (user + system) per record for each side, which the load moves much less, and the
client's (this process: librdkafka's threads encrypt and write the TLS records), since client and
broker share the machine's cores: when they are busy, the throughput ratio follows the ratio of their
summed CPU per record. The client's figure is also given for librdkafka's broker thread alone (it builds
the requests and, over TLS, encrypts them and writes one TLS record per buffer segment), apart from the
Python thread that calls produce() the same way for both protocols. The TLS version and cipher suite the
listener negotiates are recorded; ``--ssl-enabled-protocols`` sets the broker's `ssl.enabled.protocols`
(the goal's figure uses the broker's default, TLSv1.2,TLSv1.3, which gives TLSv1.3).

Medians over ``--runs`` go to bench/results/security_overhead.json.

    .venv/bin/python bench/security_overhead.py [--runs 3] [--records 200000] [--handshakes 300] [--output FILE]
        [--ssl-enabled-protocols TLSv1.2] [--value-bytes 1000] [--client confluent-kafka|kafka-python]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import os
import resource
import secrets
import ssl
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import psutil  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.kafka_load import produce_values  # noqa: E402
from bench.machine import cpu_pressure, result_header, write_result  # noqa: E402
from broker_core.local_stack import LocalStack  # noqa: E402
from broker_core.protocol.api_keys import ApiKey  # noqa: E402
from broker_core.protocol.framing import decode_response, encode_request  # noqa: E402
from broker_core.protocol.messages import build_entity, request_class  # noqa: E402
from broker_core.security.certificates import create_ca, issue, keystore_pem, write_private  # noqa: E402
from broker_core.security.credentials import ScramCredentialStore, UserChange  # noqa: E402
from broker_core.security.scram import make_credential, salted_password  # noqa: E402

VALUE_BYTES = 1000
CLIENTS = ("confluent-kafka", "kafka-python")
USER, PASSWORD = "bench", "bench-password"
MECHANISM = "SCRAM-SHA-512"
PRODUCER_SETTINGS = {"acks": "1", "linger.ms": "5", "batch.size": "1000000", "batch.num.messages": "100000",
                     "queue.buffering.max.kbytes": "65536", "message.timeout.ms": "300000"}
CONSUMER_SETTINGS = {"fetch.max.bytes": str(50 * 1024 * 1024), "max.partition.fetch.bytes": str(10 * 1024 * 1024),
                     "queued.max.messages.kbytes": "262144", "enable.partition.eof": "false"}
CONCURRENT_CONNECTORS = 8
RATE_SECONDS = 5.0


class Listeners:
    """The client settings of each of the broker's listeners."""

    def __init__(self, stack: LocalStack, ca_path: Path) -> None:
        ports = stack.processes[1].listeners
        self.ca_path = ca_path
        self.port = ports
        tls = {"ssl.ca.location": str(ca_path)}
        self.config = {
            "PLAINTEXT": {"bootstrap.servers": f"{stack.host}:{ports['PLAINTEXT']}"},
            "SSL": {"bootstrap.servers": f"{stack.host}:{ports['SSL']}", "security.protocol": "SSL", **tls},
            "SASL_SSL": {"bootstrap.servers": f"{stack.host}:{ports['SASL_SSL']}", "security.protocol": "SASL_SSL",
                         "sasl.mechanisms": MECHANISM, "sasl.username": USER, "sasl.password": PASSWORD, **tls},
        }


def start_stack(directory: Path, protocols: str = "") -> tuple[LocalStack, Listeners]:
    ca = create_ca()
    certificate, key = issue(ca, "broker-1", ("127.0.0.1", "localhost"))
    keystore = write_private(directory / "broker.pem", keystore_pem(ca, certificate, key))
    ca_path = write_private(directory / "ca.pem", ca.pem)
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.location": str(keystore),
        "sasl.enabled.mechanisms": MECHANISM,
        **({"ssl.enabled.protocols": protocols} if protocols else {}),
    }
    stack = LocalStack(directory=directory / "stack", brokers=1, overrides=overrides)
    stack.start()
    store = ScramCredentialStore(stack.aws)
    store.ensure_table()
    store.alter(UserChange(USER, (make_credential(MECHANISM, PASSWORD),), ()))
    return stack, Listeners(stack, ca_path)


def create_topic(config: dict[str, str], topic: str) -> None:
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)


def broker_cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def client_cpu_s() -> float:
    """CPU time of this process, the client: its Python thread and librdkafka's threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def librdkafka_io_cpu_s() -> float:
    """CPU time of this process's librdkafka broker threads (`rdk:broker...`): they build the requests and,
    over TLS, encrypt and write them; the produce loop itself runs on the Python thread."""
    used = 0.0
    for thread in psutil.Process().threads():
        try:
            name = Path(f"/proc/self/task/{thread.id}/comm").read_text().strip()
        except OSError:  # the thread ended
            continue
        if name.startswith("rdk:broker"):
            used += thread.user_time + thread.system_time
    return used


def kafka_python_produce(config: dict[str, str], topic: str, value: bytes, records: int) -> None:
    """``records`` copies of ``value`` with kafka-python, acks=1, batches and linger as PRODUCER_SETTINGS."""
    from kafka import KafkaProducer

    settings: dict[str, Any] = {"bootstrap_servers": config["bootstrap.servers"], "acks": 1, "linger_ms": 5,
                                "batch_size": 1_000_000, "max_request_size": 10_000_000,
                                "request_timeout_ms": 120_000, "delivery_timeout_ms": 300_000}
    if config.get("security.protocol") == "SASL_SSL":
        settings.update(security_protocol="SASL_SSL", ssl_cafile=config["ssl.ca.location"],
                        sasl_mechanism=config["sasl.mechanisms"], sasl_plain_username=config["sasl.username"],
                        sasl_plain_password=config["sasl.password"])
    producer = KafkaProducer(**settings)
    try:
        futures = [producer.send(topic, value, partition=0) for _ in range(records)]
        producer.flush(300)
        for future in futures:
            future.get(0)  # raises if the record was not delivered
    finally:
        producer.close(10)


def produce(config: dict[str, str], topic: str, records: int, pid: int, value_bytes: int,
            client: str) -> tuple[float, float, float, float]:
    """(records per second, broker, client and client-librdkafka-broker-thread CPU microseconds per record)."""
    create_topic(config, topic)
    value = b"v" * value_bytes
    cpu, client_cpu, io_cpu = broker_cpu_s(pid), client_cpu_s(), librdkafka_io_cpu_s()
    started = time.perf_counter()
    if client == "kafka-python":
        kafka_python_produce(config, topic, value, records)
    else:
        producer = Producer({**config, **PRODUCER_SETTINGS})
        produce_values(producer, topic, value, records)
    elapsed = time.perf_counter() - started
    io_used = librdkafka_io_cpu_s() - io_cpu  # before the producer (and its threads) goes
    return (records / elapsed, (broker_cpu_s(pid) - cpu) / records * 1e6, (client_cpu_s() - client_cpu) / records * 1e6,
            io_used / records * 1e6)


def fetch(config: dict[str, str], topic: str, records: int, pid: int) -> tuple[float, float, float]:
    """(records per second, broker and client CPU microseconds per record)."""
    consumer = Consumer({**config, "group.id": "security-bench", "enable.auto.commit": False, **CONSUMER_SETTINGS})
    consumer.assign([TopicPartition(topic, 0, 0)])
    received = 0
    cpu, client_cpu = broker_cpu_s(pid), client_cpu_s()
    started = time.perf_counter()
    while received < records:
        received += sum(1 for m in consumer.consume(num_messages=100_000, timeout=1.0) if m.error() is None)
    elapsed = time.perf_counter() - started
    used, client_used = broker_cpu_s(pid) - cpu, client_cpu_s() - client_cpu
    consumer.close()
    return records / elapsed, used / records * 1e6, client_used / records * 1e6


class CachedScramLogin:
    """The client side of SCRAM-SHA-512 with the salted password computed once (per salt)."""

    def __init__(self) -> None:
        self._salted: dict[tuple[bytes, int], bytes] = {}

    def client_final(self, client_first_bare: str, server_first: str) -> str:
        fields = dict(part.split("=", 1) for part in server_first.split(","))
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        key = (salt, iterations)
        if key not in self._salted:
            self._salted[key] = salted_password(MECHANISM, PASSWORD, salt, iterations)
        client_key = hmac.new(self._salted[key], b"Client Key", "sha512").digest()
        stored_key = hashlib.sha512(client_key).digest()
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, "sha512").digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}"


async def _call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api_key: int, version: int,
                body: dict[str, Any]) -> Any:
    writer.write(encode_request(api_key, version, 1, "bench", build_entity(request_class(api_key, version), body)))
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return decode_response(api_key, version, await reader.readexactly(size))[1]


async def login(host: str, port: int, context: ssl.SSLContext, scram: CachedScramLogin) -> None:
    reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host)
    try:
        handshake = await _call(reader, writer, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": MECHANISM})
        if handshake.error_code != 0:
            raise RuntimeError(f"SaslHandshake: {handshake.error_code}")
        bare = f"n={USER},r={secrets.token_urlsafe(24)}"
        first = await _call(reader, writer, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"n,,{bare}".encode()})
        final = scram.client_final(bare, bytes(first.auth_bytes).decode())
        done = await _call(reader, writer, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": final.encode()})
        if done.error_code != 0:
            raise RuntimeError(f"SaslAuthenticate: {done.error_code} {done.error_message}")
    finally:
        writer.close()


async def handshakes(listeners: Listeners, count: int) -> dict[str, float]:
    context = ssl.create_default_context(cafile=str(listeners.ca_path))
    scram = CachedScramLogin()
    port = listeners.port["SASL_SSL"]
    await login("127.0.0.1", port, context, scram)  # salts the password once
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await login("127.0.0.1", port, context, scram)
        times.append(time.perf_counter() - started)
    times.sort()
    completed = 0
    deadline = time.perf_counter() + RATE_SECONDS

    async def connector() -> None:
        nonlocal completed
        while time.perf_counter() < deadline:
            await login("127.0.0.1", port, context, scram)
            completed += 1

    started = time.perf_counter()
    await asyncio.gather(*(connector() for _ in range(CONCURRENT_CONNECTORS)))
    return {"p50_ms": times[len(times) // 2] * 1000, "p99_ms": times[min(len(times) - 1, int(len(times) * 0.99))] * 1000,
            "per_second": completed / (time.perf_counter() - started)}


async def tls_session(listeners: Listeners) -> dict[str, str]:
    """The TLS version and cipher suite a default client context agrees on with the SSL listener (the
    broker picks among the client's offers; librdkafka's OpenSSL offers the same TLS 1.3 suites)."""
    context = ssl.create_default_context(cafile=str(listeners.ca_path))
    _, writer = await asyncio.open_connection("127.0.0.1", listeners.port["SSL"], ssl=context,
                                              server_hostname="127.0.0.1")
    try:
        tls = writer.get_extra_info("ssl_object")
        return {"version": tls.version(), "cipher": tls.cipher()[0]}
    finally:
        writer.close()


def one_run(number: int, listeners: Listeners, records: int, handshake_count: int, pid: int, value_bytes: int,
            client: str) -> dict[str, Any]:
    order = ("PLAINTEXT", "SASL_SSL") if number % 2 == 0 else ("SASL_SSL", "PLAINTEXT")
    produce_runs = {name: produce(listeners.config[name], f"produce-{name.lower()}-{number}", records, pid,
                                  value_bytes, client)
                    for name in order}
    fetch_order = ("PLAINTEXT", "SSL") if number % 2 == 0 else ("SSL", "PLAINTEXT")
    topic = f"produce-plaintext-{number}"
    fetch_runs = {name: fetch(listeners.config[name], topic, records, pid) for name in fetch_order}
    setup = asyncio.run(handshakes(listeners, handshake_count))
    produced = {name: rate for name, (rate, _, _, _) in produce_runs.items()}
    fetched = {name: rate for name, (rate, _, _) in fetch_runs.items()}
    result = {
        "produce_records_per_s": produced, "produce_ratio": produced["SASL_SSL"] / produced["PLAINTEXT"],
        "produce_broker_cpu_us_per_record": {name: cpu for name, (_, cpu, _, _) in produce_runs.items()},
        "produce_client_cpu_us_per_record": {name: cpu for name, (_, _, cpu, _) in produce_runs.items()},
        "produce_client_librdkafka_io_cpu_us_per_record": {name: cpu for name, (*_, cpu) in produce_runs.items()},
        "fetch_records_per_s": fetched, "fetch_ratio": fetched["SSL"] / fetched["PLAINTEXT"],
        "fetch_broker_cpu_us_per_record": {name: cpu for name, (_, cpu, _) in fetch_runs.items()},
        "fetch_client_cpu_us_per_record": {name: cpu for name, (_, _, cpu) in fetch_runs.items()},
        "scram_handshake": setup, "cpu_pressure_avg10": cpu_pressure(), "load_average": os.getloadavg(),
    }
    print(f"run {number}: produce SASL_SSL/PLAINTEXT {result['produce_ratio']:.2f} "
          f"({produced['SASL_SSL']:,.0f} / {produced['PLAINTEXT']:,.0f} records/s), fetch SSL/PLAINTEXT "
          f"{result['fetch_ratio']:.2f} ({fetched['SSL']:,.0f} / {fetched['PLAINTEXT']:,.0f} records/s), "
          f"SCRAM login p50 {setup['p50_ms']:.1f} ms p99 {setup['p99_ms']:.1f} ms, {setup['per_second']:.0f}/s; "
          f"broker CPU us/record produce {result['produce_broker_cpu_us_per_record']}, "
          f"fetch {result['fetch_broker_cpu_us_per_record']}; client CPU us/record produce "
          f"{result['produce_client_cpu_us_per_record']} (librdkafka's broker thread "
          f"{result['produce_client_librdkafka_io_cpu_us_per_record']}), fetch {result['fetch_client_cpu_us_per_record']}; "
          f"load average {result['load_average'][0]:.1f}",
          flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--handshakes", type=int, default=300)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "results" / "security_overhead.json")
    parser.add_argument("--ssl-enabled-protocols", default="",
                        help="the broker's ssl.enabled.protocols (default: the broker's default, TLSv1.2,TLSv1.3)")
    parser.add_argument("--value-bytes", type=int, default=VALUE_BYTES, help="the size of each produced value")
    parser.add_argument("--client", choices=CLIENTS, default=CLIENTS[0], help="the producing client")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="floe-security-bench-") as directory:
        stack, listeners = start_stack(Path(directory), args.ssl_enabled_protocols)
        try:
            pid = stack.processes[1].pid
            negotiated = asyncio.run(tls_session(listeners))
            print(f"TLS session with the SSL listener: {negotiated}", flush=True)
            runs = [one_run(number, listeners, args.records, args.handshakes, pid, args.value_bytes, args.client)
                    for number in range(args.runs)]
        finally:
            stack.stop(save_state=False)

    def median(*path: str) -> float:
        values = []
        for run in runs:
            value: Any = run
            for key in path:
                value = value[key]
            values.append(value)
        return statistics.median(values)

    result = {
        **result_header("security_overhead"),
        "records": args.records, "value_bytes": args.value_bytes, "producing_client": args.client, "handshakes": args.handshakes,
        "broker_ssl_enabled_protocols": args.ssl_enabled_protocols or "default (TLSv1.2,TLSv1.3)",
        "tls_session": negotiated,
        "median": {
            "produce_ratio_sasl_ssl_over_plaintext": median("produce_ratio"),
            "fetch_ratio_ssl_over_plaintext": median("fetch_ratio"),
            "scram_sha_512_login_p50_ms": median("scram_handshake", "p50_ms"),
            "scram_sha_512_login_p99_ms": median("scram_handshake", "p99_ms"),
            "scram_sha_512_logins_per_s": median("scram_handshake", "per_second"),
            **{f"{kind}_{side}_cpu_us_per_record_{name.lower()}": median(f"{kind}_{side}_cpu_us_per_record", name)
               for kind, names in (("produce", ("PLAINTEXT", "SASL_SSL")), ("fetch", ("PLAINTEXT", "SSL")))
               for side in ("broker", "client") for name in names},
            **{f"produce_client_librdkafka_io_cpu_us_per_record_{name.lower()}":
               median("produce_client_librdkafka_io_cpu_us_per_record", name) for name in ("PLAINTEXT", "SASL_SSL")},
        },
        "goals": {"produce_ratio": 0.7, "fetch_ratio": 0.5},
        "runs": runs,
    }
    write_result(args.output, result)
    print(result["median"])


if __name__ == "__main__":
    main()
