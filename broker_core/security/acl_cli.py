"""`floe acls add|remove|list`: ACLs from a shell, with kafka-acls' options, over CreateAcls/DeleteAcls/DescribeAcls.

As kafka-acls: every ``--allow-principal`` / ``--deny-principal`` gets every ``--operation`` (default
All) from every ``--allow-host`` / ``--deny-host`` (default ``*``) on every resource named (``--topic``,
``--group``, ``--transactional-id``, ``--cluster``), with ``--resource-pattern-type`` literal (the
default) or prefixed; an operation the resource type does not have is refused before anything is
sent. ``remove`` deletes what those options describe, or, with no principal, every ACL of the
resources named. ``list`` shows the ACLs of the resources named (all when none), optionally of one
``--principal``, with ``--resource-pattern-type`` any (the default), match, literal or prefixed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Console
from rich.table import Table

from broker_core.client import FloeClient
from broker_core.settings import ConfigError

from .acls import (
    CLUSTER_NAME,
    VALID_OPERATIONS,
    WILDCARD_HOST,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    operation_name,
    parse_operation,
)

ClientFactory = Callable[[argparse.Namespace], FloeClient]


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    found = [(ResourceType.TOPIC, name) for name in args.topic]
    found += [(ResourceType.GROUP, name) for name in args.group]
    found += [(ResourceType.TRANSACTIONAL_ID, name) for name in args.transactional_id]
    if args.cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return found


def _pattern(args: argparse.Namespace, resource_type: ResourceType) -> PatternType:
    pattern = PatternType[args.resource_pattern_type.upper()]
    return PatternType.LITERAL if resource_type is ResourceType.CLUSTER else pattern


def _operations(args: argparse.Namespace) -> list[AclOperation]:
    try:
        return [parse_operation(text) for text in args.operation] or [AclOperation.ALL]
    except AclError as exc:
        raise ConfigError(str(exc)) from None


def _entries(args: argparse.Namespace) -> list[tuple[str, str, AclPermission]]:
    """(principal, host, permission) for every principal and host given."""
    allow_hosts = args.allow_host or [WILDCARD_HOST]
    deny_hosts = args.deny_host or [WILDCARD_HOST]
    return ([(p, h, AclPermission.ALLOW) for p in args.allow_principal for h in allow_hosts]
            + [(p, h, AclPermission.DENY) for p in args.deny_principal for h in deny_hosts])


def bindings_to_add(args: argparse.Namespace) -> list[AclBinding]:
    resources = _resources(args)
    if not resources:
        raise ConfigError("name a resource: --topic, --group, --transactional-id or --cluster")
    entries = _entries(args)
    if not entries:
        raise ConfigError("name who: --allow-principal or --deny-principal")
    if args.resource_pattern_type not in ("literal", "prefixed"):
        raise ConfigError("ACLs are added with --resource-pattern-type literal or prefixed")
    operations = _operations(args)
    bindings = []
    for resource_type, name in resources:
        for operation in operations:
            if operation not in VALID_OPERATIONS[resource_type]:
                raise ConfigError(f"operation {operation_name(operation)} does not apply to "
                                  f"{resource_type.name.lower()} {name!r}")
            for principal, host, permission in entries:
                bindings.append(AclBinding(resource_type, name, _pattern(args, resource_type), principal, host,
                                           operation, permission))
    return bindings


def filters_to_remove(args: argparse.Namespace) -> list[AclBindingFilter]:
    resources = _resources(args)
    if not resources:
        raise ConfigError("name a resource: --topic, --group, --transactional-id or --cluster")
    entries = _entries(args)
    operations = _operations(args) if args.operation else [AclOperation.ANY]
    filters = []
    for resource_type, name in resources:
        pattern = _pattern(args, resource_type)
        if not entries:
            filters.append(AclBindingFilter(resource_type, name, pattern, None, None, AclOperation.ANY,
                                            AclPermission.ANY))
            continue
        for operation in operations:
            for principal, host, permission in entries:
                filters.append(AclBindingFilter(resource_type, name, pattern, principal, host, operation, permission))
    return filters


def filters_to_list(args: argparse.Namespace) -> list[AclBindingFilter]:
    pattern = PatternType[args.resource_pattern_type.upper()]
    resources = _resources(args)
    if not resources:
        return [AclBindingFilter(ResourceType.ANY, None, pattern, args.principal, None, AclOperation.ANY,
                                 AclPermission.ANY)]
    return [AclBindingFilter(resource_type, name, pattern, args.principal, None, AclOperation.ANY, AclPermission.ANY)
            for resource_type, name in resources]


def _as_dict(binding: AclBinding) -> dict[str, Any]:
    return {"resource_type": binding.resource_type.name.lower(), "resource_name": binding.resource_name,
            "pattern_type": binding.pattern_type.name.lower(), "principal": binding.principal, "host": binding.host,
            "operation": operation_name(binding.operation), "permission": binding.permission.name.capitalize()}


def _print(bindings: Iterable[AclBinding], output: str) -> None:
    ordered = sorted(set(bindings), key=lambda b: (b.resource_type, b.resource_name, b.pattern_type, b.principal,
                                                   b.host, b.operation, b.permission))
    if output == "json":
        print(json.dumps([_as_dict(b) for b in ordered]))
        return
    table = Table("resource", "pattern", "principal", "host", "operation", "permission")
    for b in ordered:
        table.add_row(f"{b.resource_type.name.lower()}:{b.resource_name}", b.pattern_type.name.lower(), b.principal,
                      b.host, operation_name(b.operation), b.permission.name.capitalize())
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def add_acl_commands(commands: argparse._SubParsersAction, cluster: argparse.ArgumentParser,
                     client: ClientFactory) -> None:
    """The ``acls`` command and its subcommands, talking to the cluster through ``client(args)``."""
    acls = commands.add_parser("acls", help="ACLs, as kafka-acls manages them").add_subparsers(
        dest="acls_command", required=True)
    resource = argparse.ArgumentParser(add_help=False)
    resource.add_argument("--topic", action="append", default=[], metavar="NAME", help="a topic (repeatable)")
    resource.add_argument("--group", action="append", default=[], metavar="NAME", help="a consumer group (repeatable)")
    resource.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                          help="a transactional id (repeatable)")
    resource.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
    who = argparse.ArgumentParser(add_help=False)
    who.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                     help="a principal to allow, e.g. User:alice or User:* (repeatable)")
    who.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                     help="a principal to deny (repeatable)")
    who.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                     help="an address allowed principals are allowed from (default: every host)")
    who.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                     help="an address denied principals are denied from (default: every host)")
    who.add_argument("--operation", action="append", default=[], metavar="OP",
                     help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                          "AlterConfigs, IdempotentWrite or All (repeatable; default All)")

    def run(action: Callable[[argparse.Namespace, FloeClient], Any]) -> Callable[[argparse.Namespace], int]:
        def command(args: argparse.Namespace) -> int:
            async def go() -> Any:
                async with client(args) as connected:
                    return await action(args, connected)

            return asyncio.run(go())

        return command

    async def add(args: argparse.Namespace, connected: FloeClient) -> int:
        bindings = bindings_to_add(args)
        await connected.create_acls(bindings)
        print(f"added {len(bindings)} ACL{'s' if len(bindings) != 1 else ''}")
        _print(bindings, "text")
        return 0

    async def remove(args: argparse.Namespace, connected: FloeClient) -> int:
        deleted = await connected.delete_acls(filters_to_remove(args))
        print(f"removed {len(deleted)} ACL{'s' if len(deleted) != 1 else ''}")
        _print(deleted, "text")
        return 0

    async def listing(args: argparse.Namespace, connected: FloeClient) -> int:
        found = []
        for acl_filter in filters_to_list(args):
            found += await connected.describe_acls(acl_filter)
        _print(found, args.format)
        return 0

    patterns = ("literal", "prefixed")
    adding = acls.add_parser("add", parents=[cluster, resource, who], help="add ACLs")
    adding.add_argument("--resource-pattern-type", choices=patterns, default="literal")
    adding.set_defaults(func=run(add))
    removing = acls.add_parser("remove", parents=[cluster, resource, who],
                               help="remove the ACLs described (every ACL of the resources when no principal is named)")
    removing.add_argument("--resource-pattern-type", choices=patterns, default="literal")
    removing.set_defaults(func=run(remove))
    listed = acls.add_parser("list", parents=[cluster, resource], help="list ACLs (of the resources named, or all)")
    listed.add_argument("--principal", metavar="TYPE:NAME", help="only this principal's ACLs")
    listed.add_argument("--resource-pattern-type", choices=("any", "match", "literal", "prefixed"), default="any")
    listed.add_argument("--format", choices=("text", "json"), default="text")
    listed.set_defaults(func=run(listing))
