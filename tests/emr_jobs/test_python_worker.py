"""The per-task preparation of Spark's Python workers: done inside Spark tasks, and imports keep working."""

from __future__ import annotations

import gc
import sys
import zipimport
from collections.abc import Iterator

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from emr_jobs.python_worker import in_spark_python_worker, prepare_python_worker


def _zipimporters() -> int:
    return sum(isinstance(finder, zipimport.zipimporter) for finder in sys.path_importer_cache.values())


def _prepare_in_task(_: Iterator[int]) -> Iterator[tuple[bool, int, bool]]:
    prepare_python_worker()
    frozen = gc.get_freeze_count() > 0
    left = _zipimporters()
    # A module of pyspark not imported yet by the worker still loads from Spark's pyspark.zip.
    import pyspark.sql.observation  # noqa: F401

    yield frozen, left, "pyspark.sql.observation" in sys.modules


def test_outside_a_spark_task_nothing_is_frozen_or_dropped() -> None:
    assert not in_spark_python_worker()
    frozen_before, importers_before = gc.get_freeze_count(), _zipimporters()
    prepare_python_worker()
    assert (gc.get_freeze_count(), _zipimporters()) == (frozen_before, importers_before)


def test_inside_a_spark_task_the_heap_is_frozen_no_zipimporter_is_cached_and_imports_still_work(
    spark: SparkSession,
) -> None:
    results = spark.sparkContext.parallelize([0], 1).mapPartitions(_prepare_in_task).collect()
    assert results == [(True, 0, True)]


class _PlannerProbe(DataSource):
    """Reports, as its one row, what prepare_python_worker did inside Spark's planner worker."""

    @classmethod
    def name(cls) -> str:
        return "planner_probe"

    def schema(self) -> str:
        return "in_worker boolean, frozen boolean, zipimporters_left int"

    def reader(self, schema: StructType) -> DataSourceReader:
        return _PlannerProbeReader()


class _PlannerProbeReader(DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        prepare_python_worker()
        return [InputPartition((in_spark_python_worker(), gc.get_freeze_count() > 0, _zipimporters()))]

    def read(self, partition: InputPartition) -> Iterator[tuple[bool, bool, int]]:
        yield partition.value


def test_the_planner_worker_that_runs_partitions_is_prepared_too(spark: SparkSession) -> None:
    spark.dataSource.register(_PlannerProbe)
    rows = spark.read.format("planner_probe").load().collect()
    assert [tuple(row) for row in rows] == [(True, True, 0)]
