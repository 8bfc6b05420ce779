"""`floe groups list` and `floe groups describe GROUP`: consumer groups as an operator sees them.

`describe` prints the group's state, protocol and coordinator, its members with their assignment,
and per partition the committed offset, the log-end offset (asked of the partition's leader) and
the lag between them, like Kafka's `kafka-consumer-groups.sh --describe`, and the lag in seconds that the
group's coordinator reports (``kafka_consumergroup_lag_seconds``, scraped from the brokers' metrics
endpoints: ``--metrics-url``, else the stack's stack.json when the cluster is the stack's).
`--format json` gives the same as one JSON object for scripts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from rich.console import Console
from rich.table import Table

from broker_core.local_stack import StackError, cluster_settings_of, stack_metrics_urls
from broker_core.metrics.scrape import ScrapeError, scrape

from .admin import GroupAdmin, GroupDescription, OffsetResetTarget
from .errors import GroupAdminError


def add_group_commands(commands: argparse._SubParsersAction, cluster: argparse.ArgumentParser) -> None:
    """Add `groups list|describe` to the `floe` parser; ``cluster`` holds --stack/--bootstrap-servers."""
    groups = commands.add_parser("groups", help="list consumer groups, describe one with its lag").add_subparsers(
        dest="groups_command", required=True)
    listing = groups.add_parser("list", parents=[cluster], help="every consumer group and its state")
    listing.add_argument("--format", choices=("text", "json"), default="text")
    listing.set_defaults(func=groups_list)
    describe = groups.add_parser("describe", parents=[cluster],
                                 help="members, assignment, committed and log-end offsets, lag per partition")
    describe.add_argument("group")
    describe.add_argument("--format", choices=("text", "json"), default="text")
    describe.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                          help="a broker's metrics endpoint to read the time lag from (repeatable; default: the "
                               "stack's brokers)")
    describe.set_defaults(func=groups_describe)
    reset = groups.add_parser("reset-offsets", parents=[cluster],
                              help="move an inactive group's committed offsets (a dry run unless --execute)")
    reset.add_argument("--group", required=True)
    reset.add_argument("--topic", required=True, action="append", metavar="TOPIC[:P,...]",
                       help="a topic (all its partitions) or some of its partitions; repeatable")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:MM:SS[.sss][+HH:MM]",
                    help="the first offset at or after this time (UTC unless an offset is given)")
    to.add_argument("--to-offset", type=int, metavar="N", help="this offset, within [earliest, latest]")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets (default: only show them)")
    reset.set_defaults(func=groups_reset_offsets)


def _admin(args: argparse.Namespace) -> GroupAdmin:
    servers, security = cluster_settings_of(args)
    timeout = getattr(args, "request_timeout", 30.0)
    return GroupAdmin(servers, timeout_s=timeout, retry_for_s=timeout, security=security)


def _console() -> Console:
    return Console(width=None if sys.stdout.isatty() else 160)


def groups_list(args: argparse.Namespace) -> int:
    try:
        with _admin(args) as admin:
            listed = admin.list_groups()
    except (GroupAdminError, StackError) as exc:
        print(f"floe groups list: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps([{"group_id": g.group_id, "protocol_type": g.protocol_type, "state": g.state}
                          for g in listed]))
        return 0
    table = Table("group", "state", "protocol type")
    for group in listed:
        table.add_row(group.group_id, group.state, group.protocol_type)
    _console().print(table)
    return 0


def groups_describe(args: argparse.Namespace) -> int:
    try:
        with _admin(args) as admin:
            described = admin.describe_group(args.group)
    except (GroupAdminError, StackError) as exc:
        print(f"floe groups describe: {exc}", file=sys.stderr)
        return 1
    lag_seconds = time_lag(args.group, _metrics_urls(args))
    if args.format == "json":
        answer = described.to_json()
        for partition in answer["partitions"]:
            partition["lag_seconds"] = lag_seconds.get((partition["topic"], partition["partition"]))
        print(json.dumps(answer))
        return 0
    print_description(described, _console(), lag_seconds)
    return 0


def _metrics_urls(args: argparse.Namespace) -> list[str]:
    if args.metrics_url:
        return list(args.metrics_url)
    if args.bootstrap_servers:
        return []  # another cluster than the stack's
    try:
        return stack_metrics_urls(args.stack)
    except StackError:
        return []


def time_lag(group: str, urls: list[str]) -> dict[tuple[str, int], float]:
    """The group's time lag per partition, as its coordinator reports it at one of ``urls`` (a broker that
    does not answer is skipped with a note on stderr)."""
    found: dict[tuple[str, int], float] = {}
    for url in urls:
        try:
            scraped = scrape(url)
        except ScrapeError as exc:
            print(f"floe groups describe: no time lag from {exc}", file=sys.stderr)
            continue
        for sample in scraped.series("kafka_consumergroup_lag_seconds", group=group):
            found[(sample.labels["topic"], int(sample.labels["partition"]))] = sample.value
    return found


def _reset_targets(specs: list[str]) -> list[tuple[str, int | None]]:
    """`t`, `t:0` or `t:0,2` (kafka-consumer-groups' --topic) to (topic, partition or None for all)."""
    targets: list[tuple[str, int | None]] = []
    for spec in specs:
        topic, sep, partitions = spec.partition(":")
        if not topic or (sep and not partitions):
            raise ValueError(f"--topic {spec!r} is not TOPIC or TOPIC:PARTITION[,PARTITION...]")
        if not sep:
            targets.append((topic, None))
            continue
        try:
            targets += [(topic, int(p)) for p in partitions.split(",")]
        except ValueError:
            raise ValueError(f"--topic {spec!r}: partitions must be integers") from None
    return targets


def _reset_target(args: argparse.Namespace) -> OffsetResetTarget:
    if args.to_earliest:
        return OffsetResetTarget("earliest")
    if args.to_latest:
        return OffsetResetTarget("latest")
    if args.to_offset is not None:
        return OffsetResetTarget("offset", args.to_offset)
    try:
        when = datetime.datetime.fromisoformat(args.to_datetime)
    except ValueError:
        raise ValueError(f"--to-datetime {args.to_datetime!r} is not YYYY-MM-DDTHH:MM:SS[.sss][+HH:MM]") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return OffsetResetTarget("datetime", int(when.timestamp() * 1000))


def groups_reset_offsets(args: argparse.Namespace) -> int:
    try:
        targets, to = _reset_targets(args.topic), _reset_target(args)
    except ValueError as exc:
        print(f"floe groups reset-offsets: {exc}", file=sys.stderr)
        return 2
    try:
        with _admin(args) as admin:
            resets = admin.plan_offset_reset(args.group, targets, to)
            if args.execute:
                admin.commit_offset_reset(args.group, resets)
    except (GroupAdminError, StackError) as exc:
        print(f"floe groups reset-offsets: {exc}", file=sys.stderr)
        return 1
    table = Table("group", "topic", "partition", "current offset", "new offset")
    for r in resets:
        table.add_row(args.group, r.topic, str(r.partition), "-" if r.current_offset < 0 else str(r.current_offset),
                      str(r.new_offset))
    console = _console()
    console.print(table)
    if not args.execute:
        console.print("dry run: nothing committed (add --execute to commit these offsets)")
    return 0


def print_description(described: GroupDescription, console: Console,
                      lag_seconds: dict[tuple[str, int], float] | None = None) -> None:
    console.print(f"group {described.group_id}  state {described.state}  protocol "
                  f"{described.protocol_type or '-'}/{described.protocol or '-'}  coordinator {described.coordinator}")
    members = Table("member id", "instance id", "client id", "host", "assignment")
    for m in described.members:
        assignment = ", ".join(f"{topic}-{partition}" for topic, partition in m.assignment)
        members.add_row(m.member_id, m.group_instance_id or "", m.client_id, m.client_host, assignment)
    console.print(members)
    partitions = Table("topic", "partition", "committed offset", "log-end offset", "lag", "lag (s)", "member id")
    seconds = lag_seconds or {}
    for p in described.partitions:
        lag_s = seconds.get((p.topic, p.partition))
        partitions.add_row(
            p.topic, str(p.partition), "-" if p.committed_offset < 0 else str(p.committed_offset),
            "-" if p.log_end_offset < 0 else str(p.log_end_offset), "-" if p.lag is None else str(p.lag),
            "-" if lag_s is None else f"{lag_s:.1f}", p.member_id or "",
        )
    console.print(partitions)
