"""`floe reassign`: move partition replicas between brokers, as kafka-reassign-partitions does.

One command, one action flag, Kafka's JSON files:

- ``--generate --topics-to-move-json-file T --broker-list 1,2,3`` prints the current assignment of the
  topics in T (``{"version": 1, "topics": [{"topic": "t"}]}``) and a proposed one on the brokers
  listed, balanced by replica count and by bytes (sizes from DescribeLogDirs), moving as little as it
  can (`broker_core.metadata.reassignment.balanced_plan`). Nothing is changed.
- ``--execute --reassignment-json-file P [--throttle B]`` prints the current assignment of P's
  partitions (keep it to roll back), then starts the moves (AlterPartitionReassignments). With
  ``--throttle`` (bytes/s) it first sets, as Kafka's tool does, the topic configs
  ``leader.replication.throttled.replicas`` (the current replicas of each moving partition) and
  ``follower.replication.throttled.replicas`` (the replicas being added), and
  ``leader/follower.replication.throttled.rate`` on every broker involved (dynamic broker configs), and
  waits until those brokers report the rates, so the moves start throttled.
- ``--verify --reassignment-json-file P`` says, per partition, whether its move is complete; once all
  are, it removes the throttles (unless ``--preserve-throttles``). Exit status 0 when all are complete.
- ``--cancel --reassignment-json-file P`` cancels the moves still in progress (the partitions go back
  to their original replicas) and removes the throttles (unless ``--preserve-throttles``).
- ``--list`` prints the reassignments in progress.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from broker_core.client import ClientError, FloeClient
from broker_core.metadata.reassignment import balanced_plan
from broker_core.quotas.replication import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ThrottledReplicasError,
    parse_throttled_replicas,
)

Key = tuple[str, int]


class PlanFileError(ValueError):
    """A JSON file given to `floe reassign` does not have Kafka's shape; the message says where."""


def add_reassign_command(commands: argparse._SubParsersAction, cluster: argparse.ArgumentParser,
                         client: Callable[[argparse.Namespace], FloeClient]) -> None:
    reassign = commands.add_parser("reassign", parents=[cluster],
                                   help="move partition replicas between brokers, as kafka-reassign-partitions")
    action = reassign.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true", help="propose a balanced assignment (changes nothing)")
    action.add_argument("--execute", action="store_true", help="start the moves of --reassignment-json-file")
    action.add_argument("--verify", action="store_true", help="report progress; remove throttles when done")
    action.add_argument("--cancel", action="store_true", help="cancel the moves of --reassignment-json-file")
    action.add_argument("--list", action="store_true", help="the reassignments in progress")
    reassign.add_argument("--topics-to-move-json-file", type=Path, metavar="FILE")
    reassign.add_argument("--broker-list", metavar="ID,ID,...", help="the brokers to place replicas on (--generate)")
    reassign.add_argument("--reassignment-json-file", type=Path, metavar="FILE")
    reassign.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_SECOND",
                          help="replication throttle while moving (--execute); -1: none")
    reassign.add_argument("--preserve-throttles", action="store_true",
                          help="leave the throttles in place (--verify, --cancel)")
    reassign.set_defaults(func=lambda args: run_reassign(args, client))


def run_reassign(args: argparse.Namespace, client: Callable[[argparse.Namespace], FloeClient]) -> int:
    try:
        if args.generate:
            return asyncio.run(_generate(args, client(args)))
        if args.list:
            return asyncio.run(_list(client(args)))
        if args.reassignment_json_file is None:
            raise PlanFileError("give --reassignment-json-file")
        plan = read_plan(args.reassignment_json_file)
        if args.execute:
            return asyncio.run(_execute(client(args), plan, args.throttle))
        if args.verify:
            return asyncio.run(_verify(client(args), plan, args.preserve_throttles))
        return asyncio.run(_cancel(client(args), plan, args.preserve_throttles))
    except PlanFileError as exc:
        print(f"floe reassign: {exc}", file=sys.stderr)
        return 2


def read_plan(path: Path) -> dict[Key, tuple[int, ...]]:
    """Kafka's reassignment JSON: ``{"version": 1, "partitions": [{"topic", "partition", "replicas"}]}``."""
    document = _read_json(path)
    partitions = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(partitions, list) or not partitions:
        raise PlanFileError(f"{path}: expected {{\"version\": 1, \"partitions\": [...]}} with at least one partition")
    plan: dict[Key, tuple[int, ...]] = {}
    for number, entry in enumerate(partitions):
        try:
            key = (entry["topic"], entry["partition"])
            replicas = tuple(entry["replicas"])
            if not isinstance(key[0], str) or not isinstance(key[1], int) or not all(isinstance(r, int) for r in replicas):
                raise TypeError
        except (KeyError, TypeError):
            raise PlanFileError(f"{path}: partitions[{number}] needs \"topic\" (string), \"partition\" (integer) and "
                                "\"replicas\" (integers)") from None
        if key in plan:
            raise PlanFileError(f"{path}: partition {key[0]}-{key[1]} is listed twice")
        plan[key] = replicas
    return plan


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise PlanFileError(f"{path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise PlanFileError(f"{path}: not JSON ({exc})") from None


def plan_json(assignment: Mapping[Key, Iterable[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": partition, "replicas": list(replicas), "log_dirs": ["any"] * len(list(replicas))}
        for (topic, partition), replicas in sorted(assignment.items())]})


async def _current(client: FloeClient, topics: Iterable[str]) -> dict[Key, tuple[int, ...]]:
    current: dict[Key, tuple[int, ...]] = {}
    for topic in sorted(set(topics)):
        info = await client.describe_topic(topic)
        for p in info.partitions:
            current[(topic, p.partition)] = tuple(p.replicas)
    return current


async def _generate(args: argparse.Namespace, client: FloeClient) -> int:
    if args.topics_to_move_json_file is None or not args.broker_list:
        raise PlanFileError("--generate needs --topics-to-move-json-file and --broker-list")
    document = _read_json(args.topics_to_move_json_file)
    entries = document.get("topics") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("topic"), str) for e in entries):
        raise PlanFileError(f"{args.topics_to_move_json_file}: expected {{\"version\": 1, \"topics\": "
                            "[{\"topic\": \"name\"}, ...]}}")
    try:
        brokers = [int(b) for b in args.broker_list.split(",") if b.strip()]
    except ValueError:
        raise PlanFileError(f"--broker-list {args.broker_list!r} is not a comma-separated list of broker ids") from None
    async with client:
        current = await _current(client, (e["topic"] for e in entries))
        sizes = await client.partition_sizes()
    try:
        proposed = balanced_plan(current, sizes, brokers)
    except ValueError as exc:
        raise PlanFileError(str(exc)) from None
    print("Current partition replica assignment")
    print(plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposed))
    return 0


async def _execute(client: FloeClient, plan: Mapping[Key, tuple[int, ...]], throttle: int) -> int:
    async with client:
        current = await _current(client, (topic for topic, _ in plan))
        unknown = [key for key in plan if key not in current]
        if unknown:
            raise PlanFileError(f"partition {unknown[0][0]}-{unknown[0][1]} does not exist")
        print("Current partition replica assignment")
        print()
        print(plan_json({key: current[key] for key in plan}))
        print()
        print("Save this to use as the --reassignment-json-file option during rollback")
        if throttle >= 0:
            await _set_throttles(client, plan, current, throttle)
        outcomes = await client.alter_partition_reassignments(plan)
    failed = {key: error for key, error in outcomes.items() if error is not None}
    started = [f"{t}-{p}" for (t, p) in sorted(plan) if (t, p) not in failed]
    if started:
        print(f"Successfully started partition reassignment{'s' if len(started) > 1 else ''} for {','.join(started)}")
    for (topic, partition), error in sorted(failed.items()):
        print(f"Error reassigning partition {topic}-{partition}: {error}", file=sys.stderr)
    return 1 if failed else 0


async def _set_throttles(client: FloeClient, plan: Mapping[Key, tuple[int, ...]], current: Mapping[Key, tuple[int, ...]],
                         throttle: int) -> None:
    """Kafka's --throttle: the moving partitions' current replicas throttled as leaders, the added ones as
    followers, and the rate on every broker involved."""
    leaders: dict[str, set[tuple[int, int]]] = {}
    followers: dict[str, set[tuple[int, int]]] = {}
    brokers: set[int] = set()
    for (topic, partition), target in plan.items():
        before = current[(topic, partition)]
        if set(before) == set(target):
            continue
        leaders.setdefault(topic, set()).update((partition, b) for b in before)
        followers.setdefault(topic, set()).update((partition, b) for b in target if b not in before)
        brokers.update(before, target)
    for topic in sorted(leaders):
        configs = await client.describe_configs(topic)
        await client.alter_topic_configs(topic, {
            LEADER_REPLICAS: _merged(configs.get(LEADER_REPLICAS), leaders[topic]),
            FOLLOWER_REPLICAS: _merged(configs.get(FOLLOWER_REPLICAS), followers.get(topic, set())),
        })
    for broker in sorted(brokers):
        await client.alter_broker_configs(broker, {LEADER_RATE: str(throttle), FOLLOWER_RATE: str(throttle)})
    await _await_rates(client, brokers, str(throttle))
    if brokers:
        print("Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle "
              "is removed.")
        print(f"The inter-broker throttle limit was set to {throttle} B/s")


async def _await_rates(client: FloeClient, brokers: Iterable[int], rate: str, timeout_s: float = 30.0) -> None:
    """Wait until each broker reports the throttle rates (it read them with a metadata poll), so the moves
    start throttled; a broker that does not answer is left to catch up on its own."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    for broker in sorted(brokers):
        while asyncio.get_running_loop().time() < deadline:
            try:
                configs = await client.describe_broker_configs(broker)
            except ClientError:
                break
            if all(configs.get(name, (None, 0))[0] == rate for name in (LEADER_RATE, FOLLOWER_RATE)):
                break
            await asyncio.sleep(0.1)


def _merged(existing: str | None, pairs: set[tuple[int, int]]) -> str:
    try:
        known = parse_throttled_replicas(existing or "")
    except ThrottledReplicasError:
        known = parse_throttled_replicas("")
    if known.every:
        return "*"
    return ",".join(f"{p}:{b}" for p, b in sorted(known.pairs | pairs))


async def _clear_throttles(client: FloeClient, plan: Mapping[Key, tuple[int, ...]]) -> None:
    """Remove the throttle configs of the plan's topics and of every broker (as kafka-reassign-partitions)."""
    for topic in sorted({topic for topic, _ in plan}):
        configs = await client.describe_configs(topic)
        if configs.get(LEADER_REPLICAS) or configs.get(FOLLOWER_REPLICAS):
            await client.alter_topic_configs(topic, {}, [LEADER_REPLICAS, FOLLOWER_REPLICAS])
            print(f"Clearing topic-level throttles on topic {topic}")
    brokers = sorted(client.brokers)
    for broker in brokers:
        await client.alter_broker_configs(broker, {}, [LEADER_RATE, FOLLOWER_RATE])
    print(f"Clearing broker-level throttles on brokers {','.join(str(b) for b in brokers)}")


async def _verify(client: FloeClient, plan: Mapping[Key, tuple[int, ...]], preserve_throttles: bool) -> int:
    async with client:
        ongoing = await client.list_partition_reassignments(list(plan))
        current = await _current(client, (topic for topic, _ in plan))
        print("Status of partition reassignment:")
        done = True
        for key, target in sorted(plan.items()):
            name = f"{key[0]}-{key[1]}"
            if key in ongoing:
                done = False
                print(f"Reassignment of partition {name} is still in progress.")
            elif current.get(key) == target:
                print(f"Reassignment of partition {name} is completed.")
            else:
                done = False
                print(f"There is no active reassignment of partition {name}, but replica set is "
                      f"{list(current.get(key, ()))} rather than {list(target)}.")
        if done and not preserve_throttles:
            await _clear_throttles(client, plan)
    return 0 if done else 1


async def _cancel(client: FloeClient, plan: Mapping[Key, tuple[int, ...]], preserve_throttles: bool) -> int:
    async with client:
        outcomes = await client.alter_partition_reassignments(dict.fromkeys(plan))
        cancelled = [f"{t}-{p}" for (t, p), error in sorted(outcomes.items()) if error is None]
        untouched = [f"{t}-{p}" for (t, p), error in sorted(outcomes.items()) if error is not None]
        if cancelled:
            print(f"Successfully cancelled partition reassignments for: {','.join(cancelled)}")
        if untouched:
            print(f"None of the specified partition reassignments are active: {','.join(untouched)}"
                  if not cancelled else f"Not active: {','.join(untouched)}")
        if not preserve_throttles:
            await _clear_throttles(client, plan)
    return 0


async def _list(client: FloeClient) -> int:
    async with client:
        ongoing = await client.list_partition_reassignments()
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (topic, partition), (replicas, adding, removing) in sorted(ongoing.items()):
        print(f"{topic}-{partition}: replicas: {','.join(map(str, replicas))}. "
              f"adding: {','.join(map(str, adding))}. removing: {','.join(map(str, removing))}.")
    return 0

