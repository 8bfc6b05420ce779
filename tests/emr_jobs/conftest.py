"""Fixtures of the Spark reader tests: one local Spark session for the whole run, and a prepared cluster."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from broker_core.aws import AwsSettings
from broker_core.local_moto import MotoServer
from emr_jobs import FloeDataSource
from tests.emr_jobs.tiered_log import prepare_cluster


@pytest.fixture(scope="session")
def spark(moto_server: MotoServer) -> Iterator[SparkSession]:
    """A small local session (two cores, no UI) with the floe source registered.

    It depends on the moto server so that the JVM, and the Python workers it starts, inherit the
    dummy AWS credentials the server fixture puts in the environment.
    """
    with pytest.MonkeyPatch.context() as env:
        # Spark starts its Python workers with PYSPARK_PYTHON: make them this interpreter (and its venv).
        env.setenv("PYSPARK_PYTHON", sys.executable)
        env.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
        session = (
            SparkSession.builder.master("local[2]")
            .appName("floe-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "1g")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        session.dataSource.register(FloeDataSource)
        yield session
        session.stop()


@pytest.fixture
def cluster(aws_settings: AwsSettings) -> AwsSettings:
    """Tables, bucket and a registered broker under this test's own table prefix."""
    prepare_cluster(aws_settings)
    return aws_settings


def aws_options(settings: AwsSettings) -> dict[str, str]:
    """The explicit AWS options of the floe source for ``settings``."""
    return {
        "region": settings.region,
        "bucket": settings.bucket,
        "tablePrefix": settings.table_prefix,
        "endpointUrl": settings.endpoint_url or "",
    }
