"""Options of the floe source: Kafka-source names and meanings, clear errors for anything else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker_core.aws import AwsSettings
from emr_jobs.errors import InvalidOptionError
from emr_jobs.options import DEFAULT_MAX_BYTES_PER_PARTITION, EARLIEST, LATEST, parse_options

NO_ENV: dict[str, str] = {}


def parse(**options: str):
    return parse_options({"topic": "events", **options}, NO_ENV)


def test_defaults_read_everything_tiered_without_headers() -> None:
    options = parse()
    assert options.starting_offsets.for_partition(0) == EARLIEST
    assert options.ending_offsets.for_partition(0) == LATEST
    assert (options.starting_timestamp, options.ending_timestamp) == (None, None)
    assert options.include_headers is False
    assert options.max_bytes_per_partition == DEFAULT_MAX_BYTES_PER_PARTITION


def test_option_names_are_case_insensitive_as_in_spark() -> None:
    options = parse_options({"TOPIC": "events", "includeheaders": "TRUE"}, NO_ENV)
    assert options.topic == "events" and options.include_headers is True


def test_json_offsets_name_partitions_and_use_minus_two_and_minus_one() -> None:
    options = parse(
        startingOffsets=json.dumps({"events": {"0": 23, "1": -2}}),
        endingOffsets=json.dumps({"events": {"0": 50, "2": -1}}),
    )
    assert [options.starting_offsets.for_partition(p) for p in range(3)] == [23, EARLIEST, EARLIEST]
    assert [options.ending_offsets.for_partition(p) for p in range(3)] == [50, LATEST, LATEST]


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"topic": ""}, "topic"),
        ({"startingOffset": "earliest"}, "startingOffset"),
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
        ({"startingOffsets": '{"events": {"0": -1}}'}, "startingOffsets"),
        ({"endingOffsets": '{"events": {"0": -2}}'}, "endingOffsets"),
        ({"startingOffsets": '{"other": {"0": 1}}'}, "startingOffsets"),
        ({"startingOffsets": '{"events": {"x": 1}}'}, "startingOffsets"),
        ({"startingOffsets": '{"events": {"0": "1"}}'}, "startingOffsets"),
        ({"startingOffsets": '{"events": {"0": -3}}'}, "startingOffsets"),
        ({"startingOffsets": "{not json"}, "startingOffsets"),
        ({"startingTimestamp": "10", "startingOffsets": "earliest"}, "startingTimestamp"),
        ({"endingTimestamp": "10", "endingOffsets": "latest"}, "endingTimestamp"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"startingTimestamp": "20", "endingTimestamp": "10"}, "endingTimestamp"),
        ({"includeHeaders": "yes"}, "includeHeaders"),
        ({"maxBytesPerPartition": "0"}, "maxBytesPerPartition"),
        ({"stack": "x", "bucket": "b"}, "bucket"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, str], option: str) -> None:
    with pytest.raises(InvalidOptionError) as raised:
        parse_options({"topic": "events", **options}, NO_ENV)
    assert raised.value.option == option


def test_explicit_aws_settings_are_laid_over_the_environment() -> None:
    environ = {"AWS_REGION": "eu-west-1", "FLOE_BUCKET": "from-env", "FLOE_TABLE_PREFIX": "env-"}
    options = parse_options({"topic": "events", "bucket": "lake", "tablePrefix": "prod-"}, environ)
    assert options.aws == AwsSettings(endpoint_url=None, region="eu-west-1", bucket="lake", table_prefix="prod-")
    assert options.local_stack is False


def test_stack_option_reads_the_aws_object_of_stack_json(tmp_path: Path) -> None:
    aws = {"endpoint_url": "http://127.0.0.1:5000", "region": "us-east-1", "bucket": "floe-local", "table_prefix": "floe-"}
    (tmp_path / "stack.json").write_text(json.dumps({"bootstrap_servers": "127.0.0.1:9092", "aws": aws}))
    for path in (tmp_path, tmp_path / "stack.json"):
        options = parse(stack=str(path))
        assert options.aws == AwsSettings.from_dict(aws)
        assert options.local_stack is True


def test_a_missing_stack_file_says_to_start_the_stack(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="floe local up"):
        parse(stack=str(tmp_path))
