"""`FloeClient`: Floe's own asyncio Kafka client for one cluster: topics, produce, fetch and offsets.

The Lambda front ends, the `floe` CLI and the benchmarks talk to brokers through it. It
keeps a metadata cache (brokers, topics, partition leaders) and two `BrokerConnection`s per broker,
one for fetches so that a long poll never holds up a produce; it sends each request to the
partition's leader and retries errors Kafka marks retriable, with `backoff_s` between attempts,
refreshing metadata first when the error says the cache is stale. Consumer groups are not here
(`broker_core.groups.admin` reads them).
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.messages import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
)
from broker_core.records import Compression, RecordInput, build_batch, iter_headers, parse_header
from broker_core.records.errors import TruncatedBatchError
from broker_core.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)

from .backoff import RETRY_BACKOFF_S, backoff_s
from .connection import BrokerConnection
from .errors import BrokerConnectionError, ClientError, KafkaError, NoBrokersError, raise_for
from .results import (
    BrokerInfo,
    FetchResult,
    PartitionInfo,
    ProduceResult,
    RawFetchResult,
    TopicInfo,
    decode_fetch,
)
from .security import PLAINTEXT, ClientSecurity

EARLIEST = EARLIEST_TIMESTAMP  # ListOffsets: the log start offset
LATEST = LATEST_TIMESTAMP  # ListOffsets: the high watermark (the offset the next acknowledged record gets)
DEFAULT_FETCH_MAX_BYTES = 1024 * 1024

# A broker answers one request of a connection at a time (as Kafka does), so a long-poll fetch would
# hold up every request behind it: fetches get a connection of their own to each broker.
_DEFAULT_LANE = "default"
_FETCH_LANE = "fetch"

# Retriable produce errors after which the broker may already have appended the batch: retrying them
# without an idempotent producer could write the records twice, so produce reports them instead.
_PRODUCE_MAYBE_APPENDED = frozenset({ErrorCode.request_timed_out, ErrorCode.not_enough_replicas_after_append})

_T = TypeVar("_T")


def parse_bootstrap_servers(servers: str) -> list[tuple[str, int]]:
    """``"host:port,host:port"`` to pairs (empty entries skipped, ``[v6]`` brackets removed);
    ValueError on an entry that is not host:port, or when none is given."""
    result = []
    for entry in servers.split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {entry!r} is not host:port")
        result.append((host.strip("[]"), int(port)))
    if not result:
        raise ValueError("no bootstrap servers given")
    return result


def _millis(value: datetime.datetime | None) -> int:
    return -1 if value is None else int(value.timestamp() * 1000)


# One partition's fetch answer: records bytes, high watermark, log start offset and the aborted
# transactions (producer id, first offset) a read_committed fetch names.
_FetchedPartition = tuple[bytes, int, int, tuple[tuple[int, int], ...]]


class FloeClient:
    """A Kafka client for one cluster: admin calls, produce, fetch and offsets.

    Role: find each partition's leader and send it the request, so callers name topics and
    partitions, never brokers. Use as ``async with FloeClient("host:port") as client: ...``.
    Invariants: the metadata cache (``brokers``, ``topics``) is only replaced by a Metadata response,
    and a topic's entry is dropped whenever an error says its leaders are stale; a request that may
    have changed something on the broker (a produce whose connection failed after sending, or that
    timed out) is reported, never repeated, so retries cannot duplicate records. Retriable errors are
    retried ``retries`` times with exponential backoff from ``retry_backoff_s``; anything else raises
    `KafkaError` with the broker's code.
    Callers: the tasks of the one event loop that entered it, concurrently. Not thread-safe.
    """

    def __init__(self, bootstrap_servers: str, *, client_id: str = "floe-client", request_timeout_s: float = 30.0,
                 retries: int = 8, retry_backoff_s: float = RETRY_BACKOFF_S,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self.client_id = client_id
        self.security = security
        self.request_timeout_s = request_timeout_s
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.controller_id = -1
        self._connections: dict[tuple[int, str], BrokerConnection] = {}
        self._connecting: dict[tuple[int, str], asyncio.Task] = {}
        self._bootstrap_connection: BrokerConnection | None = None

    async def __aenter__(self) -> FloeClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect to a bootstrap server and load the broker list."""
        await self.refresh_metadata([])

    async def close(self) -> None:
        for task in self._connecting.values():
            task.cancel()
        connections = list(self._connections.values())
        if self._bootstrap_connection is not None:
            connections.append(self._bootstrap_connection)
        self._connections.clear()
        self._bootstrap_connection = None
        for connection in connections:
            await connection.close()

    # connections -------------------------------------------------------------------------------

    async def _connection(self, node_id: int, lane: str = _DEFAULT_LANE) -> BrokerConnection:
        """The connection of ``lane`` to a broker, opened on first use (one attempt at a time)."""
        key = (node_id, lane)
        connection = self._connections.get(key)
        if connection is not None and connection.connected:
            return connection
        task = self._connecting.get(key)
        if task is None:
            broker = self.brokers.get(node_id)
            if broker is None:
                await self.refresh_metadata([])
                broker = self.brokers.get(node_id)
                if broker is None:
                    raise BrokerConnectionError(f"broker {node_id} is not in the cluster metadata")
            task = asyncio.ensure_future(self._open(broker))
            self._connecting[key] = task
            task.add_done_callback(lambda _t: self._connecting.pop(key, None))
        connection = await asyncio.shield(task)
        self._connections[key] = connection
        return connection

    async def _open(self, broker: BrokerInfo) -> BrokerConnection:
        connection = BrokerConnection(broker.host, broker.port, client_id=self.client_id,
                                      request_timeout_s=self.request_timeout_s, node_id=broker.node_id,
                                      security=self.security)
        await connection.connect()
        return connection

    async def _any_connection(self) -> BrokerConnection:
        """A live connection to some broker: one already open, else a known broker, else bootstrap."""
        for (_, lane), connection in self._connections.items():
            if lane == _DEFAULT_LANE and connection.connected:
                return connection
        if self._bootstrap_connection is not None and self._bootstrap_connection.connected:
            return self._bootstrap_connection
        errors = []
        for broker in list(self.brokers.values()):
            try:
                return await self._connection(broker.node_id)
            except BrokerConnectionError as exc:
                errors.append(str(exc))
        for host, port in self.bootstrap:
            connection = BrokerConnection(host, port, client_id=self.client_id,
                                          request_timeout_s=self.request_timeout_s, security=self.security)
            try:
                await connection.connect()
            except BrokerConnectionError as exc:
                errors.append(str(exc))
                continue
            self._bootstrap_connection = connection
            return connection
        raise NoBrokersError("no broker reachable: " + "; ".join(errors))

    async def _send_anywhere(self, api_key: int, request: Mapping[str, Any], *, idempotent: bool = True) -> Any:
        """Send to any broker, once more elsewhere if the connection fails: for a request that changes
        something (not ``idempotent``), only if it had not been sent."""
        for attempt in range(2):
            connection = await self._any_connection()
            try:
                return await connection.send(api_key, request)
            except BrokerConnectionError as exc:
                if attempt == 1 or (exc.request_sent and not idempotent):
                    raise
        raise AssertionError("unreachable")

    async def send_to_broker(self, node_id: int, api_key: int, request: Any) -> Any:
        """Send a kio request entity (in its own version) to one broker and return its response: for
        requests routed by a coordinator's node id rather than a partition's leader."""
        connection = await self._connection(node_id)
        return await connection.send(api_key, request)

    async def send_to_any_broker(self, api_key: int, request: Any) -> Any:
        """Send a kio request entity that any broker answers (FindCoordinator), repeated elsewhere only
        when the connection fails."""
        return await self._send_anywhere(api_key, request)

    async def _send_to_controller(self, api_key: int, request: Mapping[str, Any]) -> Any:
        """Admin requests go to the controller when one is known (Kafka requires it; Floe's brokers
        accept them anywhere), else to any broker. They are not repeated once sent."""
        if self.controller_id >= 0 and self.controller_id in self.brokers:
            try:
                connection = await self._connection(self.controller_id)
            except BrokerConnectionError:
                await self.refresh_metadata([])
            else:
                return await connection.send(api_key, request)
        return await self._send_anywhere(api_key, request, idempotent=False)

    async def _at_controller(self, api_key: int, request: Mapping[str, Any], attempts: int = 5) -> Any:
        """Send to the controller; on NOT_CONTROLLER (it moved, and the request was not acted on)
        refresh the metadata and send again, a few times, as Kafka's admin client does."""
        for attempt in range(attempts):
            await self.refresh_metadata([])
            response = await self._send_to_controller(api_key, request)
            if getattr(response, "error_code", ErrorCode.none) != ErrorCode.not_controller or attempt == attempts - 1:
                return response
            await self._backoff(attempt)
        raise AssertionError("unreachable")

    async def _backoff(self, attempt: int) -> None:
        await asyncio.sleep(backoff_s(attempt, self.retry_backoff_s))

    # metadata ----------------------------------------------------------------------------------

    async def refresh_metadata(self, topics: Sequence[str] | None = None) -> dict[str, TopicInfo | KafkaError]:
        """Ask a broker for the brokers and ``topics`` (None: every topic; []: brokers only).

        Updates the cache and returns, per topic asked about, its info or the error the broker gave.
        """
        topic_list = None if topics is None else [{"name": name, "topic_id": None} for name in topics]
        response = await self._send_anywhere(ApiKey.METADATA, {
            "topics": topic_list, "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
        })
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, getattr(b, "rack", None))
                        for b in response.brokers}
        self.controller_id = getattr(response, "controller_id", -1)
        for key in [k for k in self._connections if k[0] not in self.brokers]:
            await self._connections.pop(key).close()
        if self.brokers and self._bootstrap_connection is not None:
            # From now on requests go to brokers by id; the bootstrap address may be any of them.
            bootstrap, self._bootstrap_connection = self._bootstrap_connection, None
            await bootstrap.close()
        result: dict[str, TopicInfo | KafkaError] = {}
        if topics is None:
            self.topics = {}
        for topic in response.topics:
            if topic.error_code != ErrorCode.none:
                self.topics.pop(topic.name, None)
                result[topic.name] = KafkaError(topic.error_code, topic=topic.name)
                continue
            partitions = sorted(
                (PartitionInfo(p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes),
                               getattr(p, "leader_epoch", -1), tuple(getattr(p, "offline_replicas", ())))
                 for p in topic.partitions),
                key=lambda p: p.partition,
            )
            topic_id = getattr(topic, "topic_id", None)
            info = TopicInfo(topic.name, topic_id if topic_id and topic_id.int else None, partitions)
            self.topics[topic.name] = info
            result[topic.name] = info
        return result

    async def _topic(self, name: str, *, refresh: bool = False) -> TopicInfo:
        info = None if refresh else self.topics.get(name)
        if info is None:
            found = (await self.refresh_metadata([name])).get(name)
            if isinstance(found, KafkaError):
                raise found
            if found is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, "not in the metadata response", topic=name)
            info = found
        return info

    async def _leader(self, topic: str, partition: int) -> int:
        """The leader's node id, from the cache or fresh metadata; raises KafkaError (maybe retriable)."""
        info = await self._topic(topic)
        if not 0 <= partition < len(info.partitions) or info.partitions[partition].leader < 0:
            info = await self._topic(topic, refresh=True)
        if not 0 <= partition < len(info.partitions):
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"the topic has {len(info.partitions)} partitions", topic=topic, partition=partition)
        leader = info.partitions[partition].leader
        if leader < 0:
            raise KafkaError(ErrorCode.leader_not_available, topic=topic, partition=partition)
        return leader

    async def _by_leader(self, topic: str,
                         by_partition: Mapping[int, _T]) -> tuple[dict[int, dict[int, _T]], KafkaError | None]:
        """``by_partition`` grouped by each partition's leader. A partition whose leader cannot be
        told now (a retriable error) is left out, and the last such error returned with the groups."""
        by_leader: dict[int, dict[int, _T]] = {}
        error: KafkaError | None = None
        for partition, value in by_partition.items():
            try:
                leader = await self._leader(topic, partition)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                error = exc
                continue
            by_leader.setdefault(leader, {})[partition] = value
        return by_leader, error

    async def num_partitions(self, topic: str) -> int:
        return (await self._topic(topic)).num_partitions

    # admin -------------------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None, *, wait_for_leaders: bool = True) -> TopicInfo | None:
        """Create a topic; with ``wait_for_leaders`` return once metadata shows a leader for every
        partition (otherwise return None at once)."""
        response = await self._send_to_controller(ApiKey.CREATE_TOPICS, {
            "topics": [{
                "name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                "assignments": [], "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }],
            "timeout": datetime.timedelta(seconds=self.request_timeout_s), "validate_only": False,
        })
        for result in response.topics:
            raise_for(result.error_code, getattr(result, "error_message", None), topic=result.name)
        if not wait_for_leaders:
            return None
        return await self._wait_for_leaders(name, partitions)

    async def _wait_for_leaders(self, name: str, partitions: int) -> TopicInfo:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_s
        attempt = 0
        while True:
            found = (await self.refresh_metadata([name])).get(name)
            if (isinstance(found, TopicInfo) and len(found.partitions) == partitions
                    and all(p.leader >= 0 for p in found.partitions)):
                return found
            if loop.time() > deadline:
                raise KafkaError(ErrorCode.leader_not_available,
                                 "created, but not every partition has a leader yet", topic=name)
            await self._backoff(attempt)
            attempt += 1

    async def delete_topic(self, name: str) -> None:
        response = await self._send_to_controller(ApiKey.DELETE_TOPICS, {
            "topic_names": [name], "topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
            "timeout": datetime.timedelta(seconds=self.request_timeout_s),
        })
        self.topics.pop(name, None)
        for result in response.responses:
            raise_for(result.error_code, getattr(result, "error_message", None), topic=name)

    async def list_topics(self) -> list[str]:
        await self.refresh_metadata(None)
        return sorted(self.topics)

    async def describe_topic(self, name: str) -> TopicInfo:
        return await self._topic(name, refresh=True)

    async def describe_configs(self, topic: str) -> dict[str, str | None]:
        """The topic's effective configs (its own overrides, broker settings and defaults)."""
        response = await self._send_anywhere(ApiKey.DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": RESOURCE_TOPIC, "resource_name": topic, "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False,
        })
        configs: dict[str, str | None] = {}
        for result in response.results:
            raise_for(result.error_code, result.error_message, topic=topic)
            configs.update((entry.name, entry.value) for entry in result.configs)
        return configs

    async def alter_topic_configs(self, topic: str, set_configs: Mapping[str, str], delete: Sequence[str] = (), *,
                                  validate_only: bool = False) -> None:
        """IncrementalAlterConfigs on one topic: set and delete settings together (all or nothing); raises
        KafkaError with the broker's message (INVALID_CONFIG naming the setting) when it refuses."""
        configs = [{"name": k, "config_operation": 0, "value": v} for k, v in set_configs.items()]
        configs += [{"name": k, "config_operation": 1, "value": None} for k in delete]
        response = await self._send_anywhere(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
            "resources": [{"resource_type": RESOURCE_TOPIC, "resource_name": topic, "configs": configs}],
            "validate_only": validate_only,
        }, idempotent=False)
        for result in response.responses:
            raise_for(result.error_code, result.error_message, topic=topic)

    async def create_partitions(self, topic: str, total: int, assignments: Sequence[Sequence[int]] | None = None, *,
                                validate_only: bool = False) -> None:
        """CreatePartitions: grow ``topic`` to ``total`` partitions (``assignments``: the replicas of each new
        one); raises KafkaError with the broker's code and message when it refuses."""
        response = await self._send_to_controller(ApiKey.CREATE_PARTITIONS, {
            "topics": [{"name": topic, "count": total, "assignments": None if assignments is None else [
                {"broker_ids": list(replicas)} for replicas in assignments]}],
            "timeout": datetime.timedelta(seconds=self.request_timeout_s), "validate_only": validate_only,
        })
        for result in response.results:
            raise_for(result.error_code, result.error_message, topic=topic)
        if not validate_only:
            self.topics.pop(topic, None)

    async def alter_broker_configs(self, broker: int | None, set_configs: Mapping[str, str], delete: Sequence[str] = (),
                                   *, validate_only: bool = False) -> None:
        """IncrementalAlterConfigs on one broker's dynamic configs (``broker`` None: the cluster-wide
        default); raises KafkaError with the broker's message (INVALID_CONFIG naming the setting)."""
        configs = [{"name": k, "config_operation": 0, "value": v} for k, v in set_configs.items()]
        configs += [{"name": k, "config_operation": 1, "value": None} for k in delete]
        name = "" if broker is None else str(broker)
        response = await self._send_anywhere(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
            "resources": [{"resource_type": RESOURCE_BROKER, "resource_name": name, "configs": configs}],
            "validate_only": validate_only,
        }, idempotent=False)
        for result in response.responses:
            raise_for(result.error_code, result.error_message)

    async def describe_broker_configs(self, broker: int | None) -> dict[str, tuple[str | None, int]]:
        """A broker's settings (``broker`` None: the cluster-wide dynamic defaults), each with its source
        (Kafka's ConfigSource id), asked of that broker."""
        request = {"resources": [{"resource_type": RESOURCE_BROKER, "resource_name": "" if broker is None else str(broker),
                                  "configuration_keys": None}],
                   "include_synonyms": False, "include_documentation": False}
        if broker is None:
            response = await self._send_anywhere(ApiKey.DESCRIBE_CONFIGS, request)
        else:
            await self.refresh_metadata([])
            response = await (await self._connection(broker)).send(ApiKey.DESCRIBE_CONFIGS, request)
        configs: dict[str, tuple[str | None, int]] = {}
        for result in response.results:
            raise_for(result.error_code, result.error_message)
            configs.update((entry.name, (entry.value, int(entry.config_source))) for entry in result.configs)
        return configs

    async def alter_partition_reassignments(self, targets: Mapping[tuple[str, int], Sequence[int] | None]
                                            ) -> dict[tuple[str, int], KafkaError | None]:
        """AlterPartitionReassignments at the controller: each partition's target replicas (None cancels);
        per partition None when accepted, else the KafkaError it got."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), replicas in targets.items():
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "replicas": None if replicas is None else list(replicas)})
        response = await self._at_controller(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
            "timeout": datetime.timedelta(seconds=self.request_timeout_s),
            "topics": [{"name": topic, "partitions": parts} for topic, parts in by_topic.items()],
        })
        raise_for(response.error_code, response.error_message)
        return {(r.name, p.partition_index): None if p.error_code == ErrorCode.none else
                KafkaError(p.error_code, p.error_message, topic=r.name, partition=p.partition_index)
                for r in response.responses for p in r.partitions}

    async def list_partition_reassignments(self, partitions: Sequence[tuple[str, int]] | None = None
                                           ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """The reassignments in progress (of ``partitions``; None: all): (replicas, adding, removing) each."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions or ():
            by_topic.setdefault(topic, []).append(partition)
        response = await self._at_controller(ApiKey.LIST_PARTITION_REASSIGNMENTS, {
            "timeout": datetime.timedelta(seconds=self.request_timeout_s),
            "topics": None if partitions is None else [
                {"name": topic, "partition_indexes": indexes} for topic, indexes in by_topic.items()],
        })
        raise_for(response.error_code, response.error_message)
        return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
                for t in response.topics for p in t.partitions}

    async def partition_sizes(self) -> dict[tuple[str, int], int]:
        """Each partition's size in bytes: the largest of its replicas' logs, asked of every broker
        (DescribeLogDirs)."""
        await self.refresh_metadata([])
        sizes: dict[tuple[str, int], int] = {}
        for node_id in list(self.brokers):
            connection = await self._connection(node_id)
            response = await connection.send(ApiKey.DESCRIBE_LOG_DIRS, {"topics": None})
            raise_for(getattr(response, "error_code", ErrorCode.none))  # a top-level error since v3
            for result in response.results:
                for topic in result.topics:
                    for p in topic.partitions:
                        key = (topic.name, p.partition_index)
                        sizes[key] = max(sizes.get(key, 0), int(p.partition_size))
        return sizes

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords on the partition's leader: move its log start to ``offset`` (-1: the high
        watermark); returns the new log start. Repeated on a moved leader (moving the start twice is
        harmless); raises KafkaError with the broker's code when it refuses."""
        request = {"topics": [{"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}],
                   "timeout": datetime.timedelta(seconds=self.request_timeout_s)}

        def answer(response: Any) -> int:
            result = response.topics[0].partitions[0]
            raise_for(result.error_code, topic=topic, partition=partition)
            return int(result.low_watermark)

        return await self._repeat_at_leader(topic, partition, ApiKey.DELETE_RECORDS, request, answer)

    async def elect_leaders(self, partitions: Sequence[tuple[str, int]] | None, *, unclean: bool = False
                            ) -> dict[tuple[str, int], KafkaError | None]:
        """ElectLeaders at the controller (``partitions`` None: every partition); per partition None when
        elected, else the KafkaError it got (ELECTION_NOT_NEEDED among them)."""
        await self.refresh_metadata([])
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions or ():
            by_topic.setdefault(topic, []).append(partition)
        response = await self._send_to_controller(ApiKey.ELECT_LEADERS, {
            "election_type": 1 if unclean else 0,
            "topic_partitions": None if partitions is None else [
                {"topic": topic, "partitions": indexes} for topic, indexes in by_topic.items()],
            "timeout": datetime.timedelta(seconds=self.request_timeout_s),
        })
        raise_for(response.error_code)
        return {(r.topic, p.partition_id): None if p.error_code == ErrorCode.none else
                KafkaError(p.error_code, p.error_message, topic=r.topic, partition=p.partition_id)
                for r in response.replica_election_results for p in r.partition_result}

    async def alter_client_quotas(self, entity: Sequence[tuple[str, str | None]], set_values: Mapping[str, float],
                                  remove: Sequence[str] = (), *, validate_only: bool = False) -> None:
        """Set and remove quotas of one entity, given as (entity_type, name or None for the default)
        pairs; raises KafkaError with the broker's message when it refuses."""
        ops = [{"key": k, "value": float(v), "remove": False} for k, v in set_values.items()]
        ops += [{"key": k, "value": 0.0, "remove": True} for k in remove]
        response = await self._send_anywhere(ApiKey.ALTER_CLIENT_QUOTAS, {
            "entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity], "ops": ops}],
            "validate_only": validate_only,
        }, idempotent=False)
        for entry in response.entries:
            raise_for(entry.error_code, entry.error_message)

    async def describe_client_quotas(self, components: Sequence[tuple[str, int, str | None]] = (), *,
                                     strict: bool = False) -> list[tuple[list[tuple[str, str | None]], dict[str, float]]]:
        """Stored quotas matching (entity_type, match_type, match) filter components: for each
        entity, its (entity_type, name or None for the default) pairs and its quotas."""
        response = await self._send_anywhere(ApiKey.DESCRIBE_CLIENT_QUOTAS, {
            "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
            "strict": strict,
        })
        raise_for(response.error_code, response.error_message)
        return [([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
                for entry in response.entries or ()]

    # SCRAM credentials --------------------------------------------------------------------------

    async def alter_user_scram_credentials(
            self, upsertions: Sequence[tuple[str, int, int, bytes, bytes]] = (),
            deletions: Sequence[tuple[str, int]] = ()) -> dict[str, tuple[ErrorCode, str | None]]:
        """AlterUserScramCredentials: upsertions as (user, mechanism code, iterations, salt, salted
        password), deletions as (user, mechanism code); the broker's (error code, message) per user."""
        response = await self._send_anywhere(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {
            "upsertions": [{"name": user, "mechanism": mechanism, "iterations": iterations, "salt": salt,
                            "salted_password": salted} for user, mechanism, iterations, salt, salted in upsertions],
            "deletions": [{"name": user, "mechanism": mechanism} for user, mechanism in deletions],
        }, idempotent=False)
        return {result.user: (result.error_code, result.error_message) for result in response.results}

    async def describe_user_scram_credentials(
            self, users: Sequence[str] | None = None) -> dict[str, tuple[ErrorCode, str | None, list[tuple[int, int]]]]:
        """DescribeUserScramCredentials of ``users`` (None: every user with credentials): per user, the
        broker's (error code, message, [(mechanism code, iterations)])."""
        response = await self._send_anywhere(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {
            "users": None if users is None else [{"name": user} for user in users]})
        raise_for(response.error_code, response.error_message)
        return {result.user: (result.error_code, result.error_message,
                              [(info.mechanism, info.iterations) for info in result.credential_infos])
                for result in response.results}

    # ACLs --------------------------------------------------------------------------------------

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Store ACLs; raises KafkaError with the broker's message for the first one refused."""
        response = await self._send_anywhere(ApiKey.CREATE_ACLS, {"creations": [
            {"resource_type": int(b.resource_type), "resource_name": b.resource_name,
             "resource_pattern_type": int(b.pattern_type), "principal": b.principal, "host": b.host,
             "operation": int(b.operation), "permission_type": int(b.permission)} for b in bindings]},
            idempotent=True)  # storing a binding twice stores it once
        for result in response.results:
            raise_for(result.error_code, result.error_message)

    async def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The stored ACLs the filter matches."""
        response = await self._send_anywhere(ApiKey.DESCRIBE_ACLS, {
            "resource_type_filter": int(acl_filter.resource_type), "resource_name_filter": acl_filter.resource_name,
            "pattern_type_filter": int(acl_filter.pattern_type), "principal_filter": acl_filter.principal,
            "host_filter": acl_filter.host, "operation": int(acl_filter.operation),
            "permission_type": int(acl_filter.permission)})
        raise_for(response.error_code, response.error_message)
        return [AclBinding(ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type), a.principal,
                           a.host, AclOperation(a.operation), AclPermission(a.permission_type))
                for r in response.resources for a in r.acls]

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """Delete the stored ACLs any filter matches and return them; KafkaError if a filter is refused."""
        response = await self._send_anywhere(ApiKey.DELETE_ACLS, {"filters": [
            {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.resource_name,
             "pattern_type_filter": int(f.pattern_type), "principal_filter": f.principal, "host_filter": f.host,
             "operation": int(f.operation), "permission_type": int(f.permission)} for f in filters]},
            idempotent=False)
        deleted = []
        for result in response.filter_results:
            raise_for(result.error_code, result.error_message)
            deleted += [AclBinding(ResourceType(m.resource_type), m.resource_name, PatternType(m.pattern_type),
                                   m.principal, m.host, AclOperation(m.operation), AclPermission(m.permission_type))
                        for m in result.matching_acls]
        return deleted

    # produce -----------------------------------------------------------------------------------

    async def produce(self, topic: str, records: Sequence[RecordInput] | bytes, partition: int, *, acks: int = -1,
                      compression: Compression | int = Compression.NONE, timeout_ms: int = 30000,
                      transactional_id: str | None = None) -> ProduceResult:
        """Append one batch (built from ``records``, or given as batch bytes) to a partition; a
        transactional batch names its ``transactional_id`` (the leader verifies it, KIP-890)."""
        results = await self._produce_batches(topic, {partition: _as_batch(records, compression)}, acks, timeout_ms,
                                              transactional_id)
        return results[partition]

    async def produce_many(self, topic: str, records_by_partition: Mapping[int, Sequence[RecordInput] | bytes], *,
                           acks: int = -1, compression: Compression | int = Compression.NONE,
                           timeout_ms: int = 30000) -> dict[int, ProduceResult]:
        """One batch per partition, one Produce request per leader, all leaders at once."""
        batches = {p: _as_batch(records, compression) for p, records in records_by_partition.items()}
        return await self._produce_batches(topic, batches, acks, timeout_ms)

    async def _produce_batches(self, topic: str, batches: dict[int, bytes], acks: int,
                               timeout_ms: int, transactional_id: str | None = None) -> dict[int, ProduceResult]:
        last_offset_delta = {p: parse_header(batch).last_offset_delta for p, batch in batches.items()}
        remaining = dict(batches)
        results: dict[int, ProduceResult] = {}
        last_error: ClientError | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await self._backoff(attempt - 1)
            by_leader, leader_error = await self._by_leader(topic, remaining)
            refresh = leader_error is not None
            last_error = leader_error or last_error
            outcomes = await asyncio.gather(
                *(self._produce_to(leader, topic, part_batches, acks, timeout_ms, transactional_id)
                  for leader, part_batches in by_leader.items()),
                return_exceptions=True,
            )
            for outcome in outcomes:
                if isinstance(outcome, BrokerConnectionError) and not outcome.request_sent:
                    last_error, refresh = outcome, True
                    continue
                if isinstance(outcome, BaseException):
                    raise outcome
                for partition, (code, message, base_offset, append_time, log_start) in outcome.items():
                    if code == ErrorCode.none:
                        last = base_offset + last_offset_delta[partition] if base_offset >= 0 else -1
                        results[partition] = ProduceResult(partition, base_offset, last, append_time, log_start)
                        del remaining[partition]
                        continue
                    error = KafkaError(code, message, topic=topic, partition=partition)
                    if not error.retriable or code in _PRODUCE_MAYBE_APPENDED:
                        raise error
                    last_error = error
                    refresh = refresh or error.invalidates_metadata
            if not remaining:
                return results
            if refresh:
                self.topics.pop(topic, None)
        assert last_error is not None
        raise last_error

    async def _produce_to(self, leader: int, topic: str, batches: dict[int, bytes], acks: int,
                          timeout_ms: int, transactional_id: str | None = None,
                          ) -> dict[int, tuple[ErrorCode, str | None, int, int, int]]:
        connection = await self._connection(leader)
        response = await connection.send(ApiKey.PRODUCE, {
            "transactional_id": transactional_id, "acks": acks, "timeout": datetime.timedelta(milliseconds=timeout_ms),
            "topic_data": [{"name": topic, "partition_data": [
                {"index": p, "records": batch} for p, batch in batches.items()]}],
        }, expect_response=acks != 0, timeout_s=self.request_timeout_s + timeout_ms / 1000)
        if response is None:
            return {p: (ErrorCode.none, None, -1, -1, -1) for p in batches}
        outcome = {}
        for topic_response in response.responses:
            for p in topic_response.partition_responses:
                outcome[p.index] = (p.error_code, getattr(p, "error_message", None), p.base_offset,
                                    _millis(p.log_append_time), getattr(p, "log_start_offset", -1))
        missing = set(batches) - set(outcome)
        if missing:
            raise ClientError(f"Produce response for {topic} omits partitions {sorted(missing)}")
        return outcome

    # fetch -------------------------------------------------------------------------------------

    async def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
                    max_wait_ms: int = 500, min_bytes: int = 1, read_committed: bool = False) -> FetchResult:
        """Records from ``offset`` on (at least one whole batch if any exists, even past ``max_bytes``),
        waiting up to ``max_wait_ms`` for ``min_bytes`` to be available. ``read_committed`` reads up to
        the last stable offset and leaves out the records of aborted transactions."""
        found = await self._fetch_partitions(topic, {partition: offset}, max_bytes, max_bytes, max_wait_ms, min_bytes,
                                             read_committed=read_committed)
        return decode_fetch(offset, *found[partition])

    async def fetch_many(self, topic: str, offsets: Mapping[int, int], *, max_bytes: int = 50 * 1024 * 1024,
                         partition_max_bytes: int = DEFAULT_FETCH_MAX_BYTES, max_wait_ms: int = 500,
                         min_bytes: int = 1) -> dict[int, FetchResult]:
        """Fetch several partitions, ``{partition: offset}``, with one Fetch request per leader; the
        wait ends when ``min_bytes`` are available across a leader's partitions."""
        found = await self._fetch_partitions(topic, offsets, max_bytes, partition_max_bytes, max_wait_ms, min_bytes)
        return {partition: decode_fetch(offsets[partition], *found[partition]) for partition in offsets}

    async def fetch_raw(self, topic: str, partition: int, offset: int, *, max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
                        max_wait_ms: int = 500, min_bytes: int = 1, read_committed: bool = False) -> RawFetchResult:
        """Like `fetch`, but the records bytes are not decoded (only batch headers are read). With
        ``read_committed`` the bytes stop at the last stable offset and the result names the aborted
        transactions overlapping them, which the caller drops (``records.isolation``)."""
        found = await self._fetch_partitions(topic, {partition: offset}, max_bytes, max_bytes, max_wait_ms, min_bytes,
                                             read_committed=read_committed)
        raw, high_watermark, log_start, aborted = found[partition]
        next_offset = offset
        try:
            for _, header in iter_headers(raw, check_crc=False):
                next_offset = max(next_offset, header.next_offset)
        except TruncatedBatchError:
            pass  # the broker cut the last batch at max_bytes; the next fetch starts at it
        return RawFetchResult(raw, high_watermark, log_start, next_offset, aborted)

    async def _fetch_partitions(self, topic: str, offsets: Mapping[int, int], max_bytes: int,
                                partition_max_bytes: int, max_wait_ms: int, min_bytes: int, *,
                                read_committed: bool = False) -> dict[int, _FetchedPartition]:
        """(records bytes, high watermark, log start offset, aborted transactions) per partition,
        retrying retriable errors."""
        remaining = dict(offsets)
        results: dict[int, _FetchedPartition] = {}
        last_error: ClientError | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await self._backoff(attempt - 1)
            by_leader, leader_error = await self._by_leader(topic, remaining)
            if leader_error is not None:
                last_error = leader_error
                self.topics.pop(topic, None)
            outcomes = await asyncio.gather(
                *(self._fetch_from(leader, topic, leader_offsets, max_bytes, partition_max_bytes, max_wait_ms,
                                   min_bytes, read_committed) for leader, leader_offsets in by_leader.items()),
                return_exceptions=True,
            )
            for outcome in outcomes:
                if isinstance(outcome, BrokerConnectionError):
                    # Reads change nothing on the broker, so they are safe to repeat.
                    last_error = outcome
                    self.topics.pop(topic, None)
                    continue
                if isinstance(outcome, BaseException):
                    raise outcome
                for partition, (code, found) in outcome.items():
                    if code == ErrorCode.none:
                        results[partition] = found
                        del remaining[partition]
                        continue
                    error = KafkaError(code, topic=topic, partition=partition)
                    if not error.retriable:
                        raise error
                    last_error = error
                    if error.invalidates_metadata:
                        self.topics.pop(topic, None)
            if not remaining:
                return results
        assert last_error is not None
        raise last_error

    async def _fetch_from(self, leader: int, topic: str, offsets: dict[int, int], max_bytes: int,
                          partition_max_bytes: int, max_wait_ms: int, min_bytes: int,
                          read_committed: bool = False) -> dict[int, tuple[ErrorCode, _FetchedPartition]]:
        connection = await self._connection(leader, _FETCH_LANE)
        response = await connection.send(ApiKey.FETCH, {
            "replica_id": -1, "max_wait": datetime.timedelta(milliseconds=max_wait_ms), "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": 1 if read_committed else 0, "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                 "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": partition_max_bytes}
                for partition, offset in offsets.items()]}],
            "forgotten_topics_data": [], "rack_id": "",
        }, timeout_s=self.request_timeout_s + max_wait_ms / 1000)
        request_error = getattr(response, "error_code", ErrorCode.none)
        outcome = {}
        for topic_response in response.responses:
            for data in topic_response.partitions:
                code = request_error if request_error != ErrorCode.none else data.error_code
                aborted = tuple((a.producer_id, a.first_offset) for a in data.aborted_transactions or ())
                outcome[data.partition_index] = (code, (bytes(data.records or b""), data.high_watermark,
                                                        getattr(data, "log_start_offset", -1), aborted))
        missing = set(offsets) - set(outcome)
        if missing:
            raise ClientError(f"Fetch response for {topic} omits partitions {sorted(missing)}")
        return outcome

    # offsets -----------------------------------------------------------------------------------

    async def list_offsets(self, topic: str, partition: int, timestamp: int, *,
                           read_committed: bool = False) -> tuple[int, int]:
        """(offset, timestamp): for EARLIEST or LATEST the offset (timestamp -1); for a timestamp in ms,
        the first offset whose timestamp is at or after it, or (-1, -1) if there is none. With
        ``read_committed``, LATEST is the last stable offset and timestamps are looked up below it."""
        request = {
            "replica_id": -1, "isolation_level": 1 if read_committed else 0,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}]}],
        }

        def answer(response: Any) -> tuple[int, int]:
            data = response.topics[0].partitions[0]
            raise_for(data.error_code, topic=topic, partition=partition)
            return data.offset, data.timestamp

        return await self._repeat_at_leader(topic, partition, ApiKey.LIST_OFFSETS, request, answer)

    async def _repeat_at_leader(self, topic: str, partition: int, api_key: int, request: Mapping[str, Any],
                                answer: Callable[[Any], _T]) -> _T:
        """Send to the partition's leader and return ``answer(response)``, repeating with backoff (after
        fresh metadata) on a retriable KafkaError or a failed connection. Only for requests that are
        safe to repeat: reads change nothing, and moving a log start twice to one offset is harmless."""
        last_error: ClientError | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await self._backoff(attempt - 1)
            try:
                connection = await self._connection(await self._leader(topic, partition))
                return answer(await connection.send(api_key, request))
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last_error = exc
            except BrokerConnectionError as exc:
                last_error = exc
            self.topics.pop(topic, None)
        assert last_error is not None
        raise last_error




def _as_batch(records: Sequence[RecordInput] | bytes, compression: Compression | int) -> bytes:
    if isinstance(records, bytes | bytearray | memoryview):
        return bytes(records)
    return build_batch(records, compression=compression)
