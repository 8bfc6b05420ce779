"""The `floe` command: run the local stack and work with topics, records and groups from a shell.

Commands that talk to a cluster read `stack.json` (default `.floe/local/stack.json`) unless given
`--bootstrap-servers`.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from broker_core.local_stack import DEFAULT_DIR, LocalStack, StackError
from broker_core.server.config import ConfigError, parse_overrides


def _local_up(args: argparse.Namespace) -> int:
    overrides = parse_overrides(args.set)
    stack = LocalStack(directory=args.data_dir, brokers=args.brokers, overrides=overrides)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="floe", description="Floe: a Kafka-compatible log on object storage")
    commands = parser.add_subparsers(dest="command", required=True)

    local = commands.add_parser("local", help="the embedded local stack").add_subparsers(dest="local_command", required=True)
    up = local.add_parser("up", help="run moto (S3, DynamoDB) and broker processes until interrupted")
    up.add_argument("--brokers", type=int, default=1)
    up.add_argument("--data-dir", type=Path, default=DEFAULT_DIR)
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a Kafka broker config for every broker, e.g. log.segment.bytes=1048576")
    up.set_defaults(func=_local_up)
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


if __name__ == "__main__":
    sys.exit(main())
