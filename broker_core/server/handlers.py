"""Request handlers: what the broker does for each Kafka API it serves.

Each handler takes the decoded kio request and returns a kio response (or None when the protocol
says no response is sent: Produce with acks=0). Responses are described once as dicts holding every
version's fields and built for the negotiated version with `build_entity`. Per-partition problems
become per-partition error codes; nothing a client sends can raise out of a handler except a
request-level error, which the connection answers or turns into closing that connection alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_core.log.errors import OffsetOutOfRangeError, RecordTooLargeError, RecordWithoutKeyError
from broker_core.log.producer_state import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from broker_core.log.transaction_index import AbortedTxn
from broker_core.metadata import errors as meta_errors
from broker_core.metadata.store import validate_topic_name
from broker_core.metadata.topics import PartitionLimits
from broker_core.metrics.requests import current_request_clock
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.fetch_session import FINAL_EPOCH, INVALID_SESSION_ID
from broker_core.protocol.framing import FileRecords, Request
from broker_core.protocol.messages import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    NO_THROTTLE,
    READ_COMMITTED,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    SUPPORTED_VERSIONS,
    respond,
)
from broker_core.quotas.admin import QuotaFilter, describe, parse_alteration
from broker_core.quotas.entities import REQUEST_PERCENTAGE, QuotaEntityError, client_identity
from broker_core.quotas.loop_time import LoopTimed
from broker_core.quotas.replication import (
    LEADER_RATE,
    LEADER_REPLICAS,
    ReplicationQuota,
    lists_replica,
)
from broker_core.quotas.store import QuotaStoreError
from broker_core.records.control import ControlRecordType
from broker_core.records.errors import (
    RecordsError,
    UnsupportedMagicError,
)
from broker_core.records.header import iter_headers, parse_header
from broker_core.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from broker_core.security.producer_ids import owns_producer_id, transactional_owner
from broker_core.settings import (
    BROKER_SETTINGS,
    SOURCE_DEFAULT,
    SOURCE_TOPIC,
    ConfigEntry,
    describe_broker_configs,
    describe_dynamic_default_configs,
    describe_topic_configs,
)

from .authorization import (
    allowed,
    authorized_operations,
    cluster_allowed,
    idempotent_write_allowed,
    replica_request_allowed,
)
from .config import TopicConfigError, validate_topic_configs
from .fetch_sessions import CachedPartition, FetchSession, FetchSessionCache, new_context
from .partition import ControlBatchFromClientError, InvalidTxnStateError, VerificationGuard
from .remote_reads import RemoteReads, RemoteStorageError
from .replica_selector import ReplicaView, preferred_read_replica

if TYPE_CHECKING:
    from broker_core.quotas.service import QuotaService

    from .context import BrokerContext
    from .producer_ids import ProducerIdAllocator
    from .txn_verification import TransactionVerifier

log = logging.getLogger(__name__)


Handler = Callable[[Request], Awaitable[Any]]


class RequestHandlers:
    """The broker's API table: one coroutine per Kafka API, the group APIs registered by the assembly.

    ``remote_reads`` is the tiering service's reader when the broker tiers to S3 (None otherwise):
    consumers' Fetch and ListOffsets below the local log start go there. Handlers run on the event
    loop; a connection calls one at a time, except Produce (see `start_produce`).

    Client quotas (``quotas.manager``): Produce and Fetch record their bytes, every request other
    than a replica's fetch its event-loop time, CreateTopics and DeleteTopics their partitions; the
    throttle time goes in the response's ``throttle_time`` (the listener then mutes the connection
    that long). A throttled Fetch is answered without records, as Kafka does.
    """

    def __init__(self, context: BrokerContext, producer_ids: ProducerIdAllocator, quotas: QuotaService,
                 remote_reads: RemoteReads | None = None, verifier: TransactionVerifier | None = None) -> None:
        self.context = context
        self.verifier = verifier
        self.producer_ids = producer_ids
        self.quotas = quotas
        self.remote_reads = remote_reads
        self.fetch_sessions = FetchSessionCache(context.config.get_int("max.incremental.fetch.session.cache.slots"))
        self.transactions: Handler | None = None
        config = context.config
        # Leader side of the replication throttle (broker_core.quotas.replication).
        self.leader_throttle = ReplicationQuota(
            lambda: float(config.live(LEADER_RATE, context.image.broker_configs)), time.monotonic())
        self.table: dict[int, Handler] = {
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.METADATA: self.metadata,
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: self.alter_client_quotas,
            ApiKey.WRITE_TXN_MARKERS: self.write_txn_markers,
        }

    def register(self, api_key: int, handler: Handler) -> None:
        """Add an API served by another subsystem (the group coordinator's, by the assembly)."""
        self.table[api_key] = handler

    def set_transactions(self, init_producer_id: Handler) -> None:
        """Serve InitProducerId with a transactional id with the transaction coordinator's handler."""
        self.transactions = init_producer_id

    def supported(self) -> dict[int, tuple[int, int]]:
        return {key: SUPPORTED_VERSIONS[key] for key in sorted(self.table) if key in SUPPORTED_VERSIONS}

    async def handle(self, request: Request) -> Any:
        handler = self.table[request.api_key](request)
        quotas = self.quotas.manager
        if not quotas.enforces(REQUEST_PERCENTAGE) or _from_replica(request):
            return await handler
        timed = LoopTimed(handler)
        response = await timed
        throttle_s = quotas.record_request_time(client_identity(request.client_id, request.principal), timed.elapsed_s)
        return with_throttle(response, throttle_s)

    # ApiVersions -------------------------------------------------------------------------------

    def api_versions_response(self, request: Request, error: ErrorCode = ErrorCode.none) -> Any:
        keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in self.supported().items()]
        return respond(request, {"error_code": error, "api_keys": keys, "throttle_time": NO_THROTTLE})

    async def api_versions(self, request: Request) -> Any:
        return self.api_versions_response(request)

    # Metadata ----------------------------------------------------------------------------------

    async def _catch_up_for(self, names: Iterable[str | None]) -> None:
        """Before a request naming a topic this broker's image lacks is answered, let the broker
        check for newer metadata: the topic may have been created since its last poll."""
        topics = self.context.image.topics
        if any(name is not None and name not in topics for name in names):
            await self.context.catch_up_metadata()

    async def metadata(self, request: Request) -> Any:
        body = request.body
        if body.topics is None:
            # Every topic, so also those created since this broker's last poll: a client that creates
            # a topic and then lists the cluster's topics from any broker (quixstreams does, before it
            # uses a changelog topic it created) must find it.
            await self.context.catch_up_metadata()
        elif body.topics:
            await self._catch_up_for(getattr(entry, "name", None) for entry in body.topics)
        image = self.context.image
        authorizer = self.context.authorizer
        if body.topics is None:
            # Every topic the principal may describe; the others are left out, as Kafka does.
            names = [name for name in sorted(image.topics)
                     if allowed(authorizer, request, AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denial=False)]
        else:
            names = []
            for entry in body.topics:
                name = getattr(entry, "name", None)
                topic_id = getattr(entry, "topic_id", None)
                if name is None and topic_id is not None:
                    described = image.topics_by_id.get(str(topic_id))
                    name = described.name if described else None
                names.append(name)
        live = {b.broker_id for b in image.live_brokers()}
        topics = []
        for name in names:
            described = image.topics.get(name) if name is not None else None
            if body.topics is not None and name is not None and not allowed(
                    authorizer, request, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                # Named but not describable: whether it exists is not revealed.
                topics.append({
                    "error_code": ErrorCode.topic_authorization_failed, "name": name,
                    "topic_id": uuid.UUID(int=0), "is_internal": False, "partitions": [],
                })
                continue
            if described is None:
                topics.append({
                    "error_code": ErrorCode.unknown_topic_or_partition, "name": name,
                    "topic_id": uuid.UUID(int=0), "is_internal": False, "partitions": [],
                })
                continue
            partitions = []
            for state in image.partitions_of(name):
                partitions.append({
                    "error_code": ErrorCode.none if state.leader >= 0 else ErrorCode.leader_not_available,
                    "partition_index": state.partition,
                    "leader_id": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "replica_nodes": list(state.replicas),
                    "isr_nodes": list(state.isr),
                    "offline_replicas": [r for r in state.replicas if r not in live],
                })
            topic = {
                "error_code": ErrorCode.none, "name": name, "topic_id": uuid.UUID(described.topic_id),
                "is_internal": False, "partitions": partitions,
            }
            if getattr(body, "include_topic_authorized_operations", False):
                topic["topic_authorized_operations"] = authorized_operations(authorizer, request, ResourceType.TOPIC,
                                                                             name)
            topics.append(topic)
        brokers = [
            {"node_id": b.broker_id, "host": host, "port": port, "rack": b.rack}
            for b in sorted(image.live_brokers(), key=lambda b: b.broker_id)
            for host, port in [b.endpoint(request.listener_name)]
        ]
        response = {
            "throttle_time": NO_THROTTLE, "brokers": brokers, "cluster_id": self.context.cluster_id,
            "controller_id": image.controller_id, "topics": topics,
        }
        if getattr(body, "include_cluster_authorized_operations", False):  # Metadata v8-v10
            response["cluster_authorized_operations"] = authorized_operations(
                authorizer, request, ResourceType.CLUSTER, CLUSTER_NAME)
        return respond(request, response)

    # Produce -----------------------------------------------------------------------------------

    async def produce(self, request: Request) -> Any:
        complete = await self.start_produce(request)
        return await complete()

    async def start_produce(self, request: Request) -> Callable[[], Awaitable[Any]]:
        """Append a Produce request's batches now; the returned function waits for acks=all and
        builds the response (None for acks=0). The listener appends a connection's produce requests
        in the order they came and may read the next one while an earlier one waits for its acks."""
        body = request.body
        acks = body.acks
        results: list[tuple[str, list[dict[str, Any]]]] = []
        pending: list[tuple[dict[str, Any], Any, int]] = []
        await self._catch_up_for(topic_data.name for topic_data in body.topic_data)
        authorizer = self.context.authorizer
        refusal = _producer_refusal(authorizer, request) if authorizer.enabled else None
        # The coordinator is asked (KIP-890) only for a request that passed the producer's checks.
        verdicts = await self._verify_transactions(request) if acks in (-1, 0, 1) and refusal is None else {}
        started = time.perf_counter()
        for topic_data in body.topic_data:
            partition_results = []
            may_write = allowed(authorizer, request, AclOperation.WRITE, ResourceType.TOPIC, topic_data.name)
            for data in topic_data.partition_data:
                result = {"index": data.index, "error_code": ErrorCode.none, "base_offset": -1,
                          "log_append_time": None, "log_start_offset": -1, "record_errors": [],
                          "error_message": None}
                verdict = verdicts.get((topic_data.name, data.index))
                if refusal is not None:
                    result["error_code"] = refusal
                elif not may_write:
                    result["error_code"] = ErrorCode.topic_authorization_failed
                elif acks not in (-1, 0, 1):
                    result["error_code"] = ErrorCode.invalid_required_acks
                elif isinstance(verdict, ErrorCode):
                    result["error_code"] = verdict
                    result["error_message"] = "the transaction coordinator did not verify this partition"
                else:
                    self._append(topic_data.name, data.index, data.records, acks, result, pending, verdict)
                partition_results.append(result)
            results.append((topic_data.name, partition_results))
        throttle_s = self._produce_throttle(request, time.perf_counter() - started)

        # The response needs only the request's header. Kept while acks=all waits, the decoded body
        # would hold the request's records in memory after they are on disk, for every request in a
        # connection's pipeline (listener.MAX_PIPELINED_PRODUCES).
        header = request.without_body()
        timeout_s = body.timeout.total_seconds()

        async def complete() -> Any:
            if acks == 0:
                return None
            if acks == -1 and pending:
                await self._await_replication(pending, timeout_s)
            return respond(header, {
                "responses": [{"name": name, "partition_responses": parts} for name, parts in results],
                "throttle_time": _throttle_time(throttle_s),
                "node_endpoints": self._name_current_leaders(results, header.listener_name),
            })

        return complete

    def _name_current_leaders(self, results: list[tuple[str, list[dict[str, Any]]]],
                              listener_name: str) -> list[dict[str, Any]]:
        """KIP-951 (Produce v10+): each NOT_LEADER_OR_FOLLOWER answer names the partition's current
        leader and epoch as this broker's image knows them, and the response carries those leaders'
        endpoints on the request's listener, so a client moves to the new leader without first
        asking for metadata. Older versions drop both fields (``respond`` keeps a version's own)."""
        image = self.context.image
        leaders: set[int] = set()
        for name, parts in results:
            for result in parts:
                if result["error_code"] != ErrorCode.not_leader_or_follower:
                    continue
                state = image.partitions.get((name, result["index"]))
                if state is None or state.leader not in image.brokers:
                    continue
                result["current_leader"] = {"leader_id": state.leader, "leader_epoch": state.leader_epoch}
                leaders.add(state.leader)
        endpoints = []
        for broker_id in sorted(leaders):
            broker = image.brokers[broker_id]
            host, port = broker.endpoint(listener_name)
            endpoints.append({"node_id": broker_id, "host": host, "port": port, "rack": broker.rack})
        return endpoints

    def _produce_throttle(self, request: Request, appending_s: float) -> float:
        """Kafka records a Produce request's whole size against the producer byte rate, and (here)
        the time its appends took on the event loop against the request percentage."""
        quotas = self.quotas.manager
        identity = client_identity(request.client_id, request.principal)
        throttle_s = quotas.record_produce(identity, request.size)
        if quotas.enforces(REQUEST_PERCENTAGE):
            throttle_s = max(throttle_s, quotas.record_request_time(identity, appending_s))
        return throttle_s

    async def _verify_transactions(self, request: Request) -> dict[tuple[str, int], ErrorCode | VerificationGuard]:
        """KIP-890 part 1: for each partition where this request's transactional batch would open the
        producer's transaction, the coordinator's refusal (an error code) or a guard to append with."""
        body = request.body
        transactional_id = getattr(body, "transactional_id", None)
        if transactional_id is None or self.verifier is None:
            return {}
        guards: dict[tuple[str, int], VerificationGuard] = {}
        producer = (-1, -1)
        for topic_data in body.topic_data:
            for data in topic_data.partition_data:
                partition = self.context.replicas.get(topic_data.name, data.index)
                if partition is None or not partition.is_leader or not data.records:
                    continue
                try:
                    header = parse_header(data.records, 0)
                except RecordsError:
                    continue  # the append refuses it and names the problem
                if not header.is_transactional or partition.producers.has_open_transaction(header.producer_id):
                    continue
                guards[(topic_data.name, data.index)] = partition.start_verification(header.producer_id)
                producer = (header.producer_id, header.producer_epoch)
        if not guards:
            return {}
        answers = await self.verifier.verify(transactional_id, *producer, guards)
        verdicts: dict[tuple[str, int], ErrorCode | VerificationGuard] = {}
        for key, guard in guards.items():
            code = answers.get(key, ErrorCode.invalid_txn_state)
            verdicts[key] = guard if code == ErrorCode.none else code
            if code != ErrorCode.none:
                log.info("transactional produce of %r (producer %d) to %s-%d from %s refused: %s",
                         transactional_id, producer[0], key[0], key[1], request.client_host, code.name)
        return verdicts

    def _append(self, topic: str, index: int, records: bytes | None, acks: int,
                result: dict[str, Any], pending: list, guard: VerificationGuard | None = None) -> None:
        image = self.context.image
        described = image.topics.get(topic)
        if described is None or (topic, index) not in image.partitions:
            result["error_code"] = ErrorCode.unknown_topic_or_partition
            return
        partition = self.context.replicas.get(topic, index)
        if partition is None or not partition.is_leader:
            result["error_code"] = ErrorCode.not_leader_or_follower
            return
        if not records:
            result["error_code"] = ErrorCode.corrupt_message
            result["error_message"] = "produce request carries no record batch"
            return
        metrics = self.context.metrics.topic(topic)
        if acks == -1 and len(partition.in_sync) < partition.min_insync_replicas:
            result["error_code"] = ErrorCode.not_enough_replicas
            metrics.failed_produce.inc()
            return
        try:
            info = partition.append_as_leader(records, guard)
        except _REFUSED_APPENDS as exc:
            result["error_code"] = next(code for cls, code in _APPEND_ERROR_CODES if isinstance(exc, cls))
            result["error_message"] = str(exc)
            metrics.failed_produce.inc()
            return
        metrics.messages_in.inc(info.last_offset - info.base_offset + 1)
        metrics.bytes_in.inc(info.size_bytes)
        result["base_offset"] = info.base_offset
        result["log_start_offset"] = partition.log_start_offset
        if info.log_append_time >= 0:
            result["log_append_time"] = datetime.datetime.fromtimestamp(info.log_append_time / 1000, datetime.UTC)
        if acks == -1:
            pending.append((result, partition, info.last_offset + 1))

    async def _await_replication(self, pending: list, timeout_s: float) -> None:
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            waiting = [(result, partition, target) for result, partition, target in pending
                       if result["error_code"] == ErrorCode.none and partition.high_watermark < target]
            for result, partition, _ in waiting:
                if not partition.is_leader:
                    result["error_code"] = ErrorCode.not_leader_or_follower
            waiting = [w for w in waiting if w[0]["error_code"] == ErrorCode.none]
            if not waiting:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for result, _, _ in waiting:
                    result["error_code"] = ErrorCode.request_timed_out
                break
            futures = [partition.high_watermark_future(target) for _, partition, target in waiting]
            await asyncio.wait(futures, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for future in futures:
                future.cancel()
        for result, partition, _ in pending:
            if result["error_code"] == ErrorCode.none and len(partition.in_sync) < partition.min_insync_replicas:
                result["error_code"] = ErrorCode.not_enough_replicas_after_append

    # Fetch -------------------------------------------------------------------------------------

    async def fetch(self, request: Request) -> Any:
        """Fetch, v4 to v18: by topic name before v13, by topic id from v13 (UNKNOWN_TOPIC_ID for an
        id this broker does not know, INCONSISTENT_TOPIC_ID when the replica here belongs to another
        topic of that name); KIP-227 fetch sessions from v7 (`fetch_sessions`); KIP-392 from v11: a
        consumer may read from a follower (up to its high watermark), and a leader with
        ``replica.selector.class`` names a preferred read replica instead of sending records."""
        body = request.body
        replica_id = _fetch_replica_id(body)
        uses_topic_ids = request.api_version >= _FETCH_TOPIC_IDS_VERSION
        if replica_id >= 0 and not replica_request_allowed(self.context, request, replica_id):
            # A forged follower fetch: refused whole, before it can touch any follower state or session.
            return respond(request, {
                "throttle_time": NO_THROTTLE, "error_code": ErrorCode.cluster_authorization_failed, "session_id": 0,
                "responses": [{"topic": getattr(t, "topic", None), "topic_id": getattr(t, "topic_id", None),
                               "partitions": [_fetch_error(p.partition, ErrorCode.cluster_authorization_failed)
                                              for p in t.partitions]}
                              for t in body.topics],
            })
        deadline = time.monotonic() + body.max_wait.total_seconds()
        if uses_topic_ids:
            if any(str(t.topic_id) not in self.context.image.topics_by_id for t in body.topics):
                await self.context.catch_up_metadata()
        else:
            await self._catch_up_for(getattr(topic_request, "topic", None) for topic_request in body.topics)
        image = self.context.image
        asked = [_asked_partition(image, t, p, uses_topic_ids) for t in body.topics for p in t.partitions]
        forgotten = [(t.topic_id if uses_topic_ids else t.topic, index)
                     for t in getattr(body, "forgotten_topics_data", ()) for index in t.partitions]
        context = new_context(self.fetch_sessions, session_id=getattr(body, "session_id", INVALID_SESSION_ID),
                              epoch=getattr(body, "session_epoch", FINAL_EPOCH), asked=asked, forgotten=forgotten,
                              uses_topic_ids=uses_topic_ids, privileged=replica_id >= 0,
                              now_ms=time.monotonic() * 1000)
        if context.error != ErrorCode.none:
            return respond(request, {"throttle_time": NO_THROTTLE, "error_code": context.error, "session_id": 0,
                                     "responses": []})
        quotas = self.quotas.manager
        identity = client_identity(request.client_id, request.principal)
        max_bytes = body.max_bytes
        if replica_id < 0:
            # No more in one response than the consumer quota leaves room for (quotas.manager.fetch_room).
            room = quotas.fetch_room(identity)
            if room is not None and room.max_bytes <= 0:
                return respond(request, {"throttle_time": _throttle_time(max(room.wait_s, 0.001)),
                                         "error_code": ErrorCode.none, "session_id": context.response_session_id(),
                                         "responses": []})
            if room is not None:
                max_bytes = min(max_bytes, room.max_bytes)
        session = context.session
        while True:
            # What the answers depend on besides the partitions themselves: when it moves, an
            # incremental fetch reads every partition of its session again (fetch_sessions module doc).
            stamp = (self.context.image.version, self.context.authorizer.generation, request.principal,
                     request.client_host, request.listener_name, request.api_version, replica_id,
                     getattr(body, "isolation_level", 0), getattr(body, "rack_id", ""))
            to_read = context.begin_read(stamp, time.monotonic() * 1000)
            answers, total, partitions, respond_now, quiet, held_back = await self._read_fetch(
                request, replica_id, to_read, max_bytes, session)
            remaining = deadline - time.monotonic()
            if held_back:
                # A throttled replica got nothing this time: the follower hears so once the leader's
                # throttle has paid its debt, not at the end of a long poll.
                remaining = min(remaining, max(self.leader_throttle.wait_s(time.monotonic()), 0.001))
            if session is not None:
                if total >= body.min_bytes or respond_now or remaining <= 0 or not session.partitions:
                    break
                futures = [session.wakeup()]
            else:
                if total >= body.min_bytes or respond_now or remaining <= 0 or not partitions:
                    break
                futures = [p.change_future() for p in partitions]
            waiting_since = time.perf_counter()
            await asyncio.wait(futures, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if (clock := current_request_clock()) is not None:
                clock.remote_s += time.perf_counter() - waiting_since  # Kafka's remote time: the long poll
            for future in futures:
                future.cancel()
        throttle_s = quotas.record_fetch(identity, total) if replica_id < 0 else 0.0
        if throttle_s > 0:
            # As Kafka: a throttled consumer gets no records, and what it was not sent is not counted
            # (nor does its session learn of it: the next answer tells it again).
            quotas.unrecord_fetch(identity, total)
            return respond(request, {"throttle_time": _throttle_time(throttle_s), "error_code": ErrorCode.none,
                                     "session_id": context.response_session_id(), "responses": []})
        session_id, chosen = context.select(self.fetch_sessions, answers, time.monotonic() * 1000)
        if session is not None:
            for key, partition in quiet:
                if session.settle(key) and replica_id >= 0:
                    partition.park_follower(replica_id, session)
        if replica_id < 0 and total:
            self._count_bytes_out(chosen)
        return respond(request, {
            "throttle_time": NO_THROTTLE, "error_code": ErrorCode.none, "session_id": session_id,
            "responses": _by_topic(chosen), "node_endpoints": self._leader_endpoints(request, chosen),
        })

    def _count_bytes_out(self, answers: list[tuple[CachedPartition, dict[str, Any]]]) -> None:
        """BytesOut, as Kafka counts it: record bytes sent to consumers, by topic."""
        metrics = self.context.metrics
        for asked, response in answers:
            records = response.get("records")
            if records:
                metrics.topic(asked.topic).bytes_out.inc(len(records))

    def _leader_endpoints(self, request: Request, answers: list[tuple[CachedPartition, dict[str, Any]]]) -> list:
        """KIP-951: the endpoints (on the request's listener) of the leaders named in ``current_leader``."""
        leaders = {answer["current_leader"]["leader_id"] for _, answer in answers if "current_leader" in answer}
        brokers = self.context.image.brokers
        endpoints = []
        for broker_id in sorted(leaders):
            broker = brokers.get(broker_id)
            if broker is not None:
                host, port = broker.endpoint(request.listener_name)
                endpoints.append({"node_id": broker_id, "host": host, "port": port, "rack": broker.rack})
        return endpoints

    async def _read_fetch(self, request: Request, replica_id: int, asked: list[CachedPartition], max_bytes: int,
                          session: FetchSession | None = None,
                          ) -> tuple[list[tuple[CachedPartition, dict[str, Any]]], int, list, bool, list, bool]:
        """Read each partition asked for; (answers, bytes read, partitions a long poll waits on,
        whether to answer at once: an error or a preferred read replica, the (key, replica) of
        each partition whose answer leaves it quiet: no error, no records, nothing readable past its
        fetch offset, so that unless its replica changes a session need not read it again, and
        whether the leader's replication throttle held a partition back). An incremental fetch's
        ``session`` watches every replica it reads."""
        body = request.body
        image = self.context.image
        authorizer = self.context.authorizer
        uses_topic_ids = request.api_version >= _FETCH_TOPIC_IDS_VERSION
        # KIP-392: Fetch v11+ carries the consumer's rack; consumers may then read from followers.
        from_consumer_with_rack = replica_id < 0 and request.api_version >= _FETCH_RACK_VERSION
        client_rack = getattr(body, "rack_id", "") if from_consumer_with_rack else ""
        selector = self.context.config.get("replica.selector.class")
        remaining = max_bytes
        total = 0
        respond_now = False
        held_back = False
        watched = []
        answers = []
        quiet = []
        readable: dict[str, bool] = {}
        for p in asked:
            response = _fetch_error(p.partition, ErrorCode.none)
            answers.append((p, response))
            name = p.topic
            if name is None and p.topic_id is not None:
                # An id unknown when the partition joined its session may be known now.
                described = image.topics_by_id.get(str(p.topic_id))
                name = p.topic = described.name if described is not None else None
            if name is None:
                response["error_code"] = ErrorCode.unknown_topic_id
                respond_now = True
                continue
            may_read = readable.get(name)
            if may_read is None:
                # A follower was authorized as a replica (CLUSTER_ACTION) before it got here.
                may_read = readable[name] = replica_id >= 0 or allowed(
                    authorizer, request, AclOperation.READ, ResourceType.TOPIC, name)
            described = image.topics.get(name)
            partition = self.context.replicas.get(name, p.partition)
            if not may_read:
                response["error_code"] = ErrorCode.topic_authorization_failed
            elif uses_topic_ids and (described is None or described.topic_id != str(p.topic_id)):
                response["error_code"] = ErrorCode.unknown_topic_id
            elif described is None or (name, p.partition) not in image.partitions:
                response["error_code"] = ErrorCode.unknown_topic_or_partition
            elif partition is None or (not partition.is_leader and not from_consumer_with_rack):
                response["error_code"] = ErrorCode.not_leader_or_follower
            elif uses_topic_ids and partition.topic_id != str(p.topic_id):
                response["error_code"] = ErrorCode.inconsistent_topic_id
            elif 0 <= p.current_leader_epoch < partition.leader_epoch:  # field since Fetch v9
                response["error_code"] = ErrorCode.fenced_leader_epoch
            elif p.current_leader_epoch > partition.leader_epoch:
                response["error_code"] = ErrorCode.unknown_leader_epoch
            if response["error_code"] != ErrorCode.none:
                if response["error_code"] in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch):
                    state = image.partitions.get((name, p.partition))
                    if state is not None and state.leader >= 0:
                        # KIP-951 (Fetch v16): where the partition is led now, so the client need not
                        # wait for a metadata refresh; the endpoints go in the response's node_endpoints.
                        response["current_leader"] = {"leader_id": state.leader, "leader_epoch": state.leader_epoch}
                respond_now = True
                continue
            read_committed = replica_id < 0 and body.isolation_level == READ_COMMITTED
            if replica_id >= 0:
                partition.record_follower_fetch(replica_id, p.fetch_offset, p.log_start_offset)
                upper = None
            elif read_committed:
                upper = partition.last_stable_offset
                response["aborted_transactions"] = []
            else:
                upper = partition.high_watermark
            response["high_watermark"] = partition.high_watermark
            response["last_stable_offset"] = partition.last_stable_offset
            response["log_start_offset"] = partition.log_start_offset
            if client_rack and partition.is_leader:
                preferred = self._preferred_read_replica(selector, client_rack, partition, image, p.fetch_offset)
                if preferred >= 0:
                    # As Kafka: no records from the leader, the consumer goes to the preferred replica.
                    response["preferred_read_replica"] = preferred
                    respond_now = True
                    continue
            watched.append(partition)
            if session is not None:
                session.watch(p.key, partition)
            limit = min(p.partition_max_bytes, remaining)
            # Tiered storage: consumers reading a tiered topic below the local log start get the
            # same batches from S3 (tiered_storage.remote_reader); followers always read locally.
            remote = self.remote_reads if replica_id < 0 else None
            tiered = remote is not None and remote.is_tiered(name)
            # Nothing to read (a read past the log end is an error, below). A tiered topic's log start
            # moves in S3 and a rack-aware consumer's preferred replica with the followers' progress:
            # neither marks the replica, so those are never quiet.
            nothing_to_read = (not tiered and not client_rack
                               and p.fetch_offset >= (partition.log_end_offset if upper is None else upper))
            if nothing_to_read:
                quiet.append((p.key, partition))
            if tiered:
                try:
                    log_start = response["log_start_offset"] = await remote.log_start_offset(partition)
                    if p.fetch_offset < log_start:
                        # Below the log start DeleteRecords set, even where this replica's disk or S3
                        # still holds the records (a local log start not yet moved up, segments not yet
                        # deleted by remote retention).
                        raise OffsetOutOfRangeError(topic=name, partition=p.partition, offset=p.fetch_offset,
                                                    log_start_offset=log_start,
                                                    log_end_offset=partition.log_end_offset)
                    if p.fetch_offset < partition.log_start_offset:
                        if limit > 0 or total == 0:
                            data = await remote.read(partition, p.fetch_offset, max(limit, 0),
                                                     min_one_batch=total == 0)
                            if read_committed:
                                data, end = _below(data, upper)
                                response["aborted_transactions"] = _aborted_entries(
                                    await remote.aborted_transactions(partition, p.fetch_offset, end))
                            response["records"] = data
                            total += len(data)
                            remaining -= len(data)
                        continue
                except OffsetOutOfRangeError:
                    response["error_code"] = ErrorCode.offset_out_of_range
                    respond_now = True
                    continue
                except RemoteStorageError as exc:
                    log.warning("remote read of %s-%d failed: %s", name, p.partition, exc)
                    self.context.metrics.topic(name).failed_fetch.inc()
                    response["error_code"] = ErrorCode.kafka_storage_error
                    respond_now = True
                    continue
            if limit <= 0 and total > 0:
                continue
            throttled = replica_id >= 0 and self._leader_throttles(image, name, partition, replica_id)
            if throttled and self.leader_throttle.exceeded(time.monotonic()):
                held_back = True
                continue  # as Kafka: a throttled follower out of the ISR gets no records this time
            try:
                file_slice = partition.log.read(p.fetch_offset, max(limit, 0), max_offset=upper,
                                                min_one_batch=total == 0)
            except OffsetOutOfRangeError:
                response["error_code"] = ErrorCode.offset_out_of_range
                respond_now = True
                if nothing_to_read:
                    quiet.pop()
                continue
            if file_slice is not None and file_slice.length > 0:
                response["records"] = FileRecords(file_slice)
                total += file_slice.length
                remaining -= file_slice.length
                if throttled:
                    self.leader_throttle.record(file_slice.length, time.monotonic())
                if read_committed:
                    response["aborted_transactions"] = _aborted_entries(partition.log.aborted_transactions(
                        p.fetch_offset, min(upper, file_slice.last_offset + 1)))
        return answers, total, watched, respond_now, quiet, held_back

    def _preferred_read_replica(self, selector: str, client_rack: str, partition: Any, image: Any,
                                fetch_offset: int) -> int:
        now_ms = time.monotonic() * 1000
        followers = {broker_id: ReplicaView(broker_id, state.log_end_offset, state.log_start_offset,
                                            now_ms - state.caught_up_ms())
                     for broker_id, state in partition.followers.items()}
        racks = {b.broker_id: b.rack for b in image.live_brokers()}
        return preferred_read_replica(selector, client_rack, partition.broker_id, partition.isr, followers, racks,
                                      fetch_offset)

    def _leader_throttles(self, image: Any, topic: str, partition: Any, replica_id: int) -> bool:
        """Whether this leader's replication throttle applies to ``replica_id``'s fetch of the partition:
        the topic lists this broker's replica in leader.replication.throttled.replicas, the follower is
        out of the ISR, and a rate is set."""
        if replica_id in partition.isr:
            return False
        described = image.topics.get(topic)
        listed = described.configs.get(LEADER_REPLICAS, "") if described is not None else ""
        return (lists_replica(listed, partition.index, self.context.config.broker_id)
                and self.leader_throttle.limited())

    # ListOffsets -------------------------------------------------------------------------------

    async def list_offsets(self, request: Request) -> Any:
        body = request.body
        await self._catch_up_for(topic_request.name for topic_request in body.topics)
        image = self.context.image
        authorizer = self.context.authorizer
        # A replica's ListOffsets sees offsets above the high watermark: only a trusted replica may.
        replica_refused = body.replica_id >= 0 and not replica_request_allowed(self.context, request, body.replica_id)
        topics = []
        for topic_request in body.topics:
            partitions = []
            refusal = (ErrorCode.cluster_authorization_failed if replica_refused
                       else None if allowed(authorizer, request, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                            topic_request.name)
                       else ErrorCode.topic_authorization_failed)
            for p in topic_request.partitions:
                result = {"partition_index": p.partition_index, "error_code": ErrorCode.none,
                          "timestamp": -1, "offset": -1, "leader_epoch": -1, "old_style_offsets": []}
                partitions.append(result)
                if refusal is not None:
                    result["error_code"] = refusal
                    continue
                partition = self.context.replicas.get(topic_request.name, p.partition_index)
                if topic_request.name not in image.topics or (topic_request.name, p.partition_index) not in image.partitions:
                    result["error_code"] = ErrorCode.unknown_topic_or_partition
                    continue
                if partition is None or not partition.is_leader:
                    result["error_code"] = ErrorCode.not_leader_or_follower
                    continue
                if 0 <= getattr(p, "current_leader_epoch", -1) < partition.leader_epoch:  # field since ListOffsets v4
                    result["error_code"] = ErrorCode.fenced_leader_epoch
                    continue
                if body.replica_id >= 0:
                    upper = partition.log_end_offset
                elif getattr(body, "isolation_level", 0) == READ_COMMITTED:  # field since ListOffsets v2
                    upper = partition.last_stable_offset
                else:
                    upper = partition.high_watermark
                if p.timestamp == LATEST_TIMESTAMP:
                    result["offset"] = upper
                    result["leader_epoch"] = partition.leader_epoch
                elif p.timestamp == EARLIEST_TIMESTAMP:
                    result["offset"] = partition.log_start_offset
                    result["leader_epoch"] = _epoch_at(partition, partition.log_start_offset)
                elif p.timestamp >= 0:
                    found = partition.log.offset_for_timestamp(p.timestamp)
                    if found is not None and found[0] < upper:
                        result["offset"], result["timestamp"] = found
                        result["leader_epoch"] = _epoch_at(partition, found[0])
                else:
                    result["error_code"] = ErrorCode.invalid_request
                    continue
                # Tiered storage: for consumers, the earliest offset or a timestamp's offset may lie
                # in S3 below the local log (tiered_storage.remote_reader); followers stay local.
                remote = self.remote_reads if body.replica_id < 0 else None
                if remote is not None and p.timestamp != LATEST_TIMESTAMP and remote.is_tiered(topic_request.name):
                    try:
                        answer = await remote.list_offset(partition, p.timestamp)
                    except RemoteStorageError as exc:
                        log.warning("remote ListOffsets of %s-%d failed: %s", topic_request.name, p.partition_index, exc)
                        result["error_code"] = ErrorCode.kafka_storage_error
                        continue
                    if answer is not None:
                        result["offset"], result["timestamp"], result["leader_epoch"] = answer
            topics.append({"name": topic_request.name, "partitions": partitions})
        return respond(request, {"throttle_time": NO_THROTTLE, "topics": topics})

    # WriteTxnMarkers ---------------------------------------------------------------------------

    async def write_txn_markers(self, request: Request) -> Any:
        """A transaction coordinator ends a transaction on the partitions this broker leads.

        Each partition gets a COMMIT or ABORT control batch, appended as leader and answered once
        the ISR has it (Kafka appends markers with acks=all), waiting at most
        `_MARKER_REPLICATION_TIMEOUT_S` (then REQUEST_TIMED_OUT).
        Per-partition errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS,
        INVALID_PRODUCER_EPOCH (an older producer epoch than the partition has seen),
        TRANSACTION_COORDINATOR_FENCED (an older coordinator epoch). A marker for a producer the
        partition does not know is written, as Kafka writes it.
        """
        body = request.body
        await self._catch_up_for(topic.name for marker in body.markers for topic in marker.topics)
        image = self.context.image
        markers = []
        pending: list[tuple[dict[str, Any], Any, int]] = []
        for marker in body.markers:
            control_type = ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT
            topics = []
            for topic in marker.topics:
                partitions = []
                for index in topic.partition_indexes:
                    result = {"partition_index": index, "error_code": ErrorCode.none}
                    partitions.append(result)
                    partition = self.context.replicas.get(topic.name, index)
                    if topic.name not in image.topics or (topic.name, index) not in image.partitions:
                        result["error_code"] = ErrorCode.unknown_topic_or_partition
                    elif partition is None or not partition.is_leader:
                        result["error_code"] = ErrorCode.not_leader_or_follower
                    elif len(partition.in_sync) < partition.min_insync_replicas:
                        result["error_code"] = ErrorCode.not_enough_replicas
                    else:
                        try:
                            info = partition.append_marker(
                                control_type, producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                                coordinator_epoch=marker.coordinator_epoch)
                        except _REFUSED_APPENDS as exc:
                            result["error_code"] = next(
                                code for cls, code in _APPEND_ERROR_CODES if isinstance(exc, cls))
                            log.info("WriteTxnMarkers for producer %d on %s-%d from %s refused: %s",
                                     marker.producer_id, topic.name, index, request.client_host, exc)
                            continue
                        pending.append((result, partition, info.last_offset + 1))
                topics.append({"name": topic.name, "partitions": partitions})
            markers.append({"producer_id": marker.producer_id, "topics": topics})
        if pending:
            await self._await_replication(pending, _MARKER_REPLICATION_TIMEOUT_S)
        return respond(request, {"markers": markers})

    # InitProducerId ----------------------------------------------------------------------------

    async def init_producer_id(self, request: Request) -> Any:
        """Producer ids for idempotent producers, from blocks allocated in DynamoDB.

        Every answer without a transactional id is a new producer id at epoch 0, as Kafka answers
        such a request: an id the request names (KIP-360's producer_id/producer_epoch) is never
        handed out again with a bumped epoch, since nothing shows that the caller owns it, and
        such a bump would fence the producer that does. A request with a transactional id goes to
        the transaction coordinator (`set_transactions`) once the principal may WRITE the id.
        Authorization: WRITE on the transactional id; for an idempotent producer, IDEMPOTENT_WRITE
        on the cluster or WRITE on some topic (Kafka 3.x). With an authorizer the id is bound to the
        caller's principal (a transactional producer's, to its transactional id), and Produce
        accepts it from that principal (that transactional id) only.
        """
        body = request.body
        response = {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.none, "producer_id": -1, "producer_epoch": -1}
        authorizer = self.context.authorizer
        if body.transactional_id is not None:
            if not allowed(authorizer, request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                           body.transactional_id):
                response["error_code"] = ErrorCode.transactional_id_authorization_failed
            elif self.transactions is not None:
                return await self.transactions(request)
            else:
                response["error_code"] = ErrorCode.invalid_request
        elif not idempotent_write_allowed(authorizer, request):
            response["error_code"] = ErrorCode.cluster_authorization_failed
        else:
            try:
                owner = request.principal if authorizer.enabled else None
                response["producer_id"], response["producer_epoch"] = await self.producer_ids.next_id(owner), 0
            except meta_errors.MetadataError:
                response["error_code"] = ErrorCode.coordinator_not_available
        return respond(request, response)

    # OffsetForLeaderEpoch ----------------------------------------------------------------------

    async def offset_for_leader_epoch(self, request: Request) -> Any:
        """Where a leader epoch ends in the leader's log: followers (and KIP-320 consumers) truncate by it."""
        image = self.context.image
        authorizer = self.context.authorizer
        replica_id = getattr(request.body, "replica_id", -1)  # since v3; followers set it, consumers send -1
        replica_refused = replica_id >= 0 and not replica_request_allowed(self.context, request, replica_id)
        topics = []
        for topic_request in request.body.topics:
            partitions = []
            refusal = (ErrorCode.cluster_authorization_failed if replica_refused
                       else None if replica_id >= 0 or allowed(authorizer, request, AclOperation.DESCRIBE,
                                                               ResourceType.TOPIC, topic_request.topic)
                       else ErrorCode.topic_authorization_failed)
            for p in topic_request.partitions:
                result = {"error_code": ErrorCode.none, "partition": p.partition, "leader_epoch": -1, "end_offset": -1}
                partitions.append(result)
                partition = self.context.replicas.get(topic_request.topic, p.partition)
                if refusal is not None:
                    result["error_code"] = refusal
                elif topic_request.topic not in image.topics or (topic_request.topic, p.partition) not in image.partitions:
                    result["error_code"] = ErrorCode.unknown_topic_or_partition
                elif partition is None or not partition.is_leader:
                    result["error_code"] = ErrorCode.not_leader_or_follower
                elif 0 <= p.current_leader_epoch < partition.leader_epoch:
                    result["error_code"] = ErrorCode.fenced_leader_epoch
                elif p.current_leader_epoch > partition.leader_epoch:
                    result["error_code"] = ErrorCode.unknown_leader_epoch
                else:
                    result["leader_epoch"], result["end_offset"] = partition.log.end_offset_for_epoch(p.leader_epoch)
            topics.append({"topic": topic_request.topic, "partitions": partitions})
        return respond(request, {"throttle_time": NO_THROTTLE, "topics": topics})

    # Admin -------------------------------------------------------------------------------------

    async def create_topics(self, request: Request) -> Any:
        body = request.body
        results = []
        created = False
        limits = PartitionLimits(self.context.config.get_int("floe.max.partitions"),
                                 self.context.config.get_int("floe.max.replicas.per.broker"))
        image = self.context.image
        # What the cluster holds, plus what this request has created or validated so far.
        existing_partitions = sum(t.num_partitions for t in image.topics.values())
        existing_replicas = sum(t.num_partitions * t.replication_factor for t in image.topics.values())
        live = len(image.live_brokers())
        quotas = self.quotas.manager
        identity = client_identity(request.client_id, request.principal)
        strict = request.api_version >= _STRICT_MUTATION_QUOTA[ApiKey.CREATE_TOPICS]
        authorizer = self.context.authorizer
        # Kafka: CREATE on the cluster covers every topic; else CREATE on each topic.
        may_create_any = cluster_allowed(authorizer, request, AclOperation.CREATE, log_denial=False)
        for topic in body.topics:
            result = {"name": topic.name, "topic_id": uuid.UUID(int=0), "error_code": ErrorCode.none,
                      "error_message": None, "num_partitions": -1, "replication_factor": -1, "configs": None}
            results.append(result)
            if not may_create_any and not allowed(authorizer, request, AclOperation.CREATE, ResourceType.TOPIC,
                                                  topic.name):
                result["error_code"] = ErrorCode.topic_authorization_failed
                result["error_message"] = "Authorization failed."
                continue
            configs = {c.name: c.value for c in topic.configs}
            num_partitions = topic.num_partitions if topic.num_partitions != -1 else self.context.config.get_int("num.partitions")
            replication = (topic.replication_factor if topic.replication_factor != -1
                           else self.context.config.get_int("default.replication.factor"))
            if topic.assignments:
                result["error_code"] = ErrorCode.invalid_replica_assignment
                result["error_message"] = "manual replica assignment is not supported; give num_partitions and replication_factor"
                continue
            try:
                validate_topic_configs(configs, self.context.config)
                if num_partitions >= 1 and replication >= 1:
                    limits.check_new_partitions(
                        existing_partitions=existing_partitions, existing_replicas=existing_replicas,
                        live_brokers=live, new_partitions=num_partitions, replication_factor=replication)
                if body.validate_only:
                    self._validate_new_topic(topic.name, num_partitions, replication)
                    description = None
                elif strict and quotas.mutation_exceeded(identity):
                    result["error_code"], result["error_message"] = ErrorCode.throttling_quota_exceeded, _THROTTLED
                    continue
                else:
                    quotas.record_mutations(identity, num_partitions)
                    started = time.monotonic()
                    description = await asyncio.to_thread(
                        self.context.store.create_topic, topic.name, num_partitions, replication, configs
                    )
                    log.info("principal %s created topic %s (%d partitions, replication factor %d) in %.2f s",
                             request.principal, topic.name, num_partitions, replication, time.monotonic() - started)
            except TopicConfigError as exc:
                result["error_code"], result["error_message"] = ErrorCode.invalid_config, str(exc)
                continue
            except meta_errors.MetadataError as exc:
                result["error_code"], result["error_message"] = _metadata_error_code(exc), str(exc)
                continue
            existing_partitions += num_partitions
            existing_replicas += num_partitions * replication
            result["num_partitions"] = num_partitions
            result["replication_factor"] = replication
            if description is not None:
                result["topic_id"] = uuid.UUID(description.topic_id)
                created = True
            if not allowed(authorizer, request, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic.name,
                           log_denial=False):
                # Created, but its configs are not the principal's to see (Kafka: topic_config_error_code).
                result["topic_config_error_code"] = ErrorCode.topic_authorization_failed.value
                continue
            result["configs"] = [
                {"name": c.name, "value": c.value, "read_only": False, "config_source": c.source, "is_sensitive": False}
                for c in describe_topic_configs(configs, self.context.config, None)
            ]
        if created:
            started = time.monotonic()
            await self._refresh_after_change("CreateTopics")
            log.info("CreateTopics: metadata applied here in %.2f s", time.monotonic() - started)
        return respond(request, {"throttle_time": _throttle_time(quotas.mutation_throttle(identity)), "topics": results})

    async def _refresh_after_change(self, what: str) -> None:
        """Read the metadata this broker just changed, so its next answers show the change. The change
        is written whatever this read does: if DynamoDB does not answer it, the regular poll catches
        up, and the request is still answered with what was done. Read as the regular poll does, from
        the change sequence (a topic created or deleted is one change item, not a read of every
        partition)."""
        try:
            version = await asyncio.to_thread(self.context.store.metadata_version)
            await self.context.refresh_metadata(unless_at=version)
        except meta_errors.MetadataError as exc:
            log.warning("%s: written, but re-reading the metadata failed (the next poll will): %s", what, exc)

    def _validate_new_topic(self, name: str, num_partitions: int, replication: int) -> None:
        """What create_topic checks, without writing: for CreateTopics with validate_only."""
        validate_topic_name(name)
        if name in self.context.image.topics:
            raise meta_errors.TopicExistsError(name)
        if num_partitions < 1:
            raise meta_errors.InvalidPartitionsError(num_partitions)
        live = len(self.context.image.live_brokers())
        if not 1 <= replication <= live:
            raise meta_errors.InvalidReplicationFactorError(replication, live)

    async def delete_topics(self, request: Request) -> Any:
        body = request.body
        names = list(getattr(body, "topic_names", ()) or ())
        names += [t.name for t in getattr(body, "topics", ()) or () if t.name]
        results = []
        deleted = False
        quotas = self.quotas.manager
        identity = client_identity(request.client_id, request.principal)
        strict = request.api_version >= _STRICT_MUTATION_QUOTA[ApiKey.DELETE_TOPICS]
        for name in names:
            result = {"name": name, "topic_id": uuid.UUID(int=0), "error_code": ErrorCode.none, "error_message": None}
            results.append(result)
            if not allowed(self.context.authorizer, request, AclOperation.DELETE, ResourceType.TOPIC, name):
                result["error_code"], result["error_message"] = ErrorCode.topic_authorization_failed, "Authorization failed."
                continue
            if strict and quotas.mutation_exceeded(identity):
                result["error_code"], result["error_message"] = ErrorCode.throttling_quota_exceeded, _THROTTLED
                continue
            described = self.context.image.topics.get(name)
            try:
                await asyncio.to_thread(self.context.store.delete_topic, name)
                deleted = True
            except meta_errors.MetadataError as exc:
                result["error_code"], result["error_message"] = _metadata_error_code(exc), str(exc)
                continue
            if described is not None:
                quotas.record_mutations(identity, described.num_partitions)
        if deleted:
            await self._refresh_after_change("DeleteTopics")
        return respond(request, {"throttle_time": _throttle_time(quotas.mutation_throttle(identity)),
                                 "responses": results})

    async def describe_configs(self, request: Request) -> Any:
        body = request.body
        await self._catch_up_for(resource.resource_name for resource in body.resources
                                 if resource.resource_type == RESOURCE_TOPIC)
        results = []
        for resource in body.resources:
            keys = set(resource.configuration_keys) if resource.configuration_keys else None
            result = {"error_code": ErrorCode.none, "error_message": None, "resource_type": resource.resource_type,
                      "resource_name": resource.resource_name, "configs": []}
            results.append(result)
            refusal = self._describe_configs_refusal(request, resource.resource_type, resource.resource_name)
            if refusal is not None:
                result["error_code"], result["error_message"] = refusal, "Authorization failed."
                continue
            if resource.resource_type == RESOURCE_TOPIC:
                described = self.context.image.topics.get(resource.resource_name)
                if described is None:
                    result["error_code"] = ErrorCode.unknown_topic_or_partition
                    continue
                entries = describe_topic_configs(described.configs, self.context.config, keys)
            elif resource.resource_type == RESOURCE_BROKER:
                dynamic = self.context.image.broker_configs
                if resource.resource_name == "":
                    # The cluster-wide dynamic defaults, as Kafka describes the default broker resource.
                    entries = describe_dynamic_default_configs(dynamic, keys)
                elif resource.resource_name != str(self.context.config.broker_id):
                    result["error_code"] = ErrorCode.invalid_request
                    result["error_message"] = f"this is broker {self.context.config.broker_id}"
                    continue
                else:
                    entries = describe_broker_configs(self.context.config.overrides, keys,
                                                      self.context.config.broker_id, dynamic)
            else:
                result["error_code"] = ErrorCode.invalid_request
                result["error_message"] = f"resource type {resource.resource_type} is not supported"
                continue
            result["configs"] = [
                {"name": e.name, "value": e.value, "read_only": _read_only(resource.resource_type, e),
                 "config_source": e.source, "is_sensitive": e.sensitive, "is_default": e.source == SOURCE_DEFAULT,
                 "synonyms": [], "config_type": 0, "documentation": None}
                for e in entries
            ]
        return respond(request, {"throttle_time": NO_THROTTLE, "results": results})

    def _describe_configs_refusal(self, request: Request, resource_type: int, name: str) -> ErrorCode | None:
        """DESCRIBE_CONFIGS on the topic, or (for a broker's configs) on the cluster."""
        authorizer = self.context.authorizer
        if resource_type == RESOURCE_TOPIC:
            if not allowed(authorizer, request, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name):
                return ErrorCode.topic_authorization_failed
        elif resource_type == RESOURCE_BROKER and not cluster_allowed(authorizer, request, AclOperation.DESCRIBE_CONFIGS):
            return ErrorCode.cluster_authorization_failed
        return None

    # Client quotas -----------------------------------------------------------------------------

    async def describe_client_quotas(self, request: Request) -> Any:
        """The stored quotas the filter matches, read from DynamoDB (so a change made through any
        broker is seen at once)."""
        body = request.body
        response = {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.none, "error_message": None, "entries": None}
        if not cluster_allowed(self.context.authorizer, request, AclOperation.DESCRIBE_CONFIGS):
            response["error_code"] = ErrorCode.cluster_authorization_failed
            response["error_message"] = "Authorization failed."
            return respond(request, response)
        try:
            quota_filter = QuotaFilter.parse(((c.entity_type, c.match_type, c.match) for c in body.components),
                                             body.strict)
        except QuotaEntityError as exc:
            response["error_code"], response["error_message"] = ErrorCode.invalid_request, str(exc)
            return respond(request, response)
        try:
            stored = await asyncio.to_thread(self.quotas.store.load)
        except QuotaStoreError as exc:
            response["error_code"], response["error_message"] = ErrorCode.request_timed_out, str(exc)
            return respond(request, response)
        response["entries"] = [
            {"entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity.parts()],
             "values": [{"key": key, "value": value} for key, value in sorted(values.items())]}
            for entity, values in describe(stored.by_entity, quota_filter)
        ]
        return respond(request, response)

    async def alter_client_quotas(self, request: Request) -> Any:
        """Set and remove quotas per entity; each entry succeeds or fails alone. After a change the
        metadata version is bumped, so every broker applies it within one metadata poll."""
        body = request.body
        entries = []
        changed = False
        may_alter = cluster_allowed(self.context.authorizer, request, AclOperation.ALTER_CONFIGS)
        for entry in body.entries:
            parts = [(e.entity_type, e.entity_name) for e in entry.entity]
            result = {"error_code": ErrorCode.none, "error_message": None,
                      "entity": [{"entity_type": kind, "entity_name": name} for kind, name in parts]}
            entries.append(result)
            if not may_alter:
                result["error_code"], result["error_message"] = ErrorCode.cluster_authorization_failed, "Authorization failed."
                continue
            try:
                alteration = parse_alteration(parts, ((op.key, op.value, op.remove) for op in entry.ops))
            except QuotaEntityError as exc:
                result["error_code"], result["error_message"] = ErrorCode.invalid_request, str(exc)
                continue
            if body.validate_only:
                continue
            try:
                await asyncio.to_thread(self.quotas.store.alter, alteration.entity, alteration.set_values,
                                        alteration.remove)
                changed = True
            except QuotaStoreError as exc:
                result["error_code"], result["error_message"] = ErrorCode.request_timed_out, str(exc)
        if changed:
            try:
                await asyncio.to_thread(self.context.store.bump_metadata_version)
            except meta_errors.MetadataError as exc:
                # Stored, but other brokers learn of it only with the next metadata change.
                log.warning("client quotas changed but the metadata version was not bumped: %s", exc)
            await self.context.refresh_metadata()
        return respond(request, {"throttle_time": NO_THROTTLE, "entries": entries})


def _fetch_error(partition: int, error: ErrorCode) -> dict[str, Any]:
    return {"partition_index": partition, "error_code": error, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}


# Fetch v13 names topics by id; v11 carries the consumer's rack (KIP-392); v15 moves the replica id
# into replica_state.
_FETCH_TOPIC_IDS_VERSION = 13
_FETCH_RACK_VERSION = 11


def _fetch_replica_id(body: Any) -> int:
    """The fetching follower's broker id, -1 for a consumer (Fetch v15+ carries it in replica_state)."""
    replica_id = getattr(body, "replica_id", None)
    if replica_id is None:
        state = getattr(body, "replica_state", None)
        replica_id = state.replica_id if state is not None else -1
    return replica_id


def _asked_partition(image: Any, topic: Any, p: Any, uses_topic_ids: bool) -> CachedPartition:
    """A Fetch request's partition as a session holds it, its topic resolved by name or by id."""
    if uses_topic_ids:
        described = image.topics_by_id.get(str(topic.topic_id))
        name, topic_id = (described.name if described is not None else None), topic.topic_id
    else:
        name, topic_id = topic.topic, None
    return CachedPartition(name, topic_id, p.partition, p.fetch_offset, p.partition_max_bytes,
                           getattr(p, "log_start_offset", -1), getattr(p, "current_leader_epoch", -1),
                           getattr(p, "last_fetched_epoch", -1))


def _by_topic(answers: list[tuple[CachedPartition, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Fetch's responses field: consecutive answers of one topic under one entry, as Kafka groups them."""
    topics: list[dict[str, Any]] = []
    last_key: object = None
    for p, answer in answers:
        key = p.topic_id if p.topic_id is not None else p.topic
        if not topics or key != last_key:
            topics.append({"topic": p.topic, "topic_id": p.topic_id, "partitions": []})
            last_key = key
        topics[-1]["partitions"].append(answer)
    return topics


def _producer_refusal(authorizer: Any, request: Request) -> ErrorCode | None:
    """Why a Produce is refused for the producer it writes as, or None (only with an authorizer):
    transactional batches need WRITE on the request's transactional id (Kafka's rule), and a batch's
    producer id must have been handed to the writing principal, or for a transactional batch to the
    request's transactional id (`broker_core.security.producer_ids`), so nobody writes, or bumps the
    epoch, as another principal's producer or another transactional id's."""
    body = request.body
    transactional_id = getattr(body, "transactional_id", None)
    for topic_data in body.topic_data:
        for data in topic_data.partition_data:
            for header in _headers(data.records or b""):
                if header.is_transactional:
                    if transactional_id is None or not allowed(authorizer, request, AclOperation.WRITE,
                                                               ResourceType.TRANSACTIONAL_ID, transactional_id):
                        return ErrorCode.transactional_id_authorization_failed
                    owner = transactional_owner(transactional_id)
                else:
                    owner = request.principal
                if header.producer_id >= 0 and not owns_producer_id(owner, header.producer_id):
                    log.info("denied: principal %s from %s wrote as producer id %d, which is not its own",
                             request.principal, request.client_host, header.producer_id)
                    return ErrorCode.invalid_producer_id_mapping
    return None


def _headers(records: bytes) -> Iterable[Any]:
    """The batch headers of a Produce partition's records; a malformed tail ends the walk (the append
    refuses it later with its own error)."""
    try:
        for _, header in iter_headers(records):
            yield header
    except RecordsError:
        return


def _aborted_entries(aborted: Iterable[AbortedTxn]) -> list[dict[str, int]]:
    """Fetch's aborted_transactions field: (producer id, first offset) of each aborted transaction."""
    return [{"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted]


def _below(data: bytes, upper: int) -> tuple[bytes, int]:
    """The whole batches of ``data`` that end below ``upper`` (a read_committed reader's LSO), and the
    offset after the last of them (``upper`` when no batch is cut: the bound of the aborted list)."""
    end = 0
    for position, header in iter_headers(data):
        if header.last_offset >= upper:
            return data[:position], min(upper, header.base_offset)
        end = position + header.size
    return data[:end], upper


def _read_only(resource_type: int, entry: ConfigEntry) -> bool:
    """DescribeConfigs' read_only: a topic's values other than its own as before, a broker's unless dynamic."""
    if resource_type == RESOURCE_TOPIC:
        return entry.source != SOURCE_TOPIC
    setting = BROKER_SETTINGS.get(entry.name)
    return setting is None or not setting.dynamic


def _from_replica(request: Request) -> bool:
    """A follower's fetch: broker traffic, exempt from client quotas (Kafka exempts ClusterAction)."""
    return request.api_key == ApiKey.FETCH and _fetch_replica_id(request.body) >= 0


def _throttle_time(throttle_s: float) -> datetime.timedelta:
    """A throttle in whole milliseconds, as the protocol carries it (Kafka truncates too)."""
    return datetime.timedelta(milliseconds=int(throttle_s * 1000)) if throttle_s > 0 else NO_THROTTLE


def with_throttle(response: Any, throttle_s: float) -> Any:
    """``response`` with its throttle time raised to ``throttle_s`` if that is longer (and it has one)."""
    throttle = _throttle_time(throttle_s)
    if response is None or throttle <= NO_THROTTLE or not hasattr(response, "throttle_time"):
        return response
    if response.throttle_time >= throttle:
        return response
    return dataclasses.replace(response, throttle_time=throttle)


# KIP-599: from these versions on, CreateTopics and DeleteTopics refuse topics beyond the controller
# mutation quota with THROTTLING_QUOTA_EXCEEDED; older clients are only throttled.
# How long WriteTxnMarkers waits for the ISR to hold its markers: Kafka's request.timeout.ms default,
# which bounds the coordinator's own wait for the answer.
_MARKER_REPLICATION_TIMEOUT_S = 30.0
_STRICT_MUTATION_QUOTA = {ApiKey.CREATE_TOPICS: 6, ApiKey.DELETE_TOPICS: 5}
_THROTTLED = "The throttling quota has been exceeded."


def _epoch_at(partition: Any, offset: int) -> int:
    epoch = partition.log.leader_epochs.epoch_for_offset(offset)
    return -1 if epoch is None else epoch


# Why an append was refused, most specific first: every record-format error not named before the
# last entry (bad CRC, truncated batch, unknown codec, miscounted records) is a corrupt message.
_APPEND_ERROR_CODES: tuple[tuple[type[Exception], ErrorCode], ...] = (
    (ControlBatchFromClientError, ErrorCode.invalid_record),
    (InvalidTxnStateError, ErrorCode.invalid_txn_state),
    (TransactionCoordinatorFencedError, ErrorCode.transaction_coordinator_fenced),
    (OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (RecordTooLargeError, ErrorCode.message_too_large),
    (RecordWithoutKeyError, ErrorCode.invalid_record),
    (UnsupportedMagicError, ErrorCode.unsupported_for_message_format),
    (RecordsError, ErrorCode.corrupt_message),
)
_REFUSED_APPENDS = tuple(cls for cls, _ in _APPEND_ERROR_CODES)

_METADATA_ERROR_CODES: dict[type[Exception], ErrorCode] = {
    meta_errors.TopicExistsError: ErrorCode.topic_already_exists,
    meta_errors.UnknownTopicError: ErrorCode.unknown_topic_or_partition,
    meta_errors.InvalidReplicationFactorError: ErrorCode.invalid_replication_factor,
    meta_errors.InvalidPartitionsError: ErrorCode.invalid_partitions,
    meta_errors.InvalidTopicError: ErrorCode.invalid_topic_exception,
    meta_errors.InvalidConfigError: ErrorCode.invalid_config,
    meta_errors.PolicyViolationError: ErrorCode.policy_violation,
}


def _metadata_error_code(exc: Exception) -> ErrorCode:
    for cls in type(exc).__mro__:
        if cls in _METADATA_ERROR_CODES:
            return _METADATA_ERROR_CODES[cls]
    # DynamoDB unreachable or a conflict that outlived its retries: the client may retry.
    return ErrorCode.request_timed_out
