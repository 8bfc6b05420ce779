"""Spark on Floe: the ``floe`` Python data source that reads tiered segments from S3, example jobs, and
EMR Serverless packaging and submission.

``spark.dataSource.register(emr_jobs.FloeDataSource)`` then ``spark.read.format("floe")``.
"""

from emr_jobs.data_source import FloeDataSource, FloeReader

__all__ = ["FloeDataSource", "FloeReader"]
