"""Package Floe for EMR Serverless and submit Spark jobs that read tiered topics.

Three steps, each a subcommand::

    python -m emr_jobs.submit package --output dist/floe-environment.tar.gz
    python -m emr_jobs.submit create-application --name floe-spark
    python -m emr_jobs.submit run --application-id <id> --execution-role-arn <arn> \\
        --staging s3://my-artifacts/floe --archive dist/floe-environment.tar.gz \\
        -- --topic clicks --bucket my-floe-bucket --table-prefix floe- --output s3://my-lake/clicks

``package`` builds a fresh virtual environment holding this project and what its Spark reader
needs at run time (the project's own dependencies, pyarrow, numpy and numba; not pyspark, which EMR
provides) and packs it with venv-pack into a relocatable tar.gz. Build it with the Python version
and on the platform (Amazon Linux 2023, same CPU architecture) of the EMR Serverless workers.
``create-application`` creates a Spark application on release ``emr-spark-8.0.0`` (Spark 4.0, the
first with Python data sources). ``run`` uploads the archive and the job's entry script under the
staging prefix and calls ``start-job-run`` with ``spark.archives=<archive>#environment`` and
PYSPARK_PYTHON pointing at ``./environment/bin/python`` for the driver and the executors; the
arguments after ``--`` go to the job (``emr_jobs.jobs.topic_to_parquet`` by default). ``run --mode
streaming`` starts a streaming job run (for ``emr_jobs.jobs.stream_to_parquet`` or ``stream_counts``),
which EMR Serverless keeps running and restarts after a failure; the query resumes from its checkpoint.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import boto3

RELEASE_LABEL = "emr-spark-8.0.0"
ENVIRONMENT_ALIAS = "environment"
ENVIRONMENT_PYTHON = f"./{ENVIRONMENT_ALIAS}/bin/python"
ARCHIVE_NAME = "floe-environment.tar.gz"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ENTRY_POINT = Path(__file__).resolve().parent / "jobs" / "topic_to_parquet.py"
_NOT_SOURCES = (".*", "build", "dist", "*.egg-info", "__pycache__", "tests", "bench", "spark-warehouse")
# Of the spark extra, what executors need besides the project's own dependencies.
RUNTIME_EXTRAS = ("pyarrow", "numpy", "numba")


class SubmitError(RuntimeError):
    """Packaging or submission failed; the message says which step and why."""


def runtime_requirements(pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> list[str]:
    """The requirement strings of the spark extra that executors need (RUNTIME_EXTRAS), from pyproject.toml."""
    extra = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["spark"]
    wanted = []
    for requirement in extra:
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()
        if name in RUNTIME_EXTRAS:
            wanted.append(requirement)
    missing = set(RUNTIME_EXTRAS) - {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].strip().lower() for r in wanted}
    if missing:
        raise SubmitError(f"the spark extra of {pyproject} does not list {sorted(missing)}")
    return wanted


def package(
    output: Path, *, python: str = sys.executable, project: Path = PROJECT_ROOT, with_dependencies: bool = True
) -> Path:
    """Build the environment archive at ``output`` and return its path.

    ``with_dependencies=False`` installs the project alone (no third-party packages): a small archive
    for checking the packaging itself, not one a job can run with.
    """
    import venv_pack

    output = Path(output).resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="floe-environment-") as scratch:
        wheel = _build_wheel(project, Path(scratch) / "wheel")
        environment = Path(scratch) / "environment"
        _run([python, "-m", "venv", "--copies", str(environment)], "create the virtual environment")
        pip = [str(environment / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        if with_dependencies:
            _run([*pip, str(wheel), *runtime_requirements(project / "pyproject.toml")], "install Floe and its dependencies")
        else:
            _run([*pip, "--no-deps", str(wheel)], "install Floe")
        venv_pack.pack(prefix=str(environment), output=str(output), force=True)
    return output


def _build_wheel(project: Path, directory: Path) -> Path:
    """Floe's wheel (pure Python), built by this interpreter from a copy of the sources (setuptools
    builds in the source tree, and must neither litter the checkout nor reuse a stale build there):
    with the build tools this interpreter has when it has them, else in pip's isolated build
    environment (which fetches them from the package index)."""
    sources = directory / "sources"
    shutil.copytree(project, sources, ignore=shutil.ignore_patterns(*_NOT_SOURCES))
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(directory)]
    if importlib.util.find_spec("setuptools") and importlib.util.find_spec("wheel"):
        command.append("--no-build-isolation")
    _run([*command, str(sources)], "build Floe's wheel")
    return next(directory.glob("floe-*.whl"))


def _run(command: Sequence[str], step: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SubmitError(f"could not {step}: {' '.join(command)} exited {result.returncode}: {result.stderr[-2000:]}")


def spark_submit_parameters(archive_uri: str, conf: Mapping[str, str] | None = None) -> str:
    """The sparkSubmitParameters that unpack the archive as ./environment and run Python from it."""
    settings = {
        "spark.archives": f"{archive_uri}#{ENVIRONMENT_ALIAS}",
        "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON": ENVIRONMENT_PYTHON,
        "spark.emr-serverless.driverEnv.PYSPARK_PYTHON": ENVIRONMENT_PYTHON,
        "spark.executorEnv.PYSPARK_PYTHON": ENVIRONMENT_PYTHON,
        **(conf or {}),
    }
    return " ".join(f"--conf {name}={value}" for name, value in settings.items())


def job_run_request(
    *,
    application_id: str,
    execution_role_arn: str,
    entry_point_uri: str,
    archive_uri: str,
    arguments: Sequence[str],
    name: str,
    log_uri: str | None = None,
    conf: Mapping[str, str] | None = None,
    streaming: bool = False,
) -> dict[str, Any]:
    """The keyword arguments of ``emr-serverless start_job_run`` for one job; ``streaming`` runs it as
    an EMR Serverless streaming job (mode STREAMING: no execution timeout, restarted on failure)."""
    request: dict[str, Any] = {
        "applicationId": application_id,
        "executionRoleArn": execution_role_arn,
        "name": name,
        "clientToken": str(uuid.uuid4()),
        "jobDriver": {
            "sparkSubmit": {
                "entryPoint": entry_point_uri,
                "entryPointArguments": list(arguments),
                "sparkSubmitParameters": spark_submit_parameters(archive_uri, conf),
            }
        },
    }
    if streaming:
        request["mode"] = "STREAMING"
        request["executionTimeoutMinutes"] = 0
    if log_uri is not None:
        request["configurationOverrides"] = {"monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": log_uri}}}
    return request


def create_application(client: Any, name: str) -> str:
    """Create a Spark application on RELEASE_LABEL; return its id."""
    response = client.create_application(name=name, releaseLabel=RELEASE_LABEL, type="SPARK")
    return response["applicationId"]


def split_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, key) of an s3:// URI; SubmitError for anything else."""
    match = re.fullmatch(r"s3://([^/]+)/?(.*)", uri)
    if match is None:
        raise SubmitError(f"{uri!r} is not an s3://bucket/prefix URI")
    return match.group(1), match.group(2).rstrip("/")


def submit(
    *,
    emr: Any,
    s3: Any,
    application_id: str,
    execution_role_arn: str,
    staging: str,
    archive: str,
    entry_point: Path,
    arguments: Sequence[str],
    name: str,
    conf: Mapping[str, str] | None = None,
    streaming: bool = False,
) -> str:
    """Upload the archive (unless it is an s3:// URI already) and the entry script, start the job; return its run id."""
    bucket, prefix = split_s3_uri(staging)
    base = f"{prefix}/" if prefix else ""
    if archive.startswith("s3://"):
        archive_uri = archive
    else:
        archive_key = f"{base}{ARCHIVE_NAME}"
        s3.upload_file(archive, bucket, archive_key)
        archive_uri = f"s3://{bucket}/{archive_key}"
    entry_key = f"{base}jobs/{entry_point.name}"
    s3.upload_file(str(entry_point), bucket, entry_key)
    request = job_run_request(
        application_id=application_id,
        execution_role_arn=execution_role_arn,
        entry_point_uri=f"s3://{bucket}/{entry_key}",
        archive_uri=archive_uri,
        arguments=arguments,
        name=name,
        log_uri=f"s3://{bucket}/{base}logs/",
        conf=conf,
        streaming=streaming,
    )
    return emr.start_job_run(**request)["jobRunId"]


def _clients(args: argparse.Namespace) -> tuple[Any, Any]:
    kwargs = {"region_name": args.region} if args.region else {}
    if args.endpoint_url:
        kwargs["endpoint_url"] = args.endpoint_url
    return boto3.client("emr-serverless", **kwargs), boto3.client("s3", **kwargs)


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    job_arguments: list[str] = []
    if "--" in argv:
        job_arguments = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    parser = argparse.ArgumentParser(prog="python -m emr_jobs.submit", description=__doc__.splitlines()[0])
    parser.add_argument("--region")
    parser.add_argument("--endpoint-url", help="an S3 and EMR Serverless endpoint other than AWS's")
    commands = parser.add_subparsers(dest="command", required=True)
    pack = commands.add_parser("package", help="build the environment archive")
    pack.add_argument("--output", type=Path, default=Path("dist") / ARCHIVE_NAME)
    pack.add_argument("--python", default=sys.executable, help="interpreter to build the environment with")
    pack.add_argument("--no-deps", action="store_true", help="the project alone, to check the packaging")
    application = commands.add_parser("create-application", help=f"create a Spark application on {RELEASE_LABEL}")
    application.add_argument("--name", default="floe-spark")
    run = commands.add_parser("run", help="upload and start a job run; job arguments follow --")
    run.add_argument("--application-id", required=True)
    run.add_argument("--execution-role-arn", required=True)
    run.add_argument("--staging", required=True, help="s3:// prefix for the archive, entry script and logs")
    run.add_argument("--archive", default=str(Path("dist") / ARCHIVE_NAME), help="local archive or its s3:// URI")
    run.add_argument("--entry-point", type=Path, default=DEFAULT_ENTRY_POINT)
    run.add_argument("--name", default="floe-topic-to-parquet")
    run.add_argument("--mode", choices=("batch", "streaming"), default="batch",
                     help="streaming: an EMR Serverless streaming job (e.g. emr_jobs/jobs/stream_to_parquet.py)")
    run.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="more Spark settings")
    args = parser.parse_args(argv)

    if args.command == "package":
        print(package(args.output, python=args.python, with_dependencies=not args.no_deps))
        return
    emr, s3 = _clients(args)
    if args.command == "create-application":
        print(create_application(emr, args.name))
        return
    if any("=" not in item for item in args.conf):
        parser.error("--conf takes KEY=VALUE")
    conf = dict(item.split("=", 1) for item in args.conf)
    run_id = submit(
        emr=emr,
        s3=s3,
        application_id=args.application_id,
        execution_role_arn=args.execution_role_arn,
        staging=args.staging,
        archive=args.archive,
        entry_point=args.entry_point,
        arguments=job_arguments,
        name=args.name,
        conf=conf,
        streaming=args.mode == "streaming",
    )
    print(run_id)


if __name__ == "__main__":
    try:
        main()
    except SubmitError as error:
        sys.exit(f"error: {error}")
