"""Spark on Floe: the ``floe`` Python data source (tiered segments from S3, the tail from the brokers),
its stream reader and sink, example jobs, and EMR Serverless packaging and submission.

``spark.dataSource.register(emr_jobs.FloeDataSource)`` then ``spark.read.format("floe")``,
``spark.readStream.format("floe")``, ``df.write.format("floe")`` or ``df.writeStream.format("floe")``.
"""

from emr_jobs.data_source import FloeDataSource, FloeReader

__all__ = ["FloeDataSource", "FloeReader"]
