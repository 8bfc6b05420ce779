"""``spark.readStream.format("floe")``: a micro-batch stream over one or more topics, tiered data and tail.

Offsets are what Spark's Kafka source writes to its checkpoint: one JSON object
``{"<topic>": {"<partition>": <next offset>}}`` per micro-batch, so a checkpoint is readable by people
and the end of batch N is the start of batch N+1. Spark plans each micro-batch on the driver:

- ``initialOffset`` (a query with no checkpoint) resolves ``startingOffsets`` / ``startingTimestamp``.
- ``latestOffset`` asks the partitions' leaders for their high watermarks (every acknowledged
  record, whatever ``segment.bytes`` is; with ``isolationLevel=read_committed`` their last stable
  offsets, and the records of aborted transactions are left out of the reads), re-reads the topic list (``subscribePattern``) and
  partition counts (CreatePartitions), and caps the batch at ``maxOffsetsPerTrigger``, spread over
  the partitions in proportion to what each has waiting, as Spark's Kafka source does.
- ``partitions(start, end)`` splits each partition's ``[start, end)`` at its tiered end: the part
  below it is read from S3 (``emr_jobs.planning``), the rest from its leader (``emr_jobs.tail``).
  A new partition starts at its earliest offset. When the start is below what the log still holds
  (retention deleted it) or past its end (the log was truncated or the topic recreated), the batch
  fails with DataLossError, or, with ``failOnDataLoss=false``, skips to what is there and logs a
  warning, as Spark does. A segment object missing from S3 when a task reads it (a manifest row
  whose object is gone) is data loss the same way: the task fails, or skips that segment's range.

A micro-batch's range is fixed in the offset log before it is read, so a restart re-reads exactly
the ranges recorded there: no record is lost or read twice into an exactly-once sink.

Spark 4.0 passes a Python stream reader neither the start of the next batch nor a read limit, and
asks for the latest offset before the initial one, so ``maxOffsetsPerTrigger`` counts from the last
range this reader planned: the first micro-batch of each run of a query is not capped.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from broker_core.aws import AwsSettings
from emr_jobs import remote, tail
from emr_jobs.errors import DataLossError, InvalidOptionError, SegmentGoneError
from emr_jobs.options import (
    DEFAULT_MAX_BYTES_PER_PARTITION,
    EARLIEST,
    LATEST,
    OffsetBound,
    ReadOptions,
    _aws_settings,
    _boolean,
    _isolation,
    _optional_timestamp,
    _positive_int,
    bootstrap_servers_option,
    canonical_options,
)
from emr_jobs.planning import OffsetRange, SegmentRead, plan_segment_reads, tiered_bounds
from emr_jobs.python_worker import prepare_python_worker
from emr_jobs.segment_reads import read_segment

LOG = logging.getLogger(__name__)

_STREAM_OPTION_NAMES = (
    "topic",
    "subscribe",
    "subscribePattern",
    "startingOffsets",
    "startingTimestamp",
    "maxOffsetsPerTrigger",
    "failOnDataLoss",
    "includeHeaders",
    "isolationLevel",
    "maxBytesPerPartition",
    "kafka.bootstrap.servers",
    "stack",
    "region",
    "bucket",
    "tablePrefix",
    "endpointUrl",
)

Offsets = dict[str, dict[str, int]]  # topic -> partition (a string, as in JSON) -> offset


@dataclass(frozen=True)
class StreamOptions:
    """Parsed options of a floe stream; exactly one of ``topics`` and ``pattern`` is set."""

    topics: tuple[str, ...]
    pattern: str | None
    starting_default: int  # EARLIEST or LATEST
    starting_offsets: Mapping[str, Mapping[int, int]]
    starting_timestamp: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    read_committed: bool
    max_bytes_per_partition: int
    bootstrap_servers: str
    aws: AwsSettings
    local_stack: bool

    def read_options(self, topic: str) -> ReadOptions:
        """The batch reader's options for reading ``topic``'s planned ranges."""
        return ReadOptions(
            topic=topic,
            starting_offsets=OffsetBound(EARLIEST),
            ending_offsets=OffsetBound(LATEST),
            starting_timestamp=None,
            ending_timestamp=None,
            include_headers=self.include_headers,
            max_bytes_per_partition=self.max_bytes_per_partition,
            aws=self.aws,
            local_stack=self.local_stack,
            bootstrap_servers=self.bootstrap_servers,
            read_committed=self.read_committed,
        )


def parse_stream_options(options: Mapping[str, str], environ: Mapping[str, str] | None = None) -> StreamOptions:
    """Check and parse the stream options (case-insensitive names, as in Spark)."""
    given = canonical_options(options, _STREAM_OPTION_NAMES, "a floe stream")
    chosen = [name for name in ("topic", "subscribe", "subscribePattern") if given.get(name, "").strip()]
    if len(chosen) != 1:
        raise InvalidOptionError("subscribe", "give exactly one of topic, subscribe (comma-separated) and subscribePattern")
    pattern = None
    topics: tuple[str, ...] = ()
    if chosen[0] == "subscribePattern":
        pattern = given["subscribePattern"]
        try:
            re.compile(pattern)
        except re.error as error:
            raise InvalidOptionError("subscribePattern", f"{pattern!r} is not a regular expression: {error}") from None
    else:
        topics = tuple(t.strip() for t in given[chosen[0]].split(",") if t.strip())
    if "startingTimestamp" in given and "startingOffsets" in given:
        raise InvalidOptionError("startingTimestamp", "give startingTimestamp or startingOffsets, not both")
    default, per_topic = _starting_offsets(given.get("startingOffsets", "latest"), topics, pattern)
    max_offsets = given.get("maxOffsetsPerTrigger")
    aws, local_stack = _aws_settings(given, environ)
    servers = bootstrap_servers_option(given)
    if not servers:
        raise InvalidOptionError("kafka.bootstrap.servers", "a stream reads the brokers' high watermarks: give the "
                                 "brokers (or stack)")
    return StreamOptions(
        topics=topics,
        pattern=pattern,
        starting_default=default,
        starting_offsets=per_topic,
        starting_timestamp=_optional_timestamp("startingTimestamp", given.get("startingTimestamp")),
        max_offsets_per_trigger=None if max_offsets is None else _positive_int("maxOffsetsPerTrigger", max_offsets),
        fail_on_data_loss=_boolean("failOnDataLoss", given.get("failOnDataLoss", "true")),
        include_headers=_boolean("includeHeaders", given.get("includeHeaders", "false")),
        read_committed=_isolation(given.get("isolationLevel", "read_uncommitted")),
        max_bytes_per_partition=_positive_int(
            "maxBytesPerPartition", given.get("maxBytesPerPartition", str(DEFAULT_MAX_BYTES_PER_PARTITION))
        ),
        bootstrap_servers=servers,
        aws=aws,
        local_stack=local_stack,
    )


def _starting_offsets(
    text: str, topics: tuple[str, ...], pattern: str | None
) -> tuple[int, dict[str, dict[int, int]]]:
    keyword = text.strip().lower()
    if keyword in ("earliest", "latest"):
        return (EARLIEST if keyword == "earliest" else LATEST), {}
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidOptionError("startingOffsets", f'expected "earliest", "latest" or JSON, got {text!r}: {error}') from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise InvalidOptionError("startingOffsets", 'expected JSON of the form {"<topic>": {"<partition>": <offset>}}')
    per_topic: dict[str, dict[int, int]] = {}
    for topic, partitions in parsed.items():
        if pattern is None and topic not in topics:
            raise InvalidOptionError("startingOffsets", f"names topic {topic!r}, which this stream does not subscribe to")
        if pattern is not None and not re.fullmatch(pattern, topic):
            raise InvalidOptionError("startingOffsets", f"names topic {topic!r}, which {pattern!r} does not match")
        per_topic[topic] = {}
        for key, offset in partitions.items():
            try:
                partition = int(key)
            except ValueError:
                raise InvalidOptionError("startingOffsets", f"partition {key!r} is not an integer") from None
            if partition < 0 or isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise InvalidOptionError("startingOffsets", f"{topic}-{key}: {offset!r} is not an offset, -2 or -1")
            per_topic[topic][partition] = offset
    return LATEST, per_topic


class FloeStreamReader(DataSourceStreamReader):
    """The driver side plans; ``read`` runs in executor tasks (one SegmentRead or TailRead each)."""

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._position: Offsets | None = None  # the end of the last range planned (for maxOffsetsPerTrigger)
        # What latestOffset found, for the partitions() call that Spark makes right after it with
        # that offset as the end: planning a micro-batch then asks DynamoDB and the brokers once.
        self._latest_state: dict[str, dict[int, tuple[int, int, list]]] | None = None

    # driver ------------------------------------------------------------------------------------

    def _topics(self) -> list[str]:
        if self.options.pattern is None:
            return list(self.options.topics)
        pattern = re.compile(self.options.pattern)
        return sorted(t for t in tail.topics_matching(self.options.bootstrap_servers) if pattern.fullmatch(t))

    def _partition_state(self) -> dict[str, dict[int, tuple[int, int, list]]]:
        """Per topic and partition: (earliest, high watermark, tiered segments)."""
        remote.use_local_stack_credentials(self.options.read_options(""))
        state: dict[str, dict[int, tuple[int, int, list]]] = {}
        for topic in self._topics():
            topic_id, count = remote.topic_partitions(self.options.aws, topic)
            remote_logs = remote.committed_segments(self.options.aws, topic_id, range(count))
            bounds = tail.broker_bounds(self.options.bootstrap_servers, topic, range(count),
                                        read_committed=self.options.read_committed)
            state[topic] = {}
            for partition in range(count):
                tiered, log_start = remote_logs[partition].readable, remote_logs[partition].log_start_offset
                earliest = (tiered_bounds(tiered, log_start)[0] if tiered
                            else max(bounds[partition].log_start, log_start))
                latest = max(bounds[partition].high_watermark, tiered_bounds(tiered)[1])
                state[topic][partition] = (earliest, latest, tiered)
        return state

    def initialOffset(self) -> Offsets:  # noqa: N802 (Spark's name)
        prepare_python_worker()
        options = self.options
        state = self._partition_state()
        offsets: Offsets = {}
        for topic, partitions in state.items():
            offsets[topic] = {}
            for partition, (earliest, latest, tiered) in partitions.items():
                if options.starting_timestamp is not None:
                    found = remote.find_offset_for_timestamp(options.aws, tiered, options.starting_timestamp,
                                                             min_offset=earliest)
                    if found is None:
                        found = tail.broker_offsets_for_timestamp(
                            options.bootstrap_servers, topic, [partition], options.starting_timestamp
                        )[partition]
                    offset = latest if found is None else found
                else:
                    wanted = options.starting_offsets.get(topic, {}).get(partition, options.starting_default)
                    offset = earliest if wanted == EARLIEST else latest if wanted == LATEST else wanted
                offsets[topic][str(partition)] = offset
        self._position = offsets
        return offsets

    def latestOffset(self) -> Offsets:  # noqa: N802 (Spark's name)
        prepare_python_worker()
        state = self._latest_state = self._partition_state()
        latest: Offsets = {
            topic: {str(p): bounds[1] for p, bounds in partitions.items()} for topic, partitions in state.items()
        }
        limit = self.options.max_offsets_per_trigger
        if limit is None or self._position is None:
            return latest
        return rate_limited(self._position, latest, state, limit)

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        prepare_python_worker()
        self._position = end
        state, self._latest_state = self._latest_state, None
        if state is None:  # a restart re-running a logged batch: no latestOffset came first
            state = self._partition_state()
        reads: list[InputPartition] = []
        for topic, partitions in end.items():
            load_indexes = functools.cache(functools.partial(remote.read_indexes, self.options.aws))
            for key, stop in sorted(partitions.items(), key=lambda item: int(item[0])):
                partition = int(key)
                earliest, latest, tiered = state.get(topic, {}).get(partition, (0, 0, []))
                begin = start.get(topic, {}).get(key, earliest)
                begin, stop = self._check_range(topic, partition, begin, stop, earliest, latest)
                if stop <= begin:
                    continue
                offsets = OffsetRange(partition, begin, stop)
                reads += plan_segment_reads(topic, offsets, tiered, self.options.max_bytes_per_partition, load_indexes,
                                            read_committed=self.options.read_committed)
                tiered_end = tiered_bounds(tiered)[1] if tiered else begin
                reads += tail.tail_reads(topic, {partition: (max(begin, tiered_end), stop)})
        for topic, partitions in start.items():
            for key, offset in partitions.items():
                if key not in end.get(topic, {}):
                    self._data_loss(topic, int(key), offset, "the partition is gone (its topic was deleted)")
        return reads

    def _check_range(self, topic: str, partition: int, begin: int, stop: int, earliest: int,
                     latest: int) -> tuple[int, int]:
        if begin > min(stop, latest):
            # Past the log's end: the log was truncated or the topic recreated. Skipping leaves the
            # range empty; the next micro-batch starts at this one's end, where the log is now.
            self._data_loss(topic, partition, begin, f"the log now ends at {latest} (it was truncated or recreated)")
            return stop, stop
        if begin < earliest:
            self._data_loss(topic, partition, begin, f"the log now starts at {earliest} (retention deleted it)")
            begin = earliest
        if stop > latest:
            self._data_loss(topic, partition, stop, f"the log now ends at {latest} (it was truncated or recreated)")
            stop = latest
        return begin, max(begin, stop)

    def _data_loss(self, topic: str, partition: int, expected: int, reason: str) -> None:
        error = DataLossError(topic=topic, partition=partition, expected=expected, reason=reason)
        if self.options.fail_on_data_loss:
            raise error
        LOG.warning("%s (skipped: failOnDataLoss=false)", error)

    def commit(self, end: Offsets) -> None:
        """Nothing to release: offsets live in Spark's checkpoint, not on the brokers."""

    # executors ---------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        prepare_python_worker()
        if isinstance(partition, tail.TailRead):
            yield from tail.read_tail(self.options.bootstrap_servers, partition, self.options.include_headers,
                                      read_committed=self.options.read_committed)
        elif isinstance(partition, SegmentRead):
            try:
                yield from read_segment(self.options.read_options(partition.topic), partition)
            except SegmentGoneError as error:
                # The object is missing before any of its rows was returned (the GET fails first).
                self._data_loss(partition.topic, partition.partition, partition.start_offset,
                                f"offsets {partition.start_offset}-{partition.end_offset - 1} are in {error.object_key}, "
                                "which is gone from S3")


def rate_limited(position: Offsets, latest: Offsets, state: Mapping[str, Mapping[int, tuple]], limit: int) -> Offsets:
    """``latest`` cut so that at most about ``limit`` offsets separate it from ``position``, shared out
    in proportion to what each partition has waiting (Spark's Kafka source's rule)."""
    begins = {
        (topic, key): position.get(topic, {}).get(key, state[topic][int(key)][0])
        for topic, partitions in latest.items()
        for key in partitions
    }
    sizes = {tp: max(0, latest[tp[0]][tp[1]] - begin) for tp, begin in begins.items()}
    total = sum(sizes.values())
    if total <= limit:
        return latest
    capped: Offsets = {topic: dict(partitions) for topic, partitions in latest.items()}
    for (topic, key), size in sizes.items():
        share = limit * (size / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        capped[topic][key] = min(latest[topic][key], begins[(topic, key)] + step)
    return capped
