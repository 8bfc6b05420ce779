"""The per-task preparation of Spark's Python workers: done inside Spark tasks, and imports keep working."""

from __future__ import annotations

import gc
import sys
import zipimport
from collections.abc import Iterator

from pyspark.sql import SparkSession

from emr_jobs.python_worker import prepare_python_worker


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
    frozen_before, importers_before = gc.get_freeze_count(), _zipimporters()
    prepare_python_worker()
    assert (gc.get_freeze_count(), _zipimporters()) == (frozen_before, importers_before)


def test_inside_a_spark_task_the_heap_is_frozen_no_zipimporter_is_cached_and_imports_still_work(
    spark: SparkSession,
) -> None:
    results = spark.sparkContext.parallelize([0], 1).mapPartitions(_prepare_in_task).collect()
    assert results == [(True, 0, True)]
