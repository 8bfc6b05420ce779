"""EMR Serverless packaging and submission: the archive's contents, and the requests sent to AWS.

The archive is built for real (project only, no third-party packages, to stay small and offline).
start-job-run goes to moto's EMR Serverless; create-application is checked with botocore's
Stubber instead, because moto only accepts release labels of the "emr-X.Y.0" form and not
"emr-spark-8.0.0".
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from broker_core.aws import AwsSettings
from emr_jobs.submit import (
    ENVIRONMENT_PYTHON,
    RELEASE_LABEL,
    SubmitError,
    create_application,
    job_run_request,
    package,
    runtime_requirements,
    split_s3_uri,
    submit,
)

MOTO_ACCOUNT_ROLE = "arn:aws:iam::123456789012:role/floe-emr-job"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return package(tmp_path_factory.mktemp("dist") / "floe-environment.tar.gz", with_dependencies=False)


def test_the_archive_is_a_relocatable_environment_holding_floe(archive: Path) -> None:
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    assert {"bin/python", "bin/activate", "pyvenv.cfg"} <= names
    for module in ("emr_jobs/data_source.py", "emr_jobs/jobs/topic_to_parquet.py", "broker_core/records/batch.py",
                   "tiered_storage/manifest.py", "tiered_storage/indexes.py"):
        assert f"{site}/{module}" in names
    assert not any(name.startswith(f"{site}/tests/") or "/.venv/" in name for name in names)


def test_the_archive_unpacks_into_a_python_whose_own_site_packages_hold_floe(archive: Path, tmp_path: Path) -> None:
    environment = tmp_path / "environment"
    with tarfile.open(archive) as tar:
        tar.extractall(environment, filter="tar")
    probe = (
        "import importlib.util, sys; print(sys.prefix);"
        "[print(importlib.util.find_spec(name).origin) for name in ('emr_jobs', 'broker_core', 'tiered_storage')]"
    )
    result = subprocess.run(
        [str(environment / "bin" / "python"), "-c", probe], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    prefix, *origins = result.stdout.split()
    assert Path(prefix) == environment
    assert all(Path(origin).is_relative_to(environment / "lib") for origin in origins)


def test_executors_get_the_readers_runtime_dependencies_but_not_pyspark() -> None:
    names = [r.split(">")[0].split("<")[0].split("=")[0] for r in runtime_requirements()]
    assert names == ["pyarrow", "numpy", "numba"]


def test_a_job_run_uploads_its_files_and_asks_for_the_environment(aws_settings: AwsSettings, tmp_path: Path) -> None:
    kwargs = aws_settings.boto3_kwargs()
    s3, emr = boto3.client("s3", **kwargs), boto3.client("emr-serverless", **kwargs)
    s3.create_bucket(Bucket=aws_settings.bucket)
    application_id = emr.create_application(name="floe", releaseLabel="emr-7.0.0", type="SPARK")["applicationId"]
    local_archive = tmp_path / "floe-environment.tar.gz"
    local_archive.write_bytes(b"archive bytes")
    entry_point = Path(__file__).resolve().parents[2] / "emr_jobs" / "jobs" / "topic_to_parquet.py"
    job_arguments = ["--topic", "clicks", "--bucket", "floe-prod", "--output", "s3://lake/clicks"]

    run_id = submit(
        emr=emr,
        s3=s3,
        application_id=application_id,
        execution_role_arn=MOTO_ACCOUNT_ROLE,
        staging=f"s3://{aws_settings.bucket}/jobs/floe",
        archive=str(local_archive),
        entry_point=entry_point,
        arguments=job_arguments,
        name="clicks-to-parquet",
        conf={"spark.executor.cores": "4"},
    )

    staged = f"s3://{aws_settings.bucket}/jobs/floe"
    uploaded = s3.list_objects_v2(Bucket=aws_settings.bucket, Prefix="jobs/floe/")["Contents"]
    assert sorted(o["Key"] for o in uploaded) == ["jobs/floe/floe-environment.tar.gz", "jobs/floe/jobs/topic_to_parquet.py"]
    body = s3.get_object(Bucket=aws_settings.bucket, Key="jobs/floe/jobs/topic_to_parquet.py")["Body"].read()
    assert body == entry_point.read_bytes()
    job = emr.get_job_run(applicationId=application_id, jobRunId=run_id)["jobRun"]
    assert job["executionRole"] == MOTO_ACCOUNT_ROLE
    assert job["name"] == "clicks-to-parquet"
    driver = job["jobDriver"]["sparkSubmit"]
    assert driver["entryPoint"] == f"{staged}/jobs/topic_to_parquet.py"
    assert driver["entryPointArguments"] == job_arguments
    parameters = shlex.split(driver["sparkSubmitParameters"])
    settings = dict(parameters[i + 1].split("=", 1) for i in range(0, len(parameters), 2) if parameters[i] == "--conf")
    assert settings == {
        "spark.archives": f"{staged}/floe-environment.tar.gz#environment",
        "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON": ENVIRONMENT_PYTHON,
        "spark.emr-serverless.driverEnv.PYSPARK_PYTHON": ENVIRONMENT_PYTHON,
        "spark.executorEnv.PYSPARK_PYTHON": ENVIRONMENT_PYTHON,
        "spark.executor.cores": "4",
    }
    assert ENVIRONMENT_PYTHON == "./environment/bin/python"
    logs = job["configurationOverrides"]["monitoringConfiguration"]["s3MonitoringConfiguration"]["logUri"]
    assert logs == f"{staged}/logs/"


def test_an_archive_already_in_s3_is_not_uploaded_again(aws_settings: AwsSettings, tmp_path: Path) -> None:
    kwargs = aws_settings.boto3_kwargs()
    s3, emr = boto3.client("s3", **kwargs), boto3.client("emr-serverless", **kwargs)
    s3.create_bucket(Bucket=aws_settings.bucket)
    application_id = emr.create_application(name="floe", releaseLabel="emr-7.0.0", type="SPARK")["applicationId"]
    entry_point = tmp_path / "job.py"
    entry_point.write_text("print('hello')\n")
    run_id = submit(
        emr=emr, s3=s3, application_id=application_id, execution_role_arn=MOTO_ACCOUNT_ROLE,
        staging=f"s3://{aws_settings.bucket}", archive="s3://artifacts/floe-environment.tar.gz",
        entry_point=entry_point, arguments=[], name="hello",
    )
    driver = emr.get_job_run(applicationId=application_id, jobRunId=run_id)["jobRun"]["jobDriver"]["sparkSubmit"]
    assert "spark.archives=s3://artifacts/floe-environment.tar.gz#environment" in driver["sparkSubmitParameters"]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=aws_settings.bucket)["Contents"]] == ["jobs/job.py"]


def test_the_application_is_created_on_the_spark_4_release() -> None:
    emr = boto3.client("emr-serverless", region_name="us-east-1")
    with Stubber(emr) as stub:
        stub.add_response(
            "create_application",
            {"applicationId": "00abc", "name": "floe-spark", "arn": "arn:aws:emr-serverless:us-east-1:123456789012:/applications/00abc"},
            {"name": "floe-spark", "releaseLabel": "emr-spark-8.0.0", "type": "SPARK"},
        )
        assert create_application(emr, "floe-spark") == "00abc"
    assert RELEASE_LABEL == "emr-spark-8.0.0"


@pytest.mark.parametrize("uri", ["bucket/prefix", "s3:/bucket", "https://bucket.s3.amazonaws.com/x"])
def test_a_staging_location_must_be_an_s3_uri(uri: str) -> None:
    with pytest.raises(SubmitError):
        split_s3_uri(uri)


def test_a_streaming_job_run_asks_emr_serverless_for_streaming_mode() -> None:
    request = job_run_request(
        application_id="00abc", execution_role_arn=MOTO_ACCOUNT_ROLE, entry_point_uri="s3://b/jobs/stream_to_parquet.py",
        archive_uri="s3://b/floe-environment.tar.gz", arguments=["--topic", "clicks"], name="clicks-stream",
        streaming=True,
    )
    emr = boto3.client("emr-serverless", region_name="us-east-1")
    with Stubber(emr) as stub:  # the stub checks the request against the service's API model
        stub.add_response(
            "start_job_run",
            {"applicationId": "00abc", "jobRunId": "00run", "arn": "arn:aws:emr-serverless:us-east-1:123456789012:/applications/00abc/jobruns/00run"},
            request,
        )
        assert emr.start_job_run(**request)["jobRunId"] == "00run"
    assert (request["mode"], request["executionTimeoutMinutes"]) == ("STREAMING", 0)
    batch = job_run_request(
        application_id="00abc", execution_role_arn=MOTO_ACCOUNT_ROLE, entry_point_uri="s3://b/jobs/job.py",
        archive_uri="s3://b/a.tar.gz", arguments=[], name="batch",
    )
    assert "mode" not in batch
