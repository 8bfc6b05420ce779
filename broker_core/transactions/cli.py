"""`floe transactions list` and `floe transactions describe ID`: transactions as an operator sees them.

Like Kafka's `kafka-transactions.sh`: `list` asks every live broker for the transactions it
coordinates (ListTransactions) and prints their union, with the coordinator of each; `describe`
finds the transactional id's coordinator (FindCoordinator, key type 1) and prints its
DescribeTransactions answer: state, producer id and epoch, timeout, start time and partitions.
`--format json` gives the same for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from broker_core.client import BlockingConnection
from broker_core.client.errors import ClientError
from broker_core.client.floe_client import parse_bootstrap_servers
from broker_core.local_stack import StackError, load_stack
from broker_core.protocol.api_keys import ApiKey

TRANSACTION_KEY_TYPE = 1
_CLIENT_ID = "floe-transactions"


class TransactionAdminError(Exception):
    """The command could not get its answer; the message says why."""


def add_transaction_commands(commands: argparse._SubParsersAction, cluster: argparse.ArgumentParser) -> None:
    """Add `transactions list|describe` to the `floe` parser; ``cluster`` holds --stack/--bootstrap-servers."""
    transactions = commands.add_parser("transactions", help="list transactions, describe one").add_subparsers(
        dest="transactions_command", required=True)
    listing = transactions.add_parser("list", parents=[cluster], help="every transactional id, its state and coordinator")
    listing.add_argument("--state", action="append", default=[], help="only these states (repeatable)")
    listing.add_argument("--format", choices=("text", "json"), default="text")
    listing.set_defaults(func=transactions_list)
    describe = transactions.add_parser("describe", parents=[cluster],
                                       help="state, producer id and epoch, timeout, start time and partitions")
    describe.add_argument("transactional_id")
    describe.add_argument("--format", choices=("text", "json"), default="text")
    describe.set_defaults(func=transactions_describe)


def _connect(address: tuple[str, int], timeout_s: float) -> BlockingConnection:
    return BlockingConnection(*address, client_id=_CLIENT_ID, request_timeout_s=timeout_s)


def _brokers(args: argparse.Namespace) -> dict[int, tuple[str, int]]:
    servers = args.bootstrap_servers or load_stack(args.stack)["bootstrap_servers"]
    errors = []
    for address in parse_bootstrap_servers(servers):
        try:
            connection = _connect(address, args.request_timeout)
        except ClientError as exc:
            errors.append(str(exc))
            continue
        try:
            answer = connection.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False,
                                                           "include_topic_authorized_operations": False}, 12)
        finally:
            connection.close()
        return {b.node_id: (b.host, b.port) for b in answer.brokers}
    raise TransactionAdminError(f"no broker answered: {'; '.join(errors)}")


def list_transactions(args: argparse.Namespace) -> list[dict[str, Any]]:
    listed: dict[str, dict[str, Any]] = {}
    for broker_id, address in sorted(_brokers(args).items()):
        connection = _connect(address, args.request_timeout)
        try:
            answer = connection.request(ApiKey.LIST_TRANSACTIONS, {
                "state_filters": tuple(args.state), "producer_id_filters": (), "duration_filter": -1}, 1)
        finally:
            connection.close()
        if answer.unknown_state_filters:
            raise TransactionAdminError(f"unknown states: {', '.join(answer.unknown_state_filters)}")
        for t in answer.transaction_states:
            listed.setdefault(t.transactional_id, {"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                                   "state": t.transaction_state, "coordinator": broker_id})
    return [listed[key] for key in sorted(listed)]


def describe_transaction(args: argparse.Namespace) -> dict[str, Any]:
    brokers = _brokers(args)
    connection = _connect(next(iter(brokers.values())), args.request_timeout)
    try:
        found = connection.request(ApiKey.FIND_COORDINATOR, {
            "key_type": TRANSACTION_KEY_TYPE, "coordinator_keys": (args.transactional_id,)}, 4).coordinators[0]
        if found.error_code != 0:
            raise TransactionAdminError(f"no coordinator for {args.transactional_id!r}: error {found.error_code}")
        if (found.host, found.port) != (connection.host, connection.port):
            connection.close()
            connection = _connect((found.host, found.port), args.request_timeout)
        (state,) = connection.request(ApiKey.DESCRIBE_TRANSACTIONS,
                                      {"transactional_ids": (args.transactional_id,)}, 0).transaction_states
    finally:
        connection.close()
    if state.error_code != 0:
        raise TransactionAdminError(f"cannot describe {args.transactional_id!r}: error {state.error_code}")
    started = state.transaction_start_time
    return {
        "transactional_id": state.transactional_id, "coordinator": found.node_id, "state": state.transaction_state,
        "producer_id": state.producer_id, "producer_epoch": state.producer_epoch,
        "timeout_ms": int(state.transaction_timeout.total_seconds() * 1000),
        "start_time": started.isoformat() if started.timestamp() > 0 and state.transaction_state == "Ongoing" else None,
        "partitions": [f"{t.topic}-{p}" for t in state.topics for p in t.partitions],
    }


def transactions_list(args: argparse.Namespace) -> int:
    try:
        listed = list_transactions(args)
    except (TransactionAdminError, ClientError, StackError) as exc:
        print(f"floe transactions list: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(listed))
        return 0
    table = Table("transactional id", "producer id", "state", "coordinator")
    for t in listed:
        table.add_row(t["transactional_id"], str(t["producer_id"]), t["state"], str(t["coordinator"]))
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    return 0


def transactions_describe(args: argparse.Namespace) -> int:
    try:
        described = describe_transaction(args)
    except (TransactionAdminError, ClientError, StackError) as exc:
        print(f"floe transactions describe: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(described))
        return 0
    table = Table("field", "value")
    for key, value in described.items():
        shown = ", ".join(value) if isinstance(value, list) else ("-" if value is None else str(value))
        table.add_row(key.replace("_", " "), shown)
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    return 0

