"""Reading one planned segment byte range of a tiered log from S3 into Arrow batches: the executor
side that the batch reader (``emr_jobs.data_source``) and the stream reader (``emr_jobs.stream``)
share."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from emr_jobs import remote
from emr_jobs.options import ReadOptions
from emr_jobs.planning import SegmentRead
from emr_jobs.python_worker import prepare_python_worker


def read_segment(options: ReadOptions, partition: SegmentRead) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one planned segment byte range, read from S3."""
    # Imported here, in the executor task: see `emr_jobs.tail.read_tail`.
    from emr_jobs.arrow_records import RecordRange, iter_arrow_batches

    remote.use_local_stack_credentials(options)
    remote.s3_client(options.aws)  # made before the worker's heap is frozen, so frozen with it
    prepare_python_worker()
    records = RecordRange(
        topic=partition.topic,
        partition=partition.partition,
        start_offset=partition.start_offset,
        end_offset=partition.end_offset,
        include_headers=options.include_headers,
        aborted=partition.aborted,
    )
    chunks = remote.read_range(options.aws, partition.log_key, partition.byte_start, partition.byte_end)
    try:
        yield from iter_arrow_batches(chunks, records, object_key=partition.log_key, stream_position=partition.byte_start)
    finally:
        chunks.close()
