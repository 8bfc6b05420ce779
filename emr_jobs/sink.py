"""``df.write.format("floe")`` and ``df.writeStream.format("floe")``: Spark's Kafka sink, on Floe.

Columns, as in Spark's Kafka sink: ``value`` (binary or string, required), ``key`` (binary or
string, optional), ``headers`` (array<struct<key: string, value: binary>>, optional), ``topic``
(string; the ``topic`` option, when given, overrides it) and ``partition`` (int, optional). Other
columns are ignored. A row without a partition goes where Kafka's default partitioner puts it:
murmur2 of its key (``broker_core.partitioner``), and for a null key one partition per batch of
rows, chosen at random (Kafka's sticky partitioning).

Batch writes (``df.write``): each executor task is an idempotent producer: it asks a broker for a
producer id (InitProducerId) and numbers its batches per partition, so a Produce it must resend (a
lost connection, a timeout, a leader change) is appended once, as with ``enable.idempotence=true``.
The guarantee of a batch write is at-least-once, as Spark's Kafka sink: a task Spark retries is
written again by a new producer.

Stream writes (``df.writeStream``) are exactly-once by default (``exactlyOnce=true``), a two-phase
commit over Kafka transactions in the way of Flink's Kafka sink (KIP-939's prepare, without its
prepared state):

- each task of micro-batch B is the transactional producer of the id ``<prefix>-<task's partition
  id>``, where the prefix is ``transactionalIdPrefix`` or ``floe-spark-<query id>`` (the query id
  is kept in the checkpoint, so it is the same after a restart). InitProducerId fences every older
  producer of the id (a failed attempt of the task, a zombie from before a restart) and aborts its
  open transaction;
- the task writes its rows in the transaction and, in the same transaction, commits offset B + 1
  for the consumer group named as the transactional id (TxnOffsetCommit): the record that this
  task's share of B is written, which becomes visible exactly when the rows do. It leaves the
  transaction open and hands (transactional id, producer id, epoch) to the driver;
- the driver's ``commit(messages, B)`` ends every task's transaction with EndTxn(commit) (a repeat
  of a completed commit is answered NONE); ``abort`` ends them with EndTxn(abort);
- before writing, a task reads its group's stable offset: when it is past B, its transaction for
  B committed already (the query stopped after the driver's commit and before Spark's commit log
  recorded B, and replays B): the task writes nothing.

So every row of a micro-batch is visible to read_committed consumers once, whether tasks retry or
the query restarts, provided a replayed micro-batch puts the same rows in the same task (true for
a deterministic query over a replayed source range; not for ``repartition(n)`` without columns or
``rand()``). A transaction open longer than ``transactionTimeoutMs`` is aborted by the coordinator
and the micro-batch's commit then fails (the query stops; a restart rewrites the batch).
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import random
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from kio.schema.errors import ErrorCode
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from broker_core.client import (
    BrokerConnection,
    BrokerConnectionError,
    ClientError,
    FloeClient,
    KafkaError,
    backoff_s,
    parse_bootstrap_servers,
)
from broker_core.client.transactions import TransactionalProducer, committed_offsets, end_transaction
from broker_core.clock import wall_clock_ms
from broker_core.partitioner import partition_for_key
from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.messages import build_entity, request_class
from broker_core.records import EncodedRecords, SimpleRecord, build_batch
from emr_jobs.errors import InvalidOptionError, SinkWriteError
from emr_jobs.options import _boolean, _positive_int, bootstrap_servers_option, canonical_options
from emr_jobs.python_worker import prepare_python_worker
from emr_jobs.schema import HEADERS_TYPE

BATCH_RECORDS = 2000  # the row path's batches: records per partition, and key and value bytes pending
BATCH_BYTES = 1024 * 1024
# The column path's batches: up to this many records and this many bytes of encoded records each
# (counted from an upper bound of a record's encoding), below Kafka's default message.max.bytes
# (1,048,588): with acks=all each batch is a round trip, so they are as large as a broker accepts.
COLUMN_BATCH_RECORDS = 20_000
COLUMN_BATCH_BYTES = 1_000_000
RECORD_OVERHEAD_BOUND = 20  # a record's bytes beyond key and value: lengths, deltas, attributes
SEND_ATTEMPTS = 10
INIT_PRODUCER_ID_VERSION = 4

_SINK_OPTION_NAMES = ("topic", "kafka.bootstrap.servers", "stack")
_STREAM_SINK_OPTION_NAMES = (*_SINK_OPTION_NAMES, "exactlyOnce", "transactionalIdPrefix", "transactionTimeoutMs")
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000  # Kafka's transaction.timeout.ms
# Local properties Spark's MicroBatchExecution sets on every task of a micro-batch.
_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class SinkOptions:
    """Parsed sink options and where each column is in a row (None: the column is absent)."""

    topic: str | None
    bootstrap_servers: str
    key_column: bool
    headers_column: bool
    topic_column: bool
    partition_column: bool
    exactly_once: bool = False
    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS


def parse_sink_options(options: Mapping[str, str], schema: StructType, *, streaming: bool = False) -> SinkOptions:
    """Check the options and the DataFrame's columns against what Spark's Kafka sink accepts; a
    stream sink also takes ``exactlyOnce``, ``transactionalIdPrefix`` and ``transactionTimeoutMs``."""
    names = _STREAM_SINK_OPTION_NAMES if streaming else _SINK_OPTION_NAMES
    what = "the floe stream sink" if streaming else "the floe sink"
    given = canonical_options(options, names, what, ignored=("path", "checkpointlocation"))
    servers = bootstrap_servers_option(given)
    if not servers:
        raise InvalidOptionError("kafka.bootstrap.servers", "the sink writes to brokers: give them (or stack)")
    types = {field.name: field.dataType for field in schema.fields}
    if "value" not in types:
        raise InvalidOptionError("value", "the DataFrame needs a value column (binary or string)")
    for column in ("key", "value"):
        if column in types and not isinstance(types[column], BinaryType | StringType):
            raise InvalidOptionError(column, f"the {column} column must be binary or string, not {types[column].simpleString()}")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise InvalidOptionError("topic", f"the topic column must be a string, not {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise InvalidOptionError("partition", f"the partition column must be an int, not {types['partition'].simpleString()}")
    if "headers" in types and not _headers_type(types["headers"]):
        raise InvalidOptionError("headers", f"the headers column must be {HEADERS_TYPE.simpleString()}")
    topic = given.get("topic", "").strip() or None
    if topic is None and "topic" not in types:
        raise InvalidOptionError("topic", "give the topic option or a topic column")
    prefix = given.get("transactionalIdPrefix", "").strip() or None
    return SinkOptions(
        topic=topic,
        bootstrap_servers=servers,
        key_column="key" in types,
        headers_column="headers" in types,
        topic_column="topic" in types,
        partition_column="partition" in types,
        exactly_once=streaming and _boolean("exactlyOnce", given.get("exactlyOnce", "true")),
        transactional_id_prefix=prefix,
        transaction_timeout_ms=_positive_int(
            "transactionTimeoutMs", given.get("transactionTimeoutMs", str(DEFAULT_TRANSACTION_TIMEOUT_MS))),
    )


def _headers_type(data_type: Any) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = {field.name: field.dataType for field in data_type.elementType.fields}
    return set(fields) == {"key", "value"} and isinstance(fields["key"], StringType) and isinstance(
        fields["value"], BinaryType | StringType
    )


@dataclass
class WrittenRecords(WriterCommitMessage):
    """What one task wrote: records per topic."""

    records: dict[str, int]


@dataclass
class PreparedTransaction(WriterCommitMessage):
    """What one task of an exactly-once micro-batch left for the driver: its open transaction
    (``producer_id`` -1 when it had nothing to write or its share was committed before) and the
    records it wrote in it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    records: dict[str, int]
    already_committed: bool = False


class FloeWriter(DataSourceArrowWriter):
    """A batch write: every task produces its rows; nothing is left to do at commit (at-least-once).

    Spark hands each task its rows as Arrow record batches (``DataSourceArrowWriter``): partitions and
    records are computed over whole columns in native code, not row by row in Python."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        prepare_python_worker()
        return WrittenRecords(write_rows(self.options, iterator))


class FloeStreamWriter(DataSourceStreamWriter, DataSourceArrowWriter):
    """A micro-batch write: tasks prepare a transaction each, the driver commits them (exactly-once);
    with ``exactlyOnce=false`` as FloeWriter, and a replayed micro-batch is written again.

    Spark 4.0's Python writer worker hands any writer that is a ``DataSourceArrowWriter`` its rows as
    Arrow record batches, stream writers included (``pyspark.sql.worker.write_into_data_source``), so
    this writer takes them as FloeWriter does."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords | PreparedTransaction:
        prepare_python_worker()
        if not self.options.exactly_once:
            return WrittenRecords(write_rows(self.options, iterator))
        context = TaskContext.get()
        assert context is not None  # write runs in a Spark task
        batch_id = int(context.getLocalProperty(_BATCH_ID_PROPERTY))
        prefix = self.options.transactional_id_prefix or f"floe-spark-{context.getLocalProperty(_QUERY_ID_PROPERTY)}"
        transactional_id = f"{prefix}-{context.partitionId()}"
        return _run(_prepare_transaction(self.options, iterator, transactional_id, batch_id))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        """Commit every task's transaction (exactly-once); at-least-once records are acknowledged already."""
        _run(_end_transactions(self.options, messages, commit=True))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        """Abort the transactions of the tasks that prepared one (the others' were fenced or never opened)."""
        _run(_end_transactions(self.options, messages, commit=False))


def _run(work: Awaitable[Any]) -> Any:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(work)
    finally:
        loop.close()


async def _end_transactions(options: SinkOptions, messages: list[WriterCommitMessage | None], *, commit: bool) -> None:
    prepared = [m for m in messages if isinstance(m, PreparedTransaction) and m.producer_id >= 0]
    if not prepared:
        return
    async with FloeClient(options.bootstrap_servers, client_id="floe-spark-sink") as client:
        for message in prepared:
            try:
                await end_transaction(client, message.transactional_id, message.producer_id, message.producer_epoch,
                                      commit)
            except ClientError as error:
                if not commit:
                    continue  # a transaction that cannot be aborted was fenced, or times out: it never shows
                raise SinkWriteError(topic=",".join(message.records) or "*", partition=None, reason=(
                    f"committing transaction {message.transactional_id} (producer {message.producer_id}, epoch "
                    f"{message.producer_epoch}) failed: {error}")) from error


async def _prepare_transaction(options: SinkOptions, rows: Iterator[pa.RecordBatch], transactional_id: str,
                               batch_id: int) -> PreparedTransaction:
    """Write this task's rows of micro-batch ``batch_id`` in a transaction left open for the driver,
    unless the group offset says this task's share of the batch was committed before."""
    async with FloeClient(options.bootstrap_servers, client_id="floe-spark-sink") as client:
        producer = TransactionalProducer(client, transactional_id, transaction_timeout_ms=options.transaction_timeout_ms)
        try:
            await producer.init()
            done = max(list((await committed_offsets(client, transactional_id)).values()), default=0)
            if done > batch_id:
                return PreparedTransaction(transactional_id, -1, -1, {}, already_committed=True)
            written = await _produce_rows(options, rows, client, producer.send)
            if not written:
                return PreparedTransaction(transactional_id, -1, -1, {})
            # The mark that this task's share of batch_id is written: committed with the rows, or not at all.
            await producer.send_offsets(transactional_id, {(options.topic or sorted(written)[0], 0): batch_id + 1})
        except KafkaError as error:
            raise SinkWriteError(topic=error.topic or "*", partition=error.partition, reason=(
                f"transaction {transactional_id}: {error}")) from error
        except ClientError as error:
            raise SinkWriteError(topic="*", partition=None, reason=f"transaction {transactional_id}: {error}") from error
        return PreparedTransaction(transactional_id, producer.producer_id, producer.producer_epoch, written)


def write_rows(options: SinkOptions, rows: Iterator[pa.RecordBatch]) -> dict[str, int]:
    """Produce ``rows`` (Arrow record batches) with one idempotent producer; returns how many records
    went to each topic."""
    return _run(_write_idempotently(options, rows))


async def _write_idempotently(options: SinkOptions, rows: Iterator[pa.RecordBatch]) -> dict[str, int]:
    async with FloeClient(options.bootstrap_servers, client_id="floe-spark-sink") as client:
        producer = _IdempotentProducer(client, *await _init_producer_id(options.bootstrap_servers))
        return await _produce_rows(options, rows, client, producer.send)


class _IdempotentProducer:
    """One producer id, a sequence number per partition; resends a batch unchanged until acknowledged."""

    def __init__(self, client: FloeClient, producer_id: int, producer_epoch: int) -> None:
        self.client = client
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.sequences: dict[tuple[str, int], int] = defaultdict(int)

    async def send(self, topic: str, partition: int, records: list[SimpleRecord] | EncodedRecords) -> None:
        sequence = self.sequences[(topic, partition)]
        batch = build_batch(records, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                            base_sequence=sequence)
        self.sequences[(topic, partition)] = (sequence + len(records)) % (1 << 31)
        for attempt in range(SEND_ATTEMPTS):
            try:
                await self.client.produce(topic, batch, partition)
                return
            except KafkaError as error:
                # The batch carries its sequence number, so resending one the broker may already
                # have appended is safe: a duplicate is acknowledged, not appended again.
                if not (error.retriable or error.code == ErrorCode.duplicate_sequence_number) or attempt + 1 == SEND_ATTEMPTS:
                    raise SinkWriteError(topic=topic, partition=partition, reason=str(error)) from error
                if error.code == ErrorCode.duplicate_sequence_number:
                    return
            except BrokerConnectionError as error:
                if attempt + 1 == SEND_ATTEMPTS:
                    raise SinkWriteError(topic=topic, partition=partition, reason=str(error)) from error
            await asyncio.sleep(backoff_s(attempt))


async def _init_producer_id(bootstrap_servers: str) -> tuple[int, int]:
    last_error: Exception | None = None
    for host, port in parse_bootstrap_servers(bootstrap_servers):
        connection = BrokerConnection(host, port, client_id="floe-spark-sink")
        try:
            await connection.connect()
            # Floe's client negotiates only the APIs it uses itself: send InitProducerId v4 as is.
            request = build_entity(request_class(ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION), {
                "transactional_id": None, "transaction_timeout": datetime.timedelta(seconds=60),
                "producer_id": -1, "producer_epoch": -1,
            })
            response = await connection.send(ApiKey.INIT_PRODUCER_ID, request)
            if response.error_code == ErrorCode.none:
                return response.producer_id, response.producer_epoch
            last_error = KafkaError(response.error_code)
        except ClientError as error:
            last_error = error
        finally:
            await connection.close()
    raise SinkWriteError(topic="*", partition=None, reason=f"InitProducerId failed: {last_error}")


Send = Callable[[str, int, list[SimpleRecord] | EncodedRecords], Awaitable[None]]


async def _produce_rows(options: SinkOptions, batches: Iterator[pa.RecordBatch], client: FloeClient,
                        send: Send) -> dict[str, int]:
    """Produce the rows of Arrow record ``batches``; how many records went to each topic.

    With one topic and no headers (the topic option given, or no topic column; no headers column),
    columns go to native kernels (`_produce_columns`); otherwise row by row (`_produce_row_dicts`).
    Spark 4.0 hands any ``DataSourceArrowWriter`` Arrow batches, stream writers included; should a
    Spark version hand the stream writer ``Row``s instead, they take the row path."""
    items = iter(batches)
    first = next(items, None)
    if first is None:
        return {}
    batches = itertools.chain([first], items)
    if not isinstance(first, pa.RecordBatch):
        return await _produce_row_dicts(options, batches, client, send)  # type: ignore[arg-type]
    if options.headers_column or (options.topic is None and options.topic_column):
        rows = (row for batch in batches for row in batch.to_pylist())
        return await _produce_row_dicts(options, rows, client, send)
    return await _produce_columns(options, batches, client, send)


async def _produce_columns(options: SinkOptions, batches: Iterator[pa.RecordBatch], client: FloeClient,
                           send: Send) -> dict[str, int]:
    """Each Arrow batch at once: partitions from the partition column, murmur2 of the key (Kafka's
    default partitioner) or, for a null key, one partition chosen at random per `COLUMN_BATCH_RECORDS`
    rows (sticky partitioning); then per partition, batches of at most `COLUMN_BATCH_RECORDS` records
    and `COLUMN_BATCH_BYTES` (a single larger record goes alone) encoded by
    `record_kernels.encode_records`, sent in order, partitions in parallel."""
    from emr_jobs.record_kernels import encode_records, key_partitions  # numba: only where rows are written

    topic = options.topic
    assert topic is not None
    written = 0
    count: int | None = None
    for batch in batches:
        rows = batch.num_rows
        if rows == 0:
            continue
        if count is None:
            count = await client.num_partitions(topic)
        value = _binary_column(batch.column(batch.schema.get_field_index("value")))
        key = (_binary_column(batch.column(batch.schema.get_field_index("key"))) if options.key_column
               else _null_column(rows))
        if options.partition_column:
            given = batch.column(batch.schema.get_field_index("partition"))
            partitions = given.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32, copy=True)
        else:
            partitions = np.full(rows, -1, dtype=np.int32)
        key_partitions(key[0], key[1], key[2], count, partitions)
        unset = np.flatnonzero(partitions < 0)  # null keys, no partition given
        for first in range(0, len(unset), COLUMN_BATCH_RECORDS):
            partitions[unset[first:first + COLUMN_BATCH_RECORDS]] = random.randrange(count)
        sizes = np.diff(key[0]).astype(np.int64) + np.diff(value[0]) + RECORD_OVERHEAD_BOUND
        order = np.argsort(partitions, kind="stable")
        ordered = partitions[order]
        bounds = np.flatnonzero(np.diff(ordered)) + 1
        sends = []
        for group in np.split(order, bounds):
            partition = int(partitions[group[0]])
            chunks = []
            ends = np.cumsum(sizes[group])
            start = 0
            while start < len(group):
                before = ends[start - 1] if start else 0
                stop = min(start + COLUMN_BATCH_RECORDS,
                           int(np.searchsorted(ends, before + COLUMN_BATCH_BYTES, side="right")))
                stop = max(stop, start + 1)
                section = encode_records(group[start:stop], key[0], key[1], key[2], value[0], value[1], value[2])
                chunks.append(EncodedRecords(section.tobytes(), stop - start, wall_clock_ms()))
                start = stop
            sends.append(_send_in_order(send, topic, partition, chunks))
        await asyncio.gather(*sends)
        written += rows
    return {topic: written} if written else {}


async def _send_in_order(send: Send, topic: str, partition: int, chunks: list[EncodedRecords]) -> None:
    for chunk in chunks:
        await send(topic, partition, chunk)


def _binary_column(column: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, data, valid) of a binary or string column, for the record kernels (no copy of the data)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_string(column.type):
        column = column.view(pa.binary())
    _, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[column.offset:column.offset + len(column) + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    return offsets, data, valid


def _null_column(rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(rows + 1, np.int32), np.zeros(0, np.uint8), np.zeros(rows, np.bool_)


async def _produce_row_dicts(options: SinkOptions, rows: Iterator[Mapping[str, Any]], client: FloeClient,
                             send: Send) -> dict[str, int]:
    """Batch ``rows`` per partition and ``send`` each batch; how many records went to each topic."""
    written: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = {}
    sticky: dict[str, int] = {}
    pending: dict[tuple[str, int], list[SimpleRecord]] = defaultdict(list)
    pending_bytes = 0

    async def flush() -> None:
        nonlocal pending_bytes
        batches = [(tp, records) for tp, records in pending.items() if records]
        pending.clear()
        pending_bytes = 0
        sticky.clear()
        await asyncio.gather(*(send(topic, partition, records) for (topic, partition), records in batches))
        for (topic, _), records in batches:
            written[topic] += len(records)

    for row in rows:
        topic = options.topic or row["topic"]
        if not topic:
            raise SinkWriteError(topic="?", partition=None, reason="a row has a null topic and no topic option is set")
        key = _as_bytes(row["key"]) if options.key_column else None
        value = _as_bytes(row["value"])
        headers = _headers(row["headers"]) if options.headers_column else ()
        partition = row["partition"] if options.partition_column else None
        if partition is None:
            if topic not in counts:
                counts[topic] = await client.num_partitions(topic)
            if key is not None:
                partition = partition_for_key(key, counts[topic])
            else:
                partition = sticky.setdefault(topic, random.randrange(counts[topic]))
        records = pending[(topic, partition)]
        records.append(SimpleRecord(key=key, value=value, headers=headers))
        pending_bytes += len(value or b"") + len(key or b"")
        if len(records) >= BATCH_RECORDS or pending_bytes >= BATCH_BYTES:
            await flush()
    await flush()
    return dict(written)


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _headers(headers: Any) -> tuple[tuple[str, bytes | None], ...]:
    if not headers:
        return ()
    return tuple((header["key"], _as_bytes(header["value"])) for header in headers)
