"""The `floe` command: run the local stack and work with topics, records and groups from a shell.

Commands that talk to a cluster read `stack.json` (default `.floe/local/stack.json`) unless given
`--bootstrap-servers`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from kio.schema.errors import ErrorCode
from rich.console import Console
from rich.table import Table

from broker_core.client import EARLIEST, LATEST, ClientError, FloeClient
from broker_core.groups.cli import add_group_commands
from broker_core.local_stack import DEFAULT_DIR, SECURITY_MODES, LocalStack, StackError, cluster_settings_of
from broker_core.partitioner import partition_for_key
from broker_core.reassign_cli import add_reassign_command
from broker_core.records import Compression, Record, SimpleRecord
from broker_core.security.acl_cli import add_acl_commands
from broker_core.security.cli import add_user_commands
from broker_core.settings import ConfigError, parse_overrides
from broker_core.top import add_top_command
from broker_core.transactions.cli import add_transaction_commands

_PRODUCE_BATCH_LINES = 1000
_CONSUME_POLL_MS = 500


def _local_up(args: argparse.Namespace) -> int:
    overrides = parse_overrides(args.set)
    http = args.http
    try:
        stack = LocalStack(directory=args.data_dir, brokers=args.brokers, overrides=overrides, http=http,
                           security=args.security)
    except StackError as exc:
        print(f"floe local up: {exc}", file=sys.stderr)
        return 1
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    try:
        info = stack.start()
    except StackError as exc:
        print(f"floe local up: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(info, indent=2))
    print(f"stack is up; stack.json is in {stack.directory}. Ctrl-C stops it.", file=sys.stderr, flush=True)
    snapshot_every = 30.0
    while not stopping.wait(snapshot_every):
        try:
            stack.save_state()
        except Exception as exc:  # a failed periodic snapshot must not take the stack down
            print(f"floe local up: periodic state save failed: {exc}", file=sys.stderr)
    print("stopping the stack ...", file=sys.stderr, flush=True)
    stack.stop()
    return 0


def _local_demo(args: argparse.Namespace) -> int:
    if args.security == "sasl_ssl":
        from broker_core.secured_demo import run_secured_demo

        return run_secured_demo(args.data_dir)
    from broker_core.demo import run_demo

    return run_demo(args.size, args.data_dir)


# talking to a cluster ----------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> FloeClient:
    servers, security = cluster_settings_of(args)
    return FloeClient(servers, client_id="floe-cli", request_timeout_s=args.request_timeout, security=security)


def _console() -> Console:
    # Piped output keeps whole rows (topic ids are long) instead of wrapping at 80 columns.
    return Console(width=None if sys.stdout.isatty() else 160)


def _topics_create(args: argparse.Namespace) -> int:
    async def run() -> Any:
        async with _client(args) as client:
            return await client.create_topic(args.name, args.partitions, args.replication_factor,
                                             parse_overrides(args.config, "--config"))

    info = asyncio.run(run())
    print(f"created topic {info.name} (id {info.topic_id}) with {info.num_partitions} partitions, "
          f"replication factor {args.replication_factor}")
    return 0


def _topics_list(args: argparse.Namespace) -> int:
    async def run() -> Any:
        async with _client(args) as client:
            await client.list_topics()
            return client.topics

    topics = asyncio.run(run())
    table = Table("topic", "partitions", "replication factor", "topic id")
    for name in sorted(topics):
        info = topics[name]
        replication = max((len(p.replicas) for p in info.partitions), default=0)
        table.add_row(name, str(info.num_partitions), str(replication), str(info.topic_id or ""))
    _console().print(table)
    return 0


def _topics_describe(args: argparse.Namespace) -> int:
    async def run() -> Any:
        async with _client(args) as client:
            return await client.describe_topic(args.name), await client.describe_configs(args.name)

    info, configs = asyncio.run(run())
    console = _console()
    console.print(f"topic {info.name}  id {info.topic_id}  partitions {info.num_partitions}")

    def ids(nodes: tuple[int, ...]) -> str:
        return ",".join(str(n) for n in nodes)

    partitions = Table("partition", "leader", "leader epoch", "replicas", "isr", "offline")
    for p in info.partitions:
        partitions.add_row(str(p.partition), str(p.leader), str(p.leader_epoch), ids(p.replicas), ids(p.isr),
                           ids(p.offline_replicas))
    console.print(partitions)
    table = Table("config", "value")
    for name in sorted(configs):
        table.add_row(name, "null" if configs[name] is None else configs[name])
    console.print(table)
    return 0


def _topics_delete(args: argparse.Namespace) -> int:
    async def run() -> None:
        async with _client(args) as client:
            await client.delete_topic(args.name)

    asyncio.run(run())
    print(f"deleted topic {args.name}")
    return 0


def _topics_alter(args: argparse.Namespace) -> int:
    assignments = None
    if args.replica_assignment:
        try:
            assignments = [[int(b) for b in part.split(":")] for part in args.replica_assignment.split(",")]
        except ValueError:
            raise SystemExit("floe topics alter: --replica-assignment is broker:broker,... per new partition") from None

    async def run() -> None:
        async with _client(args) as client:
            await client.create_partitions(args.name, args.partitions, assignments, validate_only=args.validate_only)

    asyncio.run(run())
    verb = "validated" if args.validate_only else "altered"
    print(f"{verb} topic {args.name}: {args.partitions} partitions")
    return 0


def _stdin_lines() -> Iterator[bytes]:
    stream: BinaryIO | None = getattr(sys.stdin, "buffer", None)
    if stream is None:
        for text in sys.stdin:
            yield text.rstrip("\n").encode("utf-8")
        return
    for line in stream:
        yield line[:-1] if line.endswith(b"\n") else line


def _produce(args: argparse.Namespace) -> int:
    separator = args.key_separator.encode("utf-8") if args.key_separator else None
    compression = Compression[args.compression.upper()]
    # A person typing wants each line sent at once; piped input is sent in batches.
    batch_lines = 1 if sys.stdin.isatty() else _PRODUCE_BATCH_LINES

    async def run() -> int:
        produced = 0
        async with _client(args) as client:
            num_partitions = await client.num_partitions(args.topic)
            if args.partition is not None and not 0 <= args.partition < num_partitions:
                raise ConfigError(f"--partition {args.partition}: {args.topic} has {num_partitions} partitions")
            round_robin = itertools.cycle(range(num_partitions))
            lines = _stdin_lines()
            while True:
                chunk = await asyncio.to_thread(lambda: list(itertools.islice(lines, batch_lines)))
                if not chunk:
                    return produced
                by_partition: dict[int, list[SimpleRecord]] = {}
                for line in chunk:
                    key, value = None, line
                    if separator is not None and separator in line:
                        key, value = line.split(separator, 1)
                    if args.partition is not None:
                        partition = args.partition
                    elif key is not None:
                        partition = partition_for_key(key, num_partitions)
                    else:
                        partition = next(round_robin)
                    by_partition.setdefault(partition, []).append(SimpleRecord(key=key, value=value))
                await client.produce_many(args.topic, by_partition, acks=args.acks, compression=compression)
                produced += len(chunk)

    produced = asyncio.run(run())
    print(f"produced {produced} records to {args.topic}", file=sys.stderr)
    return 0


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _format_record(topic: str, partition: int, record: Record, output: str, separator: str) -> str:
    if output == "json":
        return json.dumps({
            "topic": topic, "partition": partition, "offset": record.offset, "timestamp": record.timestamp,
            "key": _text(record.key), "value": _text(record.value),
            "headers": [[name, _text(value)] for name, value in record.headers],
        })
    key = _text(record.key)
    value = _text(record.value)
    return f"{'null' if key is None else key}{separator}{'null' if value is None else value}"


def _consume(args: argparse.Namespace) -> int:
    async def run() -> int:
        printed = 0
        async with _client(args) as client:
            num_partitions = await client.num_partitions(args.topic)
            if args.partition is not None and not 0 <= args.partition < num_partitions:
                raise ConfigError(f"--partition {args.partition}: {args.topic} has {num_partitions} partitions")
            partitions = [args.partition] if args.partition is not None else list(range(num_partitions))
            if args.offset is not None:
                positions = dict.fromkeys(partitions, args.offset)
            else:
                start = EARLIEST if args.from_beginning else LATEST
                found = await asyncio.gather(*(client.list_offsets(args.topic, p, start) for p in partitions))
                positions = {p: offset for p, (offset, _) in zip(partitions, found, strict=True)}
            last_record_at = time.monotonic()
            while args.max_records is None or printed < args.max_records:
                wait_ms = _CONSUME_POLL_MS
                if args.timeout is not None:
                    idle_left = args.timeout - (time.monotonic() - last_record_at)
                    if idle_left <= 0:
                        break
                    wait_ms = max(1, min(wait_ms, int(idle_left * 1000)))
                results = await client.fetch_many(args.topic, positions, max_wait_ms=wait_ms)
                for partition, result in sorted(results.items()):
                    positions[partition] = result.next_offset
                    for record in result.records:
                        if args.max_records is not None and printed >= args.max_records:
                            break
                        print(_format_record(args.topic, partition, record, args.format, args.key_separator))
                        printed += 1
                    if result.records:
                        last_record_at = time.monotonic()
                sys.stdout.flush()
        return printed

    try:
        printed = asyncio.run(run())
    except KeyboardInterrupt:
        return 0
    print(f"consumed {printed} records from {args.topic}", file=sys.stderr)
    return 0


def _quota_entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """The entity the --user/--client-id options name, as (entity_type, name or None for the default)."""
    entity: list[tuple[str, str | None]] = []
    if args.user is not None or args.user_default:
        entity.append(("user", None if args.user_default else args.user))
    if args.client_id is not None or args.client_id_default:
        entity.append(("client-id", None if args.client_id_default else args.client_id))
    return entity


def _quota_values(text: str | None) -> dict[str, float]:
    values: dict[str, float] = {}
    for pair in filter(None, (text or "").split(",")):
        key, sep, value = pair.partition("=")
        try:
            values[key.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"--add {pair!r} is not KEY=NUMBER") from None
        if not sep:
            raise ConfigError(f"--add {pair!r} is not KEY=NUMBER")
    return values


def _entity_text(entity: list[tuple[str, str | None]]) -> str:
    return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in entity)


def _quotas_alter(args: argparse.Namespace) -> int:
    entity = _quota_entity(args)
    if not entity:
        raise ConfigError("name an entity: --user NAME, --user-default, --client-id ID or --client-id-default")
    set_values = _quota_values(args.add)
    remove = [key.strip() for key in (args.delete or "").split(",") if key.strip()]
    if not set_values and not remove:
        raise ConfigError("nothing to change: give --add KEY=VALUE,... and/or --delete KEY,...")

    async def run() -> None:
        async with _client(args) as client:
            await client.alter_client_quotas(entity, set_values, remove)

    asyncio.run(run())
    print(f"altered quotas of {_entity_text(entity)}")
    return 0


def _quotas_describe(args: argparse.Namespace) -> int:
    entity = _quota_entity(args)
    # As kafka-configs: named entities are matched exactly and alone; no entity describes every one.
    components = [(kind, 1 if name is None else 0, name) for kind, name in entity]

    async def run() -> Any:
        async with _client(args) as client:
            return await client.describe_client_quotas(components, strict=bool(components))

    found = asyncio.run(run())
    if args.format == "json":
        print(json.dumps([{"entity": {kind: name for kind, name in parts}, "quotas": values}
                          for parts, values in found]))
        return 0
    table = Table("entity", "quotas")
    for parts, values in found:
        table.add_row(_entity_text(parts), ", ".join(f"{k}={v:g}" for k, v in sorted(values.items())))
    _console().print(table)
    return 0


_SOURCE_NAMES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG"}


def _broker_entity(args: argparse.Namespace) -> int | None:
    """The broker a `configs` command names (None: the cluster-wide default); SystemExit on a bad name."""
    if args.entity_default:
        return None
    try:
        return int(args.entity_name)
    except ValueError:
        raise SystemExit(f"floe configs: --entity-name {args.entity_name!r} is not a broker id") from None


def _broker_configs_describe(args: argparse.Namespace) -> int:
    broker = _broker_entity(args)

    async def run() -> dict[str, tuple[str | None, int]]:
        async with _client(args) as client:
            return await client.describe_broker_configs(broker)

    configs = asyncio.run(run())
    print("Default configs for brokers in the cluster are:" if broker is None else f"All configs for broker {broker} are:")
    for name in sorted(configs):
        value, source = configs[name]
        print(f"  {name}={'null' if value is None else value} ({_SOURCE_NAMES.get(source, source)})")
    return 0


def _configs_describe(args: argparse.Namespace) -> int:
    if args.entity_type == "brokers":
        return _broker_configs_describe(args)
    if args.entity_default:
        raise SystemExit("floe configs describe: --entity-default is for --entity-type brokers")

    async def run() -> dict[str, str | None]:
        async with _client(args) as client:
            return await client.describe_configs(args.entity_name)

    configs = asyncio.run(run())
    print(f"All configs for topic {args.entity_name} are:")
    for name in sorted(configs):
        print(f"  {name}={'null' if configs[name] is None else configs[name]}")
    return 0


def _configs_alter(args: argparse.Namespace) -> int:
    set_configs = parse_overrides([p for p in (args.add_config or "").split(",") if p], "--add-config")
    delete = [name.strip() for name in (args.delete_config or "").split(",") if name.strip()]
    if not set_configs and not delete:
        raise SystemExit("floe configs alter: give --add-config and/or --delete-config")

    if args.entity_type == "brokers":
        broker = _broker_entity(args)

        async def alter_broker() -> None:
            async with _client(args) as client:
                await client.alter_broker_configs(broker, set_configs, delete, validate_only=args.validate_only)

        asyncio.run(alter_broker())
        verb = "Validated" if args.validate_only else "Completed updating"
        print(f"{verb} default config for brokers in the cluster." if broker is None
              else f"{verb} config for broker {broker}.")
        return 0
    if args.entity_default:
        raise SystemExit("floe configs alter: --entity-default is for --entity-type brokers")

    async def run() -> None:
        async with _client(args) as client:
            await client.alter_topic_configs(args.entity_name, set_configs, delete, validate_only=args.validate_only)

    asyncio.run(run())
    verb = "Validated" if args.validate_only else "Completed updating"
    print(f"{verb} config for topic {args.entity_name}.")
    return 0


def _records_delete(args: argparse.Namespace) -> int:
    async def run() -> int:
        async with _client(args) as client:
            return await client.delete_records(args.topic, args.partition, args.offset)

    low_watermark = asyncio.run(run())
    print(f"partition {args.topic}-{args.partition}: log start offset is now {low_watermark}")
    return 0


def _leaders_elect(args: argparse.Namespace) -> int:
    if args.all_topic_partitions == bool(args.topic):
        raise SystemExit("floe leaders elect: give --topic (with --partition) or --all-topic-partitions")
    if args.partition is not None and not args.topic:
        raise SystemExit("floe leaders elect: --partition needs --topic")

    async def run() -> dict[tuple[str, int], Any]:
        async with _client(args) as client:
            partitions = None
            if args.topic:
                info = await client.describe_topic(args.topic)
                indexes = [args.partition] if args.partition is not None else [p.partition for p in info.partitions]
                partitions = [(args.topic, index) for index in indexes]
            return await client.elect_leaders(partitions, unclean=args.election_type == "unclean")

    outcomes = asyncio.run(run())
    failed = 0
    for (topic, partition), error in sorted(outcomes.items()):
        if error is None:
            print(f"{topic}-{partition}: elected")
        else:
            print(f"{topic}-{partition}: {error.code.name}")
            failed += error.code != ErrorCode.election_not_needed
    if not outcomes:
        print("no partition needed an election")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="floe", description="Floe: a Kafka-compatible log on object storage")
    commands = parser.add_subparsers(dest="command", required=True)

    local = commands.add_parser("local", help="the embedded local stack").add_subparsers(dest="local_command", required=True)
    up = local.add_parser("up", help="run moto (S3, DynamoDB) and broker processes until interrupted")
    up.add_argument("--brokers", type=int, default=1)
    up.add_argument("--data-dir", type=Path, default=DEFAULT_DIR)
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a Kafka broker config for every broker, e.g. log.segment.bytes=1048576")
    up.add_argument("--http", action=argparse.BooleanOptionalAction, default=True,
                    help="also serve the HTTP API through the local adapter (default: on)")
    up.add_argument("--security", choices=SECURITY_MODES, default="plaintext",
                    help="plaintext (default); ssl: TLS listeners with a local CA; sasl_ssl: TLS and SCRAM-SHA-512 "
                         "users (a super user's client_config goes into stack.json)")
    up.set_defaults(func=_local_up)
    demo = local.add_parser("demo", help="run the end-to-end demo on a fresh 3-broker local stack")
    demo.add_argument("--size", choices=("full", "small"), default="full",
                      help="full: about 200k records over HTTP and 1M over Kafka; small: a quick run of the same steps")
    demo.add_argument("--data-dir", type=Path, default=Path(".floe/demo"),
                      help="where the demo's stack lives (emptied first)")
    demo.add_argument("--security", choices=("plaintext", "sasl_ssl"), default="plaintext",
                      help="sasl_ssl: the secured run instead (TLS, SCRAM-SHA-512, produce and consume with "
                           "confluent-kafka configured from stack.json's client_config)")
    demo.set_defaults(func=_local_demo)

    cluster = argparse.ArgumentParser(add_help=False)
    where = cluster.add_mutually_exclusive_group()
    where.add_argument("--stack", type=Path, default=DEFAULT_DIR,
                       help=f"local stack directory whose stack.json names the brokers (default {DEFAULT_DIR})")
    where.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]", help="brokers to ask, instead of --stack")
    cluster.add_argument("--request-timeout", type=float, default=30.0, metavar="SECONDS")
    cluster.add_argument("--command-config", type=Path, metavar="FILE",
                         help="client security properties, librdkafka's names (security.protocol, ssl.ca.location, "
                              "sasl.mechanisms, sasl.username, sasl.password), as Kafka's CLIs take them")
    cluster.add_argument("-X", dest="client_property", action="append", default=[], metavar="KEY=VALUE",
                         help="one client property, as kcat's -X (repeatable; after --command-config's)")

    topics = commands.add_parser("topics", help="create, list, describe and delete topics").add_subparsers(
        dest="topics_command", required=True)
    create = topics.add_parser("create", parents=[cluster], help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a topic config, e.g. retention.ms=86400000 (repeatable)")
    create.set_defaults(func=_topics_create)
    listing = topics.add_parser("list", parents=[cluster], help="list topics")
    listing.set_defaults(func=_topics_list)
    describe = topics.add_parser("describe", parents=[cluster], help="partitions, leaders, ISR and configs")
    describe.add_argument("name")
    describe.set_defaults(func=_topics_describe)
    delete = topics.add_parser("delete", parents=[cluster], help="delete a topic")
    delete.add_argument("name")
    delete.set_defaults(func=_topics_delete)
    alter = topics.add_parser("alter", parents=[cluster], help="add partitions to a topic (CreatePartitions)")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, required=True, help="the new partition count (more than now)")
    alter.add_argument("--replica-assignment", metavar="B:B,B:B,...",
                       help="the replicas of each new partition, as kafka-topics --alter takes them")
    alter.add_argument("--validate-only", action="store_true", help="check without adding")
    alter.set_defaults(func=_topics_alter)

    produce = commands.add_parser("produce", parents=[cluster], help="send stdin lines as records")
    produce.add_argument("topic")
    produce.add_argument("--key-separator", metavar="SEP",
                         help="split each line at the first SEP into key and value (keyed lines go to the "
                              "key's partition, as Kafka's default partitioner picks it)")
    produce.add_argument("--partition", type=int, help="send every line to this partition (default: by key, "
                                                       "else round robin)")
    produce.add_argument("--acks", type=int, choices=(-1, 0, 1), default=-1)
    produce.add_argument("--compression", choices=[c.name.lower() for c in Compression], default="none")
    produce.set_defaults(func=_produce)

    consume = commands.add_parser("consume", parents=[cluster], help="print records of a topic")
    consume.add_argument("topic")
    consume.add_argument("--partition", type=int, help="only this partition (default: all)")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset "
                                                                      "(default: only new records)")
    start.add_argument("--offset", type=int, help="start at this offset (in each partition read)")
    consume.add_argument("--max-records", type=int, help="exit after printing this many records")
    consume.add_argument("--timeout", type=float, metavar="SECONDS",
                         help="exit when no record has arrived for this long (default: run until Ctrl-C)")
    consume.add_argument("--format", choices=("text", "json"), default="text",
                         help="text: key, separator, value; json: one object per record with offset, "
                              "timestamp and headers too")
    consume.add_argument("--key-separator", default="\t", metavar="SEP", help="between key and value in text output")
    consume.set_defaults(func=_consume)
    add_group_commands(commands, cluster)
    add_transaction_commands(commands, cluster)
    add_top_command(commands)

    quotas = commands.add_parser("quotas", help="client quotas, as kafka-configs sets them").add_subparsers(
        dest="quotas_command", required=True)
    entity = argparse.ArgumentParser(add_help=False)
    user = entity.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="NAME", help="a user (the principal's name; ANONYMOUS until brokers "
                                                     "authenticate)")
    user.add_argument("--user-default", action="store_true", help="the default user")
    client_id = entity.add_mutually_exclusive_group()
    client_id.add_argument("--client-id", metavar="ID", help="a client id (with --user: that user's client)")
    client_id.add_argument("--client-id-default", action="store_true", help="the default client id")
    alter = quotas.add_parser("alter", parents=[cluster, entity], help="set or remove quotas of an entity")
    alter.add_argument("--add", metavar="KEY=VALUE,...",
                       help="producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate")
    alter.add_argument("--delete", metavar="KEY,...", help="quota keys to remove")
    alter.set_defaults(func=_quotas_alter)
    describe_quotas = quotas.add_parser("describe", parents=[cluster, entity],
                                        help="the quotas of the entity named (default: of every entity)")
    describe_quotas.add_argument("--format", choices=("text", "json"), default="text")
    describe_quotas.set_defaults(func=_quotas_describe)
    configs = commands.add_parser("configs", help="topic configs, as kafka-configs alters and describes them"
                                  ).add_subparsers(dest="configs_command", required=True)
    topic_entity = argparse.ArgumentParser(add_help=False)
    topic_entity.add_argument("--entity-type", choices=("topics", "brokers"), default="topics")
    named = topic_entity.add_mutually_exclusive_group(required=True)
    named.add_argument("--entity-name", "--topic", dest="entity_name", metavar="TOPIC|BROKER_ID")
    named.add_argument("--entity-default", action="store_true",
                       help="with --entity-type brokers: the cluster-wide default of the dynamic broker configs")
    describe_configs = configs.add_parser("describe", parents=[cluster, topic_entity],
                                          help="a topic's configs, or a broker's with their sources")
    describe_configs.set_defaults(func=_configs_describe)
    alter_configs = configs.add_parser("alter", parents=[cluster, topic_entity],
                                       help="set and delete a topic's configs or a broker's dynamic ones, all or nothing")
    alter_configs.add_argument("--add-config", metavar="KEY=VALUE,...", help="settings to set")
    alter_configs.add_argument("--delete-config", metavar="KEY,...", help="settings to return to their default")
    alter_configs.add_argument("--validate-only", action="store_true", help="check without applying")
    alter_configs.set_defaults(func=_configs_alter)
    records = commands.add_parser("records", help="delete records, as kafka-delete-records").add_subparsers(
        dest="records_command", required=True)
    delete_records = records.add_parser("delete", parents=[cluster],
                                        help="move a partition's log start offset up, deleting what lies below")
    delete_records.add_argument("--topic", required=True)
    delete_records.add_argument("--partition", type=int, required=True)
    delete_records.add_argument("--offset", type=int, required=True, help="the new log start (-1: the high watermark)")
    delete_records.set_defaults(func=_records_delete)
    leaders = commands.add_parser("leaders", help="leader elections, as kafka-leader-election").add_subparsers(
        dest="leaders_command", required=True)
    elect = leaders.add_parser("elect", parents=[cluster], help="a preferred or unclean leader election")
    elect.add_argument("--election-type", choices=("preferred", "unclean"), required=True)
    elect.add_argument("--topic")
    elect.add_argument("--partition", type=int)
    elect.add_argument("--all-topic-partitions", action="store_true")
    elect.set_defaults(func=_leaders_elect)
    add_reassign_command(commands, cluster, _client)
    add_user_commands(commands, cluster)
    add_acl_commands(commands, cluster, _client)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, StackError) as exc:
        print(f"floe: {exc}", file=sys.stderr)
        return 2
    except ClientError as exc:
        print(f"floe: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
