"""The options of the ``floe`` data source, parsed and checked before any AWS call is made.

Names and meanings follow Spark's Kafka source wherever the two overlap, so a job moves between
``format("kafka")`` and ``format("floe")`` by changing little more than the format name:

    topic                 the topic to read (required; one topic per read)
    startingOffsets       "earliest" (default) or JSON {"<topic>": {"<partition>": <offset>}}, -2 = earliest
    endingOffsets         "latest" (default) or JSON as above, -1 = latest
    startingTimestamp     ms since the epoch: start each partition at its first record with timestamp >= it
    endingTimestamp       ms since the epoch: stop each partition before its first record with timestamp >= it
    includeHeaders        "true" adds the headers column (default "false")
    isolationLevel        "read_uncommitted" (default, as Spark's Kafka source leaves kafka.isolation.level)
                          or "read_committed": leave out the records of aborted transactions, known from
                          the transaction section of each segment's indexes object (tiering copies only
                          what lies below the last stable offset, so every transaction read has ended);
                          the tail is then read up to the last stable offset, "latest" is the LSO
    maxBytesPerPartition  split segments into index-aligned byte ranges of at most this many bytes
                          (default 134217728, Spark's spark.sql.files.maxPartitionBytes; a range can
                          only be cut at an index entry, so one index interval plus one batch is the floor)
    kafka.bootstrap.servers
                          brokers to read the tail from (offsets past the tiered end, up to the high
                          watermark); with ``stack``, the stack's brokers are the default
    tieredOnly            "true" reads only tiered data from S3 and never contacts a broker (default "false";
                          also the behaviour when no bootstrap servers are known)
    stack                 path to a local stack's stack.json (or its directory): AWS settings for `floe local up`
    region, bucket, tablePrefix, endpointUrl
                          explicit AWS settings (EMR); unset ones come from the environment as in
                          broker_core.aws.AwsSettings.from_env

With bootstrap servers, "earliest" is the base offset of a partition's first committed remote
segment (its log start offset when nothing is tiered) and "latest" its high watermark; the part of
each range below the tiered end is read from S3 and the rest from the partition's leader. Without
(or with tieredOnly), "earliest" and "latest" are the bounds of the tiered data: the base offset of a
partition's first committed remote segment and one past the last offset of its last one. As in Spark's Kafka source
for batch reads, startingOffsets cannot be "latest" and endingOffsets cannot be "earliest"; a
partition the JSON does not name starts at earliest and ends at latest. A timestamp option and the
offsets option for the same end cannot both be given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.aws import AwsSettings, InvalidAwsSettingsError
from broker_core.local_stack import STACK_FILE
from emr_jobs.errors import InvalidOptionError

EARLIEST = -2
LATEST = -1
DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024
LOCAL_STACK_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "floe-local", "AWS_SECRET_ACCESS_KEY": "floe-local"}

_OPTION_NAMES = (
    "topic",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "includeHeaders",
    "isolationLevel",
    "maxBytesPerPartition",
    "kafka.bootstrap.servers",
    "tieredOnly",
    "stack",
    "region",
    "bucket",
    "tablePrefix",
    "endpointUrl",
)
_AWS_OPTIONS = ("region", "bucket", "tablePrefix", "endpointUrl")


@dataclass(frozen=True)
class OffsetBound:
    """One end of the range to read: a default (EARLIEST or LATEST) with per-partition overrides."""

    default: int
    per_partition: Mapping[int, int] = field(default_factory=dict)

    def for_partition(self, partition: int) -> int:
        """The offset, EARLIEST or LATEST for ``partition``."""
        return self.per_partition.get(partition, self.default)


@dataclass(frozen=True)
class ReadOptions:
    """Parsed options; ``starting_timestamp`` / ``ending_timestamp`` replace the offset bound when set."""

    topic: str
    starting_offsets: OffsetBound
    ending_offsets: OffsetBound
    starting_timestamp: int | None
    ending_timestamp: int | None
    include_headers: bool
    max_bytes_per_partition: int
    read_committed: bool
    aws: AwsSettings
    local_stack: bool
    bootstrap_servers: str | None = None  # None: tiered data only, no broker contacted


def parse_options(options: Mapping[str, str], environ: Mapping[str, str] | None = None) -> ReadOptions:
    """Check and parse the data source options (names are case-insensitive, as in Spark)."""
    given = canonical_options(options, _OPTION_NAMES, "the floe source")
    topic = given.get("topic", "")
    if not topic:
        raise InvalidOptionError("topic", "required: the topic to read")
    if "startingTimestamp" in given and "startingOffsets" in given:
        raise InvalidOptionError("startingTimestamp", "give startingTimestamp or startingOffsets, not both")
    if "endingTimestamp" in given and "endingOffsets" in given:
        raise InvalidOptionError("endingTimestamp", "give endingTimestamp or endingOffsets, not both")
    starting = _offset_bound("startingOffsets", given.get("startingOffsets", "earliest"), topic, EARLIEST)
    ending = _offset_bound("endingOffsets", given.get("endingOffsets", "latest"), topic, LATEST)
    starting_timestamp = _optional_timestamp("startingTimestamp", given.get("startingTimestamp"))
    ending_timestamp = _optional_timestamp("endingTimestamp", given.get("endingTimestamp"))
    if starting_timestamp is not None and ending_timestamp is not None and ending_timestamp < starting_timestamp:
        raise InvalidOptionError("endingTimestamp", f"{ending_timestamp} is before startingTimestamp {starting_timestamp}")
    aws, local_stack = _aws_settings(given, environ)
    return ReadOptions(
        topic=topic,
        starting_offsets=starting,
        ending_offsets=ending,
        starting_timestamp=starting_timestamp,
        ending_timestamp=ending_timestamp,
        include_headers=_boolean("includeHeaders", given.get("includeHeaders", "false")),
        read_committed=_isolation(given.get("isolationLevel", "read_uncommitted")),
        max_bytes_per_partition=_positive_int(
            "maxBytesPerPartition", given.get("maxBytesPerPartition", str(DEFAULT_MAX_BYTES_PER_PARTITION))
        ),
        aws=aws,
        local_stack=local_stack,
        bootstrap_servers=bootstrap_servers_option(given),
    )


def bootstrap_servers_option(given: Mapping[str, str]) -> str | None:
    """The brokers to read the tail from: kafka.bootstrap.servers, else the stack's; None with tieredOnly."""
    if _boolean("tieredOnly", given.get("tieredOnly", "false")):
        return None
    servers = given.get("kafka.bootstrap.servers", "").strip()
    if servers:
        return servers
    if "stack" in given:
        return load_stack_bootstrap_servers(given["stack"]) or None
    return None


def canonical_options(options: Mapping[str, str], names: Sequence[str], what: str,
                      ignored: Sequence[str] = ()) -> dict[str, str]:
    """``options`` under their canonical names (Spark's option names are case-insensitive); an
    unknown name raises InvalidOptionError, one of ``ignored`` (lower case) is dropped."""
    canonical = {name.lower(): name for name in names}
    given: dict[str, str] = {}
    for name, value in options.items():
        if name.lower() in ignored:
            continue
        if name.lower() not in canonical:
            raise InvalidOptionError(name, f"unknown option; {what} takes {', '.join(names)}")
        given[canonical[name.lower()]] = value
    return given


def _offset_bound(option: str, text: str, topic: str, default: int) -> OffsetBound:
    keyword = text.strip().lower()
    forbidden = "latest" if default == EARLIEST else "earliest"
    if keyword == forbidden:
        raise InvalidOptionError(option, f'"{forbidden}" is not allowed here (as in Spark\'s Kafka source for batch reads)')
    if keyword in ("earliest", "latest"):
        return OffsetBound(EARLIEST if keyword == "earliest" else LATEST)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidOptionError(option, f'expected "earliest", "latest" or JSON, got {text!r}: {error}') from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise InvalidOptionError(option, 'expected JSON of the form {"<topic>": {"<partition>": <offset>}}')
    unknown = sorted(set(parsed) - {topic})
    if unknown:
        raise InvalidOptionError(option, f"names topics {unknown}; this read is of topic {topic!r}")
    per_partition: dict[int, int] = {}
    forbidden_offset = LATEST if default == EARLIEST else EARLIEST
    for key, offset in parsed.get(topic, {}).items():
        try:
            partition = int(key)
        except ValueError:
            raise InvalidOptionError(option, f"partition {key!r} is not an integer") from None
        if partition < 0:
            raise InvalidOptionError(option, f"partition {partition} is negative")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
            raise InvalidOptionError(option, f"offset {offset!r} of partition {partition} is not an offset, -2 or -1")
        if offset == forbidden_offset:
            raise InvalidOptionError(option, f"{offset} ({forbidden}) is not allowed for partition {partition}")
        per_partition[partition] = offset
    return OffsetBound(default, per_partition)


def _optional_timestamp(option: str, text: str | None) -> int | None:
    if text is None:
        return None
    value = _integer(option, text)
    if value < 0:
        raise InvalidOptionError(option, f"{value} is negative; give milliseconds since the epoch")
    return value


def _integer(option: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InvalidOptionError(option, f"{text!r} is not an integer") from None


def _positive_int(option: str, text: str) -> int:
    value = _integer(option, text)
    if value <= 0:
        raise InvalidOptionError(option, f"{value} is not positive")
    return value


def _isolation(text: str) -> bool:
    """Whether ``isolationLevel`` asks for read_committed."""
    if text not in ("read_committed", "read_uncommitted"):
        raise InvalidOptionError("isolationLevel", f"{text!r} is neither read_committed nor read_uncommitted")
    return text == "read_committed"


def _boolean(option: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidOptionError(option, f'{text!r} is not "true" or "false"')
    return lowered == "true"


def _aws_settings(given: Mapping[str, str], environ: Mapping[str, str] | None) -> tuple[AwsSettings, bool]:
    explicit = [name for name in _AWS_OPTIONS if name in given]
    if "stack" in given:
        if explicit:
            raise InvalidOptionError(explicit[0], "give either stack or explicit AWS settings, not both")
        return load_stack_settings(given["stack"]), True
    base = AwsSettings.from_env(environ)
    endpoint_url = given.get("endpointUrl", base.endpoint_url or "") or None
    return (
        AwsSettings(
            endpoint_url=endpoint_url,
            region=given.get("region", base.region),
            bucket=given.get("bucket", base.bucket),
            table_prefix=given.get("tablePrefix", base.table_prefix),
        ),
        False,
    )


def load_stack_settings(path: str) -> AwsSettings:
    """The AWS settings of a local stack, from its stack.json (or the directory holding it)."""
    description, stack_path = _stack_description(path)
    try:
        return AwsSettings.from_dict(description["aws"])
    except (ValueError, KeyError, TypeError, InvalidAwsSettingsError) as error:
        raise InvalidOptionError("stack", f"{stack_path} is not a stack description: {error}") from None


def load_stack_bootstrap_servers(path: str) -> str:
    """The bootstrap servers of a local stack, from its stack.json (or the directory holding it)."""
    description, stack_path = _stack_description(path)
    servers = description.get("bootstrap_servers", "")
    if not isinstance(servers, str):
        raise InvalidOptionError("stack", f"{stack_path} is not a stack description: bootstrap_servers {servers!r}")
    return servers


def _stack_description(path: str) -> tuple[dict, Path]:
    stack_path = Path(path)
    if stack_path.is_dir():
        stack_path = stack_path / STACK_FILE
    try:
        description = json.loads(stack_path.read_text())
        if not isinstance(description, dict):
            raise TypeError("not a JSON object")
        return description, stack_path
    except OSError as error:
        raise InvalidOptionError("stack", f"cannot read {stack_path}: {error}; is `floe local up` running?") from None
    except (ValueError, KeyError, TypeError, InvalidAwsSettingsError) as error:
        raise InvalidOptionError("stack", f"{stack_path} is not a stack description: {error}") from None
