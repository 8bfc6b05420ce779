"""Remove the per-task costs that Spark's Python worker pays for whatever it has imported.

A Spark Python worker is reused across tasks, and around every task it does two things whose cost
grows with the worker's heap and import state, not with the task's rows. After each task the worker
daemon runs a full ``gc.collect()``, which walks every container object alive in the process: with
pyarrow, numpy and a botocore client imported that is over 100,000 objects and 100-150 ms. Before
each task ``setup_spark_files`` calls ``importlib.invalidate_caches()``, which makes every
``zipimport.zipimporter`` in ``sys.path_importer_cache`` re-read its archive's central directory in
pure Python: Spark puts ``pyspark.zip`` (1,220 entries), the py4j archive and the spark-core jar on
the workers' ``sys.path``, and every package directory imported from an archive has a zipimporter of
its own, so one call re-reads pyspark.zip a dozen times and the jar once (60-140 ms). Measured inside
Spark, these two made up most of the floe source's Python worker time beyond decoding.
The planner, the Python worker that runs a data source's ``partitions()`` on the driver for every
scan, is a reused worker too, with the same two costs around each call (in it, the re-read archives
were about 65 ms of every scan's planning). ``prepare_python_worker``, called at the start of every
task and of every planning call (inside Spark's Python workers only), removes both:

- ``gc.freeze()`` moves every object alive at that point (imported modules, the S3 client) to the
  permanent generation, which collections skip; objects made later are collected as before. At a
  task's start the daemon's collection after the previous task has just run, so what is frozen is
  live state, not garbage.
- It drops the zipimporters from ``sys.path_importer_cache`` (the import system's cache, whose
  entries may be removed at any time). A later import through an archive makes a new zipimporter
  from the directory zipimport already holds in memory, so nothing is re-read; archives Spark adds
  for a job (``addPyFile``) are new paths, found as before. What is lost is noticing an archive
  rewritten in place under the same path, which Spark does not do.
"""

from __future__ import annotations

import gc
import sys
import zipimport

from pyspark import TaskContext


def prepare_python_worker() -> None:
    """Make this Spark Python worker's per-task housekeeping cheap; does nothing outside Spark's workers."""
    if not in_spark_python_worker():
        return
    for path, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del sys.path_importer_cache[path]
    gc.freeze()


def in_spark_python_worker() -> bool:
    """Whether this process is one of Spark's Python workers: running a task, or started by Spark as
    ``python -m pyspark.daemon ...`` or ``python -m pyspark.<worker module>`` (the planner among them)."""
    if TaskContext.get() is not None:
        return True
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return main_spec is not None and main_spec.name.startswith("pyspark.")
