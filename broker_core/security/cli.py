"""`floe users alter|describe`: SCRAM users, managed the way kafka-configs manages them.

    floe users alter --user alice --add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'
    floe users alter --user alice --delete-config SCRAM-SHA-256
    floe users describe [--user alice] [--format json]

The salt is drawn and the password salted here, on the operator's machine: the broker receives
AlterUserScramCredentials with (salt, salted password, iterations) and stores what SCRAM needs, so the
password itself never crosses the network. As with kafka-configs, a password given in --add-config
cannot hold ``,`` or ``]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import sys
from typing import Any

from kio.schema.errors import ErrorCode

from broker_core.client import FloeClient
from broker_core.local_stack import cluster_settings_of
from broker_core.settings import ConfigError

from .credentials import CODE_BY_MECHANISM, MECHANISM_BY_CODE
from .scram import DEFAULT_SALT_BYTES, MIN_ITERATIONS, SCRAM_MECHANISMS, salted_password

_ENTRY = re.compile(r"(?P<mechanism>[A-Za-z0-9-]+)=\[(?P<options>[^\]]*)\]")


def parse_add_config(text: str) -> dict[str, tuple[str, int]]:
    """kafka-configs' ``MECHANISM=[iterations=N,password=P],...`` -> {mechanism: (password, iterations)}."""
    found: dict[str, tuple[str, int]] = {}
    position = 0
    while position < len(text):
        match = _ENTRY.match(text, position)
        if match is None:
            raise ConfigError(f"--add-config: expected MECHANISM=[password=...] at {text[position:]!r}")
        mechanism = match["mechanism"].upper()
        if mechanism not in SCRAM_MECHANISMS:
            raise ConfigError(f"--add-config: {match['mechanism']!r} is not one of {', '.join(SCRAM_MECHANISMS)}")
        if mechanism in found:
            raise ConfigError(f"--add-config: {mechanism} is given twice")
        options: dict[str, str] = {}
        for pair in match["options"].split(","):
            key, sep, value = pair.partition("=")
            if not sep or key.strip() not in ("iterations", "password"):
                raise ConfigError(f"--add-config: {mechanism} takes iterations=N and password=P, got {pair!r}")
            options[key.strip()] = value
        if not options.get("password"):
            raise ConfigError(f"--add-config: {mechanism} needs password=...")
        iterations_text = options.get("iterations", str(MIN_ITERATIONS)).strip()
        if not iterations_text.isdigit():
            raise ConfigError(f"--add-config: iterations must be a whole number, got {iterations_text!r}")
        found[mechanism] = (options["password"], int(iterations_text))
        position = match.end()
        if position < len(text):
            if text[position] != ",":
                raise ConfigError(f"--add-config: expected ',' at {text[position:]!r}")
            position += 1
    return found


def parse_delete_config(text: str) -> list[str]:
    mechanisms = [part.strip().upper() for part in text.split(",") if part.strip()]
    for mechanism in mechanisms:
        if mechanism not in SCRAM_MECHANISMS:
            raise ConfigError(f"--delete-config: {mechanism!r} is not one of {', '.join(SCRAM_MECHANISMS)}")
    return mechanisms


def add_user_commands(commands: argparse._SubParsersAction, cluster: argparse.ArgumentParser) -> None:
    """Add `users alter|describe` to the `floe` parser; ``cluster`` holds --stack/--bootstrap-servers."""
    users = commands.add_parser("users", help="SCRAM users, as kafka-configs --entity-type users sets them"
                                ).add_subparsers(dest="users_command", required=True)
    alter = users.add_parser("alter", parents=[cluster], help="add or delete a user's SCRAM credentials")
    alter.add_argument("--user", required=True, metavar="NAME")
    alter.add_argument("--add-config", metavar="'SCRAM-SHA-512=[iterations=8192,password=...]'",
                       help="credentials to create or replace (iterations 4096..16384, default 4096)")
    alter.add_argument("--delete-config", metavar="SCRAM-SHA-256[,SCRAM-SHA-512]", help="credentials to delete")
    alter.set_defaults(func=users_alter)
    describe = users.add_parser("describe", parents=[cluster], help="users' SCRAM mechanisms and iterations")
    describe.add_argument("--user", action="append", metavar="NAME", help="this user (repeatable; default: every user)")
    describe.add_argument("--format", choices=("text", "json"), default="text")
    describe.set_defaults(func=users_describe)


def _client(args: argparse.Namespace) -> FloeClient:
    servers, security = cluster_settings_of(args)
    return FloeClient(servers, client_id="floe-cli", request_timeout_s=args.request_timeout, security=security)


def users_alter(args: argparse.Namespace) -> int:
    added = parse_add_config(args.add_config) if args.add_config else {}
    deleted = parse_delete_config(args.delete_config) if args.delete_config else []
    if not added and not deleted:
        raise ConfigError("nothing to change: give --add-config and/or --delete-config")
    upsertions = []
    for mechanism, (password, iterations) in added.items():
        salt = secrets.token_bytes(DEFAULT_SALT_BYTES)
        upsertions.append((args.user, CODE_BY_MECHANISM[mechanism], iterations, salt,
                           salted_password(mechanism, password, salt, iterations)))
    deletions = [(args.user, CODE_BY_MECHANISM[mechanism]) for mechanism in deleted]

    async def run() -> dict[str, tuple[ErrorCode, str | None]]:
        async with _client(args) as client:
            return await client.alter_user_scram_credentials(upsertions, deletions)

    results = asyncio.run(run())
    code, message = results.get(args.user, (ErrorCode.unknown_server_error, "the broker did not answer for this user"))
    if code != ErrorCode.none:
        print(f"floe users alter: {code.name.upper()}: {message}", file=sys.stderr)
        return 1
    print(f"altered SCRAM credentials of user {args.user}")
    return 0


def users_describe(args: argparse.Namespace) -> int:
    async def run() -> Any:
        async with _client(args) as client:
            return await client.describe_user_scram_credentials(args.user)

    found = asyncio.run(run())
    failed = False
    rows = []
    for user, (code, message, infos) in found.items():
        if code != ErrorCode.none:
            print(f"floe users describe: {user}: {code.name.upper()}: {message}", file=sys.stderr)
            failed = True
            continue
        rows.append({"user": user, "credentials": [
            {"mechanism": MECHANISM_BY_CODE.get(mechanism, str(mechanism)), "iterations": iterations}
            for mechanism, iterations in infos]})
    if args.format == "json":
        print(json.dumps(rows))
    else:
        for row in rows:
            described = ",".join(f"{c['mechanism']}=iterations={c['iterations']}" for c in row["credentials"])
            print(f"SCRAM credential configs for user-principal '{row['user']}' are {described}")
    return 1 if failed else 0
