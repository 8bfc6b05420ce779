"""`floe local demo --security sasl_ssl`: the secured run of `make demo`.

A fresh 3-broker `--security sasl_ssl` stack (TLS from a local CA, SCRAM-SHA-512, brokers replicating
to each other as their own SCRAM users) and confluent-kafka configured with nothing but stack.json's
`client_config`: it creates a topic replicated three times, produces with acks=all (so every record
crossed the authenticated inter-broker listener), consumes everything back with a consumer group and
compares, then shows that a wrong password is refused. Exit status 0 when every check holds.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from broker_core.local_stack import LocalStack, StackError

TOPIC = "secured-orders"
PARTITIONS = 3
RECORDS = 20_000
CONSUME_TIMEOUT_S = 120.0


class SecuredDemoError(RuntimeError):
    """A step of the secured demo failed; the message says which."""


def _produce(config: dict[str, str]) -> str:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(config)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(60)
    producer = Producer({**config, "acks": "all", "enable.idempotence": True, "linger.ms": 10})
    digest = hashlib.sha256()
    for i in range(RECORDS):
        value = f"order-{i}".encode()
        digest.update(value)
        while True:
            try:
                producer.produce(TOPIC, key=str(i % 97).encode(), value=value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise SecuredDemoError("records were still undelivered after 120 s")
    return digest.hexdigest()


def _consume(config: dict[str, str]) -> str:
    from confluent_kafka import Consumer

    consumer = Consumer({**config, "group.id": "secured-demo", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    values: list[bytes] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while len(values) < RECORDS and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=5_000, timeout=1.0):
                if message.error() is None:
                    values.append(message.value())
    finally:
        consumer.close()
    if len(values) != RECORDS:
        raise SecuredDemoError(f"the group consumed {len(values)} of {RECORDS} records")
    digest = hashlib.sha256()
    for value in sorted(values, key=lambda v: int(v.split(b"-")[1])):
        digest.update(value)
    return digest.hexdigest()


def _wrong_password_refused(config: dict[str, str]) -> str:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[str] = []
    admin = AdminClient({**config, "sasl.password": "not-the-password", "error_cb": lambda e: errors.append(e.str())})
    try:
        admin.list_topics(timeout=5)
    except KafkaException:
        pass
    else:
        raise SecuredDemoError("a wrong password was accepted")
    admin.poll(1)
    refusal = next((e for e in errors if "Authentication failed" in e), None)
    if refusal is None:
        raise SecuredDemoError(f"no authentication refusal reported: {errors[:2]}")
    return refusal.split("SASL authentication error: ")[-1].split(" (after")[0]


def run_secured_demo(directory: Path, console: Console | None = None) -> int:
    console = console or Console()
    directory = Path(directory)
    if directory.exists():
        shutil.rmtree(directory)
    stack = LocalStack(directory=directory, brokers=3, security="sasl_ssl")
    rows: list[tuple[str, Any]] = []
    try:
        with console.status("starting a 3-broker sasl_ssl stack: local CA, SCRAM users, moto ..."):
            stack.start()
        config = stack.client_config
        shown = {k: ("****" if k == "sasl.password" else v) for k, v in config.items()}
        console.print(f"stack up in {stack.directory}; stack.json client_config: {shown}")
        started = time.monotonic()
        written = _produce(config)
        rows.append(("produced (acks=all, replication factor 3)", f"{RECORDS:,} in {time.monotonic() - started:.1f} s"))
        started = time.monotonic()
        read = _consume(config)
        rows.append(("consumed by group secured-demo", f"{RECORDS:,} in {time.monotonic() - started:.1f} s"))
        rows.append(("records read back = records written", "yes" if read == written else "NO"))
        rows.append(("wrong password", _wrong_password_refused(config)))
        if read != written:
            raise SecuredDemoError("the records read back differ from those written")
    except (SecuredDemoError, StackError) as error:
        console.print(f"[bold red]secured demo failed:[/] {error}")
        return 1
    finally:
        stack.stop(save_state=False)
    table = Table(title="secured run (SASL_SSL, SCRAM-SHA-512)")
    table.add_column("step")
    table.add_column("result")
    for step, result in rows:
        table.add_row(step, str(result))
    console.print(table)
    console.print("[bold green]every record went over TLS from an authenticated client and came back whole[/]")
    return 0
