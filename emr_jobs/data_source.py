"""The ``floe`` Spark data source: read a topic's tiered segments from S3 as a DataFrame.

Register it once per session and read like Spark's Kafka source::

    spark.dataSource.register(FloeDataSource)
    df = spark.read.format("floe").option("topic", "events").option("stack", ".floe/local").load()

Only committed data that the brokers have already tiered (segments whose manifest rows are
COPY_FINISHED) is read: records still only on broker disks are not, and no broker is contacted.
The driver plans from DynamoDB (topic, manifest) and the small indexes objects; each executor task
range-GETs one segment or byte range and decodes it to Arrow (``emr_jobs.arrow_records``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from emr_jobs import remote
from emr_jobs.arrow_records import RecordRange, iter_arrow_batches
from emr_jobs.errors import InvalidOptionError
from emr_jobs.options import ReadOptions, parse_options
from emr_jobs.planning import SegmentRead, check_partitions, plan_segment_reads, resolve_offsets
from emr_jobs.python_worker import prepare_python_worker
from emr_jobs.schema import kafka_schema


class FloeDataSource(DataSource):
    """``spark.read.format("floe")``: options as in ``emr_jobs.options``, schema as Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return "floe"

    def schema(self) -> StructType:
        return kafka_schema(parse_options(self.options).include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_options(self.options)
        expected = kafka_schema(options.include_headers)
        if schema != expected:
            raise InvalidOptionError(
                "schema", f"the floe source has the fixed schema {expected.simpleString()}, not {schema.simpleString()}"
            )
        return FloeReader(options)


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
        all_segments = remote.committed_segments(settings, topic_id, range(num_partitions))
        # A timestamp lookup and the byte-range cuts may both need a segment's indexes object: fetch it once.
        load_indexes = functools.cache(functools.partial(remote.read_indexes, settings))
        reads: list[InputPartition] = []
        for partition, segments in all_segments.items():
            offsets = resolve_offsets(
                options,
                partition,
                segments,
                functools.partial(remote.find_offset_for_timestamp, settings, segments, load_indexes=load_indexes),
            )
            reads += plan_segment_reads(options.topic, offsets, segments, options.max_bytes_per_partition, load_indexes,
                                        read_committed=options.read_committed)
        return reads

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SegmentRead):
            return  # Spark hands one None partition to a read that planned none
        remote.use_local_stack_credentials(self.options)
        remote.s3_client(self.options.aws)  # made before the worker's heap is frozen, so frozen with it
        prepare_python_worker()
        records = RecordRange(
            topic=partition.topic,
            partition=partition.partition,
            start_offset=partition.start_offset,
            end_offset=partition.end_offset,
            include_headers=self.options.include_headers,
            aborted=partition.aborted,
        )
        chunks = remote.read_range(self.options.aws, partition.log_key, partition.byte_start, partition.byte_end)
        try:
            yield from iter_arrow_batches(
                chunks, records, object_key=partition.log_key, stream_position=partition.byte_start
            )
        finally:
            chunks.close()
