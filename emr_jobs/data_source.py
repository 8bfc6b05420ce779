"""The ``floe`` Spark data source: read a topic's tiered segments from S3 as a DataFrame.

Register it once per session and read like Spark's Kafka source::

    spark.dataSource.register(FloeDataSource)
    df = spark.read.format("floe").option("topic", "events").option("stack", ".floe/local").load()

Tiered data (segments whose manifest rows are COPY_FINISHED) is read from S3: the driver plans
from DynamoDB (topic, manifest) and the small indexes objects; each executor task range-GETs one
segment or byte range and decodes it to Arrow (``emr_jobs.arrow_records``). When bootstrap servers
are known (``kafka.bootstrap.servers`` or the local stack's), "latest" is the high watermark and the
offsets past the tiered end are fetched from each partition's leader by one task per partition
(``emr_jobs.tail``); with ``tieredOnly=true``, or no bootstrap servers, no broker is contacted.
The same reader serves streams: ``emr_jobs.stream`` holds ``spark.readStream.format("floe")``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from emr_jobs import remote, tail
from emr_jobs.errors import InvalidOptionError
from emr_jobs.options import ReadOptions, parse_options
from emr_jobs.planning import (
    SegmentRead,
    check_partitions,
    plan_segment_reads,
    resolve_offsets,
    tiered_bounds,
)
from emr_jobs.python_worker import prepare_python_worker
from emr_jobs.schema import kafka_schema
from emr_jobs.segment_reads import read_segment
from tiered_storage.indexes import SegmentIndexes
from tiered_storage.manifest import RemoteSegment


class FloeDataSource(DataSource):
    """``spark.read.format("floe")``: options as in ``emr_jobs.options``, schema as Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return "floe"

    def schema(self) -> StructType:
        include_headers = {name.lower(): value for name, value in self.options.items()}.get("includeheaders", "false")
        return kafka_schema(include_headers.strip().lower() == "true")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's name)
        from emr_jobs.stream import FloeStreamReader, parse_stream_options

        options = parse_stream_options(self.options)
        _check_schema(schema, options.include_headers)
        return FloeStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from emr_jobs.sink import FloeWriter, parse_sink_options

        return FloeWriter(parse_sink_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 (Spark's name)
        from emr_jobs.sink import FloeStreamWriter, parse_sink_options

        return FloeStreamWriter(parse_sink_options(self.options, schema, streaming=True))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_options(self.options)
        _check_schema(schema, options.include_headers)
        return FloeReader(options)


def _check_schema(schema: StructType, include_headers: bool) -> None:
    expected = kafka_schema(include_headers)
    if schema != expected:
        raise InvalidOptionError(
            "schema", f"the floe source has the fixed schema {expected.simpleString()}, not {schema.simpleString()}"
        )


class FloeReader(DataSourceReader):
    """Plans input partitions on the driver and reads one of them per task; holds only parsed options."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        prepare_python_worker()
        options = self.options
        remote.use_local_stack_credentials(options)
        settings = options.aws
        topic_id, num_partitions = remote.topic_partitions(settings, options.topic)
        check_partitions(options, num_partitions)
        remote_logs = remote.committed_segments(settings, topic_id, range(num_partitions))
        all_segments = {partition: log.readable for partition, log in remote_logs.items()}
        # A timestamp lookup and the byte-range cuts may both need a segment's indexes object: fetch it once.
        load_indexes = functools.cache(functools.partial(remote.read_indexes, settings))
        servers = options.bootstrap_servers
        bounds = tail.broker_bounds(servers, options.topic, sorted(all_segments),
                                    read_committed=options.read_committed) if servers else {}
        reads: list[InputPartition] = []
        for partition, segments in all_segments.items():
            log_start = remote_logs[partition].log_start_offset
            log_bounds = None
            if servers:
                log_bounds = _log_bounds(segments, bounds[partition], log_start)
            offsets = resolve_offsets(
                options,
                partition,
                segments,
                functools.partial(self._offset_for_timestamp, segments, load_indexes, partition, log_start),
                log_bounds,
                log_start,
            )
            reads += plan_segment_reads(options.topic, offsets, segments, options.max_bytes_per_partition, load_indexes,
                                        read_committed=options.read_committed)
            if servers:
                tiered_end = tiered_bounds(segments)[1] if segments else offsets.start_offset
                start = max(offsets.start_offset, tiered_end)
                reads += tail.tail_reads(options.topic, {partition: (start, offsets.end_offset)})
        return reads

    def _offset_for_timestamp(
        self,
        segments: list[RemoteSegment],
        load_indexes: Callable[[RemoteSegment], SegmentIndexes],
        partition: int,
        log_start: int,
        timestamp_ms: int,
    ) -> int | None:
        """The first offset at or after ``timestamp_ms`` (and the log start): from the tiered data, else
        (records only on broker disks) from the partition's leader when the tail is read."""
        found = remote.find_offset_for_timestamp(self.options.aws, segments, timestamp_ms, load_indexes=load_indexes,
                                                 min_offset=log_start)
        if found is None and self.options.bootstrap_servers:
            servers = self.options.bootstrap_servers
            found = tail.broker_offsets_for_timestamp(servers, self.options.topic, [partition], timestamp_ms)[partition]
        return found

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, tail.TailRead):
            prepare_python_worker()
            assert self.options.bootstrap_servers is not None  # a TailRead is only planned with them
            yield from tail.read_tail(self.options.bootstrap_servers, partition, self.options.include_headers,
                                      read_committed=self.options.read_committed)
            return
        if not isinstance(partition, SegmentRead):
            return  # Spark hands one None partition to a read that planned none
        yield from read_segment(self.options, partition)


def _log_bounds(segments: list[RemoteSegment], bounds: tail.BrokerBounds, log_start: int) -> tuple[int, int]:
    """(earliest, latest) of a partition read to its head: tiered start (log start when nothing is
    tiered), never below the log start DeleteRecords set, and the high watermark."""
    earliest = tiered_bounds(segments, log_start)[0] if segments else max(bounds.log_start, log_start)
    return earliest, max(bounds.high_watermark, tiered_bounds(segments)[1])


