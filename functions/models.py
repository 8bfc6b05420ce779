"""The request and response bodies of the HTTP API as pydantic models (they also make its OpenAPI document).

Records follow Confluent's REST Proxy v3 shape: ``key`` and ``value`` are ``{"type": "BINARY" |
"JSON" | "STRING", "data": ...}`` where BINARY data is base64, STRING data a string and JSON data
any JSON value (stored as its compact serialization); ``data: null`` (or no key/value at all) is
Kafka's null. Header values are base64 (null allowed). A timestamp is milliseconds since the epoch
or an ISO-8601 date-time. Fetched records come back in the same shape, so a fetched record can be
posted again as it is: key and value take the type the ``format`` query parameter asks for, or
BINARY when the bytes are not valid in that format (not UTF-8 for STRING, not JSON for JSON).
Answers give timestamps as milliseconds since the epoch.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import enum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    Tag,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError, to_json

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
# Records one produce request may carry. Checked before any record is validated, so a body of a
# million tiny records costs one length check; 10,000 is far more than a batch of real records that
# fits max.message.bytes, and validating that many takes tens of milliseconds. Past it: 413.
MAX_RECORDS_PER_REQUEST = 10_000
TOO_MANY_RECORDS = "too_many_records"
TOPIC_NAME_PATTERN = r"^[a-zA-Z0-9._-]{1,249}$"
GROUP_ID_PATTERN = r"^[a-zA-Z0-9._-]{1,249}$"
MEMBER_ID_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def decode_base64(text: str) -> bytes:
    """Standard base64 with padding; raises ValueError (a field error) on anything else."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not valid base64") from None


def encode_base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class DataType(enum.StrEnum):
    BINARY = "BINARY"
    JSON = "JSON"
    STRING = "STRING"


class TypedData(_Strict):
    """A key or value: its bytes, described by ``type``."""

    type: DataType
    # Any, not JsonValue: the body was parsed from JSON, so walking it again to prove it is JSON
    # would only cost time (a third of a 500-record request's validation).
    data: Any = Field(default=None, description="BINARY: base64 string; STRING: string; JSON: any JSON value; "
                                                "null: Kafka's null")

    @model_validator(mode="after")
    def _data_fits_type(self) -> TypedData:
        if self.data is None or self.type == DataType.JSON:
            return self
        if not isinstance(self.data, str):
            raise ValueError(f"data of a {self.type.value} key or value must be a string")
        if self.type == DataType.BINARY:
            decode_base64(self.data)
        return self

    def to_bytes(self) -> bytes | None:
        if self.data is None:
            return None
        if self.type == DataType.BINARY:
            return decode_base64(self.data)  # type: ignore[arg-type]
        if self.type == DataType.STRING:
            return self.data.encode("utf-8")  # type: ignore[union-attr]
        # pydantic-core's serializer writes what json.dumps(separators=(",", ":"), ensure_ascii=False)
        # writes, NaN and Infinity included, at a fraction of the cost.
        return to_json(self.data, inf_nan_mode="constants")


class RecordHeader(_Strict):
    name: str = Field(max_length=32767)
    value: str | None = Field(default=None, description="base64, or null")

    @field_validator("value")
    @classmethod
    def _value_is_base64(cls, value: str | None) -> str | None:
        if value is not None:
            decode_base64(value)
        return value

    def value_bytes(self) -> bytes | None:
        return None if self.value is None else decode_base64(self.value)


Timestamp = Annotated[int, Field(ge=0, le=MAX_TIMESTAMP_MS)] | datetime.datetime


class ProduceRecord(_Strict):
    """One record to append. Without ``partition_id`` a keyed record goes to the partition Kafka's
    default partitioner picks for its key (murmur2) and unkeyed records of one request all go to
    one partition chosen at random (as Kafka's sticky partitioner does per batch)."""

    partition_id: int | None = Field(default=None, ge=0, le=INT32_MAX)
    headers: list[RecordHeader] = Field(default_factory=list)
    key: TypedData | None = None
    value: TypedData | None = None
    timestamp: Timestamp | None = Field(default=None, description="ms since the epoch, or ISO-8601; default: now")

    def timestamp_ms(self) -> int | None:
        if self.timestamp is None:
            return None
        if isinstance(self.timestamp, datetime.datetime):
            moment = self.timestamp
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=datetime.UTC)
            return int(moment.timestamp() * 1000)
        return self.timestamp

    @field_validator("timestamp")
    @classmethod
    def _timestamp_in_range(cls, value: Timestamp | None) -> Timestamp | None:
        if isinstance(value, datetime.datetime):
            moment = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
            if moment < datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC):
                raise ValueError("is before 1970-01-01T00:00:00Z")
        return value


class ProduceRecords(_Strict):
    records: list[ProduceRecord] = Field(
        min_length=1, description=f"at most {MAX_RECORDS_PER_REQUEST} records (413 past that)")

    @field_validator("records", mode="before")
    @classmethod
    def _at_most_the_request_limit(cls, value: Any) -> Any:
        if isinstance(value, list) and len(value) > MAX_RECORDS_PER_REQUEST:
            raise PydanticCustomError(
                TOO_MANY_RECORDS, "a produce request carries at most {limit} records, this one {count}",
                {"limit": MAX_RECORDS_PER_REQUEST, "count": len(value)})
        return value

    def __repr__(self) -> str:
        # Powertools' event handler formats the route's arguments into a debug message whether or
        # not debug logging is on; the default repr of 500 records costs more than producing them.
        return f"ProduceRecords(<{len(self.records)} records>)"


# Which shape a produce body has decides which model validates it, so field errors speak of that one
# shape only; the tags appear in pydantic's error locations and are dropped from reported fields.
UNION_TAGS = ("many-records", "one-record")


def _produce_body_kind(value: Any) -> str:
    return UNION_TAGS[0] if isinstance(value, dict) and "records" in value else UNION_TAGS[1]


ProduceBody = Annotated[
    Annotated[ProduceRecords, Tag(UNION_TAGS[0])] | Annotated[ProduceRecord, Tag(UNION_TAGS[1])],
    Discriminator(_produce_body_kind),
]


class ProduceResult(BaseModel):
    partition_id: int
    offset: int
    timestamp: int = Field(description="ms since the epoch: the record's, or the broker's for LogAppendTime topics")


class ProduceResponse(BaseModel):
    results: list[ProduceResult] = Field(description="one per record, in request order")


class FetchedHeader(BaseModel):
    name: str
    value: str | None = Field(description="base64, or null")


class FetchedData(BaseModel):
    type: DataType
    data: JsonValue


class FetchedRecord(BaseModel):
    offset: int
    timestamp: int
    key: FetchedData | None
    value: FetchedData | None
    headers: list[FetchedHeader]


class FetchResponse(BaseModel):
    topic_name: str
    partition_id: int
    records: list[FetchedRecord]
    next_offset: int = Field(description="where the next fetch of this partition starts")
    high_watermark: int | None = Field(description="null when the records came from S3 (no broker was asked)")
    source: str = Field(description="'broker', or 's3' for offsets read straight from tiered segments")


class TopicConfig(_Strict):
    name: str = Field(min_length=1, max_length=255)
    value: str | None = Field(max_length=4096)


class CreateTopicRequest(_Strict):
    topic_name: str = Field(pattern=TOPIC_NAME_PATTERN)
    partitions_count: int = Field(default=1, ge=1, le=256, description="at most 256 over HTTP; larger topics through the Kafka admin API")
    replication_factor: int = Field(default=1, ge=1, le=32)
    configs: list[TopicConfig] = Field(default_factory=list, max_length=64)


class TopicSummary(BaseModel):
    topic_name: str
    topic_id: str | None
    partitions_count: int
    replication_factor: int


class TopicList(BaseModel):
    topics: list[TopicSummary]


class PartitionDescription(BaseModel):
    partition_id: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


class TopicDescription(TopicSummary):
    partitions: list[PartitionDescription]
    configs: dict[str, str | None]


class TopicPartitions(_Strict):
    topic: str = Field(pattern=TOPIC_NAME_PATTERN)
    partitions: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] = Field(max_length=100_000)


class JoinRequest(_Strict):
    topics: list[Annotated[str, Field(pattern=TOPIC_NAME_PATTERN)]] = Field(min_length=1, max_length=100)
    session_timeout_ms: int = Field(default=45_000, ge=6_000, le=300_000)


class HeartbeatRequest(_Strict):
    member_epoch: int = Field(ge=0, le=INT32_MAX)
    owned: list[TopicPartitions] | None = Field(
        default=None, description="the partitions the member still holds; omitted: it holds what it was last given")
    topics: list[Annotated[str, Field(pattern=TOPIC_NAME_PATTERN)]] | None = Field(
        default=None, min_length=1, max_length=100, description="a new subscription, if it changed")


class MemberAssignment(BaseModel):
    group_id: str
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: list[TopicPartitions]


class MemberDescription(BaseModel):
    member_id: str
    member_epoch: int
    topics: list[str]
    assignment: list[TopicPartitions]
    revoking: list[TopicPartitions]


class GroupDescription(BaseModel):
    group_id: str
    group_epoch: int
    assignment_epoch: int
    members: list[MemberDescription]


class OffsetToCommit(_Strict):
    topic: str = Field(pattern=TOPIC_NAME_PATTERN)
    partition_id: int = Field(ge=0, le=INT32_MAX)
    offset: int = Field(ge=0, le=INT64_MAX)
    metadata: str = Field(default="", max_length=4096)


class CommitRequest(_Strict):
    member_id: str | None = Field(default=None, pattern=MEMBER_ID_PATTERN,
                                  description="omit only for a group that has no members")
    member_epoch: int | None = Field(default=None, ge=0, le=INT32_MAX)
    offsets: list[OffsetToCommit] = Field(min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _member_and_epoch_together(self) -> CommitRequest:
        if (self.member_id is None) != (self.member_epoch is None):
            raise ValueError("member_id and member_epoch go together")
        return self

    @model_validator(mode="after")
    def _each_partition_once(self) -> CommitRequest:
        seen: set[tuple[str, int]] = set()
        for offset in self.offsets:
            if (offset.topic, offset.partition_id) in seen:
                raise ValueError(f"topic {offset.topic!r} partition {offset.partition_id} appears more than once")
            seen.add((offset.topic, offset.partition_id))
        return self


class CommittedOffset(BaseModel):
    topic: str
    partition_id: int
    offset: int
    metadata: str


class CommittedOffsets(BaseModel):
    group_id: str
    offsets: list[CommittedOffset]
