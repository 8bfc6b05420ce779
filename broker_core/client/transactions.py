"""A transactional producer over `FloeClient`: the client side of Kafka's transactions (KIP-98).

The sequence is a Kafka producer's: FindCoordinator (key type 1) for the transactional id,
InitProducerId (which fences every older producer of that id and aborts its open transaction),
AddPartitionsToTxn before the first write to a partition, transactional batches with sequence
numbers per partition, AddOffsetsToTxn + TxnOffsetCommit for a consumer group's offsets, EndTxn.

The end of a transaction is a function of its own (`end_transaction`): given the transactional id,
producer id and epoch, any process may commit or abort the open transaction, as Flink's Kafka sink
does when its job manager commits what its tasks prepared. A Spark driver commits its executors'
transactions this way (``emr_jobs.sink``).

Errors the coordinator marks as moved or busy (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS) are retried with the client's backoff after
finding the coordinator again; anything else raises `KafkaError`. Callers: one event loop, as
`FloeClient`.
"""

from __future__ import annotations

import asyncio
import datetime
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.messages import build_entity, request_class
from broker_core.records import EncodedRecords, RecordInput, build_batch

from .backoff import backoff_s
from .errors import BrokerConnectionError, ClientError, KafkaError
from .floe_client import FloeClient

GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator key types
SEND_ATTEMPTS = 10
_VERSIONS = {ApiKey.FIND_COORDINATOR: 3, ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 3,
             ApiKey.ADD_OFFSETS_TO_TXN: 3, ApiKey.TXN_OFFSET_COMMIT: 3, ApiKey.END_TXN: 3, ApiKey.OFFSET_FETCH: 7}
_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                    ErrorCode.coordinator_load_in_progress})
_BUSY = frozenset({ErrorCode.concurrent_transactions, ErrorCode.unstable_offset_commit})


def _request(api_key: int, fields: Mapping[str, Any]) -> Any:
    return build_entity(request_class(api_key, _VERSIONS[api_key]), fields)


async def call_coordinator(client: FloeClient, key: str, key_type: int, api_key: int, fields: Mapping[str, Any],
                           error_of: Callable[[Any], ErrorCode]) -> Any:
    """Send a request to the coordinator of ``key`` and return its answer, finding the coordinator
    again and repeating while the answer (``error_of``) says it moved, is loading or is busy."""
    last: ClientError | None = None
    for attempt in range(client.retries + 1):
        if attempt:
            await asyncio.sleep(backoff_s(attempt - 1, client.retry_backoff_s))
        try:
            found = await client.send_to_any_broker(ApiKey.FIND_COORDINATOR, _request(
                ApiKey.FIND_COORDINATOR, {"key": key, "key_type": key_type}))
            if found.error_code != ErrorCode.none:
                last = KafkaError(found.error_code, found.error_message)
                if found.error_code in _MOVED:
                    continue
                raise last
            response = await client.send_to_broker(found.node_id, api_key, _request(api_key, fields))
        except BrokerConnectionError as error:
            last = error  # every request here is safe to repeat: the coordinator answers a repeat the same
            continue
        code = error_of(response)
        if code == ErrorCode.none:
            return response
        last = KafkaError(code, getattr(response, "error_message", None))
        if code not in _MOVED and code not in _BUSY:
            raise last
    assert last is not None
    raise last


async def end_transaction(client: FloeClient, transactional_id: str, producer_id: int, producer_epoch: int,
                          commit: bool) -> None:
    """EndTxn: commit (or abort) the open transaction of ``transactional_id`` as producer
    ``producer_id`` at ``producer_epoch``. A repeat of an end that completed is answered NONE, so a
    caller unsure whether its first attempt arrived may send it again; PRODUCER_FENCED means a newer
    producer of the id took over (and aborted the transaction)."""
    await call_coordinator(client, transactional_id, TRANSACTION_KEY, ApiKey.END_TXN, {
        "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
        "committed": commit}, lambda response: response.error_code)


async def committed_offsets(client: FloeClient, group_id: str, *, require_stable: bool = True,
                            ) -> dict[tuple[str, int], int]:
    """Every committed offset of ``group_id``, {(topic, partition): offset}; with ``require_stable``
    the answer waits (retries) while a transaction holds offsets of the group pending (KIP-447)."""

    def error_of(response: Any) -> ErrorCode:
        codes = [response.error_code] + [p.error_code for t in response.topics for p in t.partitions]
        return next((code for code in codes if code != ErrorCode.none), ErrorCode.none)

    response = await call_coordinator(client, group_id, GROUP_KEY, ApiKey.OFFSET_FETCH, {
        "group_id": group_id, "topics": None, "require_stable": require_stable}, error_of)
    return {(t.name, p.partition_index): p.committed_offset for t in response.topics for p in t.partitions
            if p.committed_offset >= 0}


class TransactionalProducer:
    """One transactional id's producer: ``init`` once, then transactions of ``send`` /
    ``send_offsets`` ended by ``commit`` / ``abort`` (or by `end_transaction` from elsewhere).

    ``send`` writes one batch and waits for the leader's acknowledgement (acks=all); a batch it must
    resend (a timeout, a lost connection) carries the same sequence number, so the leader appends it
    once. ``producer_id`` and ``producer_epoch`` are set by ``init``.
    """

    def __init__(self, client: FloeClient, transactional_id: str, *, transaction_timeout_ms: int = 60_000) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences: dict[tuple[str, int], int] = defaultdict(int)
        self._partitions: set[tuple[str, int]] = set()
        self._open = False  # the current transaction has added a partition or offsets

    async def init(self) -> None:
        """InitProducerId: fence older producers of the id (their open transaction is aborted)."""
        response = await call_coordinator(self.client, self.transactional_id, TRANSACTION_KEY, ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": self.transactional_id,
            "transaction_timeout": datetime.timedelta(milliseconds=self.transaction_timeout_ms),
            "producer_id": -1, "producer_epoch": -1}, lambda response: response.error_code)
        self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
        self._sequences.clear()
        self._partitions.clear()
        self._open = False

    @property
    def in_transaction(self) -> bool:
        """Whether the current transaction has added a partition or offsets (an empty one needs no end)."""
        return self._open

    async def add_partitions(self, partitions: Sequence[tuple[str, int]]) -> None:
        new = sorted(set(partitions) - self._partitions)
        if not new:
            return
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in new:
            by_topic[topic].append(partition)

        def error_of(response: Any) -> ErrorCode:
            codes = [p.partition_error_code for t in response.results_by_topic_v3_and_below
                     for p in t.results_by_partition]
            return next((code for code in codes if code != ErrorCode.none), ErrorCode.none)

        await call_coordinator(self.client, self.transactional_id, TRANSACTION_KEY, ApiKey.ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": self.transactional_id, "v3_and_below_producer_id": self.producer_id,
            "v3_and_below_producer_epoch": self.producer_epoch,
            "v3_and_below_topics": [{"name": t, "partitions": p} for t, p in by_topic.items()]}, error_of)
        self._partitions.update(new)
        self._open = True

    async def send(self, topic: str, partition: int, records: Sequence[RecordInput] | EncodedRecords) -> None:
        """Write ``records`` as one transactional batch to a partition of the transaction."""
        await self.add_partitions([(topic, partition)])
        sequence = self._sequences[(topic, partition)]
        batch = build_batch(records, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                            base_sequence=sequence, is_transactional=True)
        self._sequences[(topic, partition)] = (sequence + len(records)) % (1 << 31)
        for attempt in range(SEND_ATTEMPTS):
            try:
                await self.client.produce(topic, batch, partition, transactional_id=self.transactional_id)
                return
            except KafkaError as error:
                if error.code == ErrorCode.duplicate_sequence_number:
                    return  # an earlier send of this batch was appended
                if not error.retriable or attempt + 1 == SEND_ATTEMPTS:
                    raise
            except BrokerConnectionError:
                if attempt + 1 == SEND_ATTEMPTS:
                    raise
            await asyncio.sleep(backoff_s(attempt, self.client.retry_backoff_s))

    async def send_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit ``offsets`` ({(topic, partition): next offset}) of ``group_id`` within the transaction
        (AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator), as a standalone consumer
        (generation -1): they become visible when the transaction commits."""
        await call_coordinator(self.client, self.transactional_id, TRANSACTION_KEY, ApiKey.ADD_OFFSETS_TO_TXN, {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch, "group_id": group_id}, lambda response: response.error_code)
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic[topic].append({"partition_index": partition, "committed_offset": offset,
                                    "committed_leader_epoch": -1, "committed_metadata": ""})

        def error_of(response: Any) -> ErrorCode:
            codes = [p.error_code for t in response.topics for p in t.partitions]
            return next((code for code in codes if code != ErrorCode.none), ErrorCode.none)

        await call_coordinator(self.client, group_id, GROUP_KEY, ApiKey.TXN_OFFSET_COMMIT, {
            "transactional_id": self.transactional_id, "group_id": group_id, "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch, "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": partitions} for topic, partitions in by_topic.items()]},
            error_of)
        self._open = True

    async def commit(self) -> None:
        await self._end(True)

    async def abort(self) -> None:
        await self._end(False)

    async def _end(self, commit: bool) -> None:
        if self._open:
            await end_transaction(self.client, self.transactional_id, self.producer_id, self.producer_epoch, commit)
        self._partitions.clear()
        self._open = False
