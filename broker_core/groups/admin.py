"""Group administration over the Kafka protocol: list groups, describe one with its lag.

``GroupAdmin`` is a small blocking client for `floe groups` and for tests: it speaks fixed API
versions that Floe brokers serve (it is not meant for other Kafka brokers), finds a group's
coordinator with FindCoordinator, reads members and assignments with DescribeGroups, committed
offsets with OffsetFetch, and log-end offsets with ListOffsets sent to each partition's leader,
as Kafka's own `kafka-consumer-groups.sh --describe` does. It reaches brokers through the client's
`BlockingConnection` and, while a group's coordinator moves or loads, retries with the client's
backoff until ``retry_for_s`` has passed.

Thread-safety: one GroupAdmin per thread; it keeps one connection per broker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from broker_core.client import (
    EARLIEST,
    LATEST,
    PLAINTEXT,
    RETRY_BACKOFF_S,
    BlockingConnection,
    ClientError,
    ClientSecurity,
    backoff_s,
    parse_bootstrap_servers,
)
from broker_core.protocol.api_keys import ApiKey

from .consumer_protocol import CONSUMER_PROTOCOL_TYPE, ConsumerProtocolError, decode_assignment
from .errors import GroupAdminError

_VERSIONS = {ApiKey.METADATA: 9, ApiKey.LIST_OFFSETS: 7, ApiKey.FIND_COORDINATOR: 3, ApiKey.DESCRIBE_GROUPS: 5,
             ApiKey.LIST_GROUPS: 4, ApiKey.OFFSET_FETCH: 7, ApiKey.OFFSET_COMMIT: 8}
_CLIENT_ID = "floe-groups"
_RETRIABLE = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
              ErrorCode.coordinator_load_in_progress}


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed_offset: int  # -1: nothing committed
    log_end_offset: int  # -1: the leader could not be asked
    member_id: str | None

    @property
    def lag(self) -> int | None:
        if self.committed_offset < 0 or self.log_end_offset < 0:
            return None
        return max(self.log_end_offset - self.committed_offset, 0)


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: int
    members: tuple[MemberDescription, ...]
    partitions: tuple[PartitionLag, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id, "state": self.state, "protocol_type": self.protocol_type,
            "protocol": self.protocol, "coordinator": self.coordinator,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "assignment": [list(tp) for tp in m.assignment]} for m in self.members],
            "partitions": [{"topic": p.topic, "partition": p.partition, "committed_offset": p.committed_offset,
                            "log_end_offset": p.log_end_offset, "lag": p.lag, "member_id": p.member_id}
                           for p in self.partitions],
        }


class GroupAdmin:
    """List and describe consumer groups of a Floe cluster reached through ``bootstrap_servers``.

    ``timeout_s`` bounds each connect and each request; requests that meet a moving or loading
    coordinator are retried for ``retry_for_s``. Every failure is a `GroupAdminError`.
    """

    def __init__(self, bootstrap_servers: str, timeout_s: float = 10.0, retry_for_s: float = 15.0,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.security = security
        try:
            self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        except ValueError as exc:
            raise GroupAdminError(str(exc)) from exc
        self.timeout_s = timeout_s
        self.retry_for_s = retry_for_s
        self._connections: dict[tuple[str, int], BlockingConnection] = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}

    def __enter__(self) -> GroupAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def _request(self, address: tuple[str, int], api_key: ApiKey, data: dict[str, Any],
                 version: int | None = None) -> Any:
        """One request over the connection to ``address`` (opened on first use); a connection that
        fails is dropped, and the failure raised as GroupAdminError."""
        try:
            connection = self._connections.get(address)
            if connection is None:
                connection = BlockingConnection(*address, client_id=_CLIENT_ID, request_timeout_s=self.timeout_s,
                                                security=self.security)
                self._connections[address] = connection
            return connection.request(api_key, data, _VERSIONS[api_key] if version is None else version)
        except ClientError as exc:
            dropped = self._connections.pop(address, None)
            if dropped is not None:
                dropped.close()
            raise GroupAdminError(str(exc)) from exc

    def send(self, broker_id: int, api_key: ApiKey, data: dict[str, Any], version: int | None = None) -> Any:
        """Send one request to broker ``broker_id`` (as the last metadata read named it)."""
        if not self.brokers:
            self.refresh_metadata()
        address = self.brokers.get(broker_id)
        if address is None:
            raise GroupAdminError(f"broker {broker_id} is not in the cluster metadata")
        return self._request(address, api_key, data, version)

    def refresh_metadata(self) -> None:
        errors = []
        for address in self.bootstrap + [a for a in self.brokers.values() if a not in self.bootstrap]:
            try:
                response = self._request(address, ApiKey.METADATA, {
                    "topics": None, "allow_auto_topic_creation": False,
                    "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
                })
            except GroupAdminError as exc:
                errors.append(str(exc))
                continue
            self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
            self.leaders = {(t.name, p.partition_index): p.leader_id for t in response.topics for p in t.partitions}
            return
        raise GroupAdminError("no bootstrap server answered: " + "; ".join(errors))

    def find_coordinator(self, group_id: str) -> int:
        """The id of the broker coordinating ``group_id`` (any broker answers; it may take the lease)."""
        deadline = time.monotonic() + self.retry_for_s
        attempt = 0
        while True:
            last = None
            for broker_id in sorted(self.brokers) or [None]:
                try:
                    if broker_id is None:
                        self.refresh_metadata()
                        continue
                    response = self.send(broker_id, ApiKey.FIND_COORDINATOR, {"key": group_id, "key_type": 0})
                except GroupAdminError as exc:
                    last = str(exc)
                    continue
                if response.error_code == ErrorCode.none:
                    if response.node_id not in self.brokers:
                        self.refresh_metadata()
                    return int(response.node_id)
                last = response.error_code.name
                if response.error_code not in _RETRIABLE:
                    raise GroupAdminError(f"FindCoordinator {group_id!r}: {last}")
            if time.monotonic() > deadline:
                raise GroupAdminError(f"no coordinator for group {group_id!r}: {last}")
            time.sleep(backoff_s(attempt, RETRY_BACKOFF_S))
            attempt += 1

    def _to_coordinator(self, group_id: str, api_key: ApiKey, data: dict[str, Any],
                        error_of: Any) -> tuple[int, Any]:
        """Send to the group's coordinator, looking it up again while it moves or loads."""
        deadline = time.monotonic() + self.retry_for_s
        attempt = 0
        while True:
            coordinator = self.find_coordinator(group_id)
            try:
                response = self.send(coordinator, api_key, data)
            except GroupAdminError:
                if time.monotonic() > deadline:
                    raise
                self.refresh_metadata()
                time.sleep(backoff_s(attempt, RETRY_BACKOFF_S))
                attempt += 1
                continue
            error = error_of(response)
            if error not in _RETRIABLE:
                if error != ErrorCode.none:
                    raise GroupAdminError(f"group {group_id!r}: {error.name}")
                return coordinator, response
            if time.monotonic() > deadline:
                raise GroupAdminError(f"group {group_id!r}: {error.name}")
            time.sleep(backoff_s(attempt, RETRY_BACKOFF_S))
            attempt += 1

    # listing ------------------------------------------------------------------------------------

    def list_groups(self) -> list[ListedGroup]:
        """Every group any live broker reports (each lists those it coordinates), sorted by id."""
        self.refresh_metadata()
        found: dict[str, ListedGroup] = {}
        for broker_id in sorted(self.brokers):
            response = self.send(broker_id, ApiKey.LIST_GROUPS, {"states_filter": ()})
            if response.error_code != ErrorCode.none:
                raise GroupAdminError(f"ListGroups on broker {broker_id}: {response.error_code.name}")
            for g in response.groups:
                found.setdefault(g.group_id, ListedGroup(g.group_id, g.protocol_type, g.group_state))
        return [found[name] for name in sorted(found)]

    # describing ---------------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription:
        """Members, assignments, and per partition the committed offset, log-end offset and lag."""
        self.refresh_metadata()
        coordinator, response = self._to_coordinator(
            group_id, ApiKey.DESCRIBE_GROUPS, {"groups": (group_id,), "include_authorized_operations": False},
            lambda r: r.groups[0].error_code,
        )
        described = response.groups[0]
        members = []
        for m in described.members:
            assignment: list[tuple[str, int]] = []
            if described.protocol_type == CONSUMER_PROTOCOL_TYPE:
                try:
                    assignment = decode_assignment(bytes(m.member_assignment))
                except ConsumerProtocolError:
                    assignment = []
            members.append(MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                             tuple(assignment)))
        _, offsets = self._to_coordinator(
            group_id, ApiKey.OFFSET_FETCH, {"group_id": group_id, "topics": None, "require_stable": False},
            lambda r: r.error_code,
        )
        committed = {(t.name, p.partition_index): int(p.committed_offset)
                     for t in offsets.topics for p in t.partitions if p.error_code == ErrorCode.none}
        owners = {tp: m.member_id for m in members for tp in m.assignment}
        keys = sorted(set(committed) | set(owners))
        log_ends = self.log_end_offsets(keys)
        partitions = tuple(
            PartitionLag(topic, partition, committed.get((topic, partition), -1),
                         log_ends.get((topic, partition), -1), owners.get((topic, partition)))
            for topic, partition in keys
        )
        return GroupDescription(
            group_id=group_id, state=described.group_state, protocol_type=described.protocol_type,
            protocol=described.protocol_data, coordinator=coordinator, members=tuple(members),
            partitions=partitions,
        )

    def log_end_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The latest offset (high watermark) of each partition, asked of its leader."""
        return self.list_offsets(partitions, LATEST)

    def list_offsets(self, partitions: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """ListOffsets at ``timestamp`` (EARLIEST, LATEST or milliseconds) of each partition, asked of its
        leader; a partition whose leader does not answer, or without a record at or after ``timestamp``,
        is left out."""
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in partitions:
            leader = self.leaders.get((topic, partition), -1)
            if leader >= 0:
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
        result: dict[tuple[str, int], int] = {}
        for leader, topics in by_leader.items():
            try:
                response = self.send(leader, ApiKey.LIST_OFFSETS, {
                    "replica_id": -1, "isolation_level": 0,
                    "topics": [{"name": name, "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
                        for p in indexes]} for name, indexes in topics.items()],
                })
            except GroupAdminError:
                continue
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code == ErrorCode.none and p.offset >= 0:
                        result[(t.name, p.partition_index)] = int(p.offset)
        return result

    # resetting ----------------------------------------------------------------------------------

    def plan_offset_reset(self, group_id: str, targets: list[tuple[str, int | None]],
                          to: OffsetResetTarget) -> list[OffsetReset]:
        """What `kafka-consumer-groups --reset-offsets` would commit: per partition of ``targets`` (a topic
        with None means all its partitions) its committed offset and the offset ``to`` gives, clamped to
        the partition's [earliest, latest] as Kafka's tool does. GroupAdminError if the group has members
        (offsets are reset only while it is inactive) or a topic or partition does not exist."""
        self.refresh_metadata()
        description = self.describe_group(group_id)
        if description.state not in ("Empty", "Dead"):
            raise GroupAdminError(f"assignments can only be reset if the group {group_id!r} is inactive, "
                                  f"but the current state is {description.state}")
        partitions: list[tuple[str, int]] = []
        for topic, partition in targets:
            known = sorted(p for t, p in self.leaders if t == topic)
            if not known:
                raise GroupAdminError(f"topic {topic!r} does not exist")
            if partition is not None and partition not in known:
                raise GroupAdminError(f"topic {topic!r} has no partition {partition}")
            partitions += [(topic, p) for p in known if partition is None or p == partition]
        earliest = self.list_offsets(partitions, EARLIEST)
        latest = self.list_offsets(partitions, LATEST)
        missing = [f"{t}-{p}" for t, p in partitions if (t, p) not in earliest or (t, p) not in latest]
        if missing:
            raise GroupAdminError(f"no leader answered for {', '.join(missing)}")
        if to.kind == "datetime":
            found = self.list_offsets(partitions, to.value)
            wanted = {tp: found.get(tp, latest[tp]) for tp in partitions}
        elif to.kind == "earliest":
            wanted = dict(earliest)
        elif to.kind == "latest":
            wanted = dict(latest)
        else:
            wanted = {tp: to.value for tp in partitions}
        committed = {(p.topic, p.partition): p.committed_offset for p in description.partitions}
        return [OffsetReset(topic, partition, committed.get((topic, partition), -1),
                            min(max(wanted[(topic, partition)], earliest[(topic, partition)]), latest[(topic, partition)]))
                for topic, partition in partitions]

    def commit_offset_reset(self, group_id: str, resets: list[OffsetReset]) -> None:
        """Commit the planned offsets for the (inactive) group; GroupAdminError naming a refused partition."""
        by_topic: dict[str, list[OffsetReset]] = {}
        for reset in resets:
            by_topic.setdefault(reset.topic, []).append(reset)
        _, response = self._to_coordinator(group_id, ApiKey.OFFSET_COMMIT, {
            "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": r.partition, "committed_offset": r.new_offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""} for r in items]} for topic, items in by_topic.items()],
        }, lambda r: next((p.error_code for t in r.topics for p in t.partitions if p.error_code in _RETRIABLE),
                          ErrorCode.none))
        refused = [f"{t.name}-{p.partition_index}: {p.error_code.name}" for t in response.topics for p in t.partitions
                   if p.error_code != ErrorCode.none]
        if refused:
            raise GroupAdminError(f"group {group_id!r}: offsets not reset: {'; '.join(refused)}")


@dataclass(frozen=True)
class OffsetResetTarget:
    """Where --reset-offsets moves a group: earliest, latest, a datetime (ms since the epoch) or an offset."""

    kind: str  # "earliest", "latest", "datetime" or "offset"
    value: int = 0


@dataclass(frozen=True)
class OffsetReset:
    topic: str
    partition: int
    current_offset: int  # -1: the group committed none
    new_offset: int
