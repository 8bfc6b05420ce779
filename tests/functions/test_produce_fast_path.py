"""The produce fast path reads, places and encodes records exactly as the pydantic models and
`build_batch` do: msgspec's reader accepts only bodies pydantic accepts, to the same records (and
hands every other body back), the vectorised partitioner agrees with Kafka's, and the table-driven
encoder writes the bytes `build_batch` writes."""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from pydantic import TypeAdapter

from broker_core.records import SimpleRecord, build_batch
from functions.local_adapter import api_gateway_event
from functions.models import MAX_RECORDS_PER_REQUEST, ProduceBody, ProduceRecords
from functions.partitioning import partitions_for_keys
from functions.produce import read_fast, record_fields
from functions.produce_body import decode_records
from functions.record_encoding import encode_batch, records_section
from tests.support.murmur2_vectors import JAVA_VECTORS

_BODY = TypeAdapter(ProduceBody)
B64 = base64.b64encode(b"\x00\xffbytes").decode()



def test_vectorised_partitions_match_the_java_client() -> None:
    keys = list(JAVA_VECTORS) * 2  # enough keys for the vectorised path
    for partitions in (1, 3, 6, 7, 1000, 2**31 - 1):
        assert partitions_for_keys(keys, partitions) == [
            (JAVA_VECTORS[key] & 0x7FFFFFFF) % partitions for key in keys]


def test_vectorised_partitions_match_kafka_python_for_every_length() -> None:
    rng = random.Random(26)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"abcde"] + [rng.randbytes(rng.randrange(0, 300)) for _ in range(600)]
    keys.append(rng.randbytes(5000))  # longer than the vectorised width: hashed one by one
    for partitions in (1, 6, 97):
        expected = [(kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions for key in keys]
        assert partitions_for_keys(keys, partitions) == expected
        assert partitions_for_keys(keys[:3], partitions) == expected[:3]
    assert partitions_for_keys([], 3) == []
    with pytest.raises(ValueError):
        partitions_for_keys([b"k"] * 20, 0)


def _parts(rng: random.Random, count: int, timestamp: int) -> list[tuple[Any, Any, Any, int]]:
    records = []
    for number in range(count):
        key = None if number % 7 == 3 else rng.randbytes(rng.randrange(0, 40))
        value = None if number % 11 == 5 else rng.randbytes(rng.choice((0, 10, 200, 20_000)))
        headers = () if number % 3 else (("trace", rng.randbytes(8)), ("é-name", None))
        records.append((key, value, headers, timestamp))
    return records


def test_the_table_encoder_writes_what_build_batch_writes() -> None:
    rng = random.Random(5)
    for count in (1, 2, 130, 700):
        parts = _parts(rng, count, 1_795_807_200_391)
        simple = [SimpleRecord(key=k, value=v, headers=h, timestamp=t) for k, v, h, t in parts]
        assert encode_batch(parts) == build_batch(simple)
    # Offset deltas past the table (16,384) and records of mixed timestamps (build_batch's own path).
    many = [(b"k", b"v", (), 7)] * 17_000
    assert encode_batch(many) == build_batch([SimpleRecord(key=b"k", value=b"v", timestamp=7)] * 17_000)
    mixed = [(b"k", b"v", (), 5), (None, b"w", (("h", b"x"),), 9)]
    assert encode_batch(mixed) == build_batch([SimpleRecord(key=b"k", value=b"v", timestamp=5),
                                               SimpleRecord(key=None, value=b"w", headers=(("h", b"x"),), timestamp=9)])
    assert records_section([]) == b""
    with pytest.raises(ValueError):
        encode_batch([])


def _record(**fields: Any) -> dict[str, Any]:
    return {"key": {"type": "STRING", "data": "k"}, "value": {"type": "JSON", "data": {"a": [1, 2.5, "é", None]}},
            **fields}


# Bodies pydantic accepts and the fast reader reads.
READ_FAST = [
    {"records": [_record()]},
    {"records": [_record(), _record(partition_id=0), _record(partition_id=2**31 - 1)]},
    {"records": [{"key": {"type": "BINARY", "data": B64}, "value": {"type": "BINARY", "data": ""}}]},
    {"records": [{"key": None, "value": {"type": "STRING", "data": None}}, {}]},
    {"records": [{"value": {"type": "JSON", "data": "text"}}, {"value": {"type": "JSON", "data": 10**30}},
                 {"value": {"type": "JSON", "data": [True, False, -0.0, 1e16, "\u2028"]}}]},
    {"records": [{"value": {"type": "JSON"}}, {"key": {"type": "STRING"}}]},
    {"records": [_record(headers=[{"name": "h", "value": B64}, {"name": "n"}, {"name": "x" * 32767, "value": None}])]},
    {"records": [_record(timestamp=0), _record(timestamp=253_402_300_799_999)]},
]

# Bodies the fast reader hands to pydantic: refused there, or read in a way of its own.
NOT_READ_FAST = [
    _record(),  # one record, not {"records": [...]}
    {"records": []},
    {"records": [{}] * (MAX_RECORDS_PER_REQUEST + 1)},
    {"records": [_record()], "extra": 1},
    {"records": [_record(extra=1)]},
    {"records": [_record(partition_id=-1)]},
    {"records": [_record(partition_id=2**31)]},
    {"records": [_record(partition_id="3")]},
    {"records": [_record(partition_id=3.0)]},
    {"records": [_record(partition_id=True)]},
    {"records": [_record(timestamp="2026-11-27T10:00:00Z")]},
    {"records": [_record(timestamp=-1)]},
    {"records": [_record(timestamp=253_402_300_800_000)]},
    {"records": [{"key": {"type": "TEXT", "data": "k"}}]},
    {"records": [{"key": {"type": "json", "data": "k"}}]},
    {"records": [{"key": {"type": "STRING", "data": 5}}]},
    {"records": [{"key": {"type": "BINARY", "data": "not base64!"}}]},
    {"records": [{"key": {"type": "BINARY", "data": ["x"]}}]},
    {"records": [{"key": {"type": "STRING", "data": "k", "extra": 1}}]},
    {"records": [_record(headers=[{"name": "h", "value": "%%%"}])]},
    {"records": [_record(headers=[{"name": "x" * 32768}])]},
    {"records": [_record(headers=[{"value": B64}])]},
    {"records": [_record(headers={"name": "h"})]},
    {"records": "all of them"},
    [_record()],
]


def _pydantic_fields(text: str) -> list[Any]:
    body = _BODY.validate_python(json.loads(text))
    records = body.records if isinstance(body, ProduceRecords) else [body]
    return [record_fields(record) for record in records]


@pytest.mark.parametrize("body", READ_FAST, ids=range(len(READ_FAST)))
def test_the_fast_reader_reads_what_pydantic_reads(body: Any) -> None:
    text = json.dumps(body, ensure_ascii=False)
    assert decode_records(text) == _pydantic_fields(text)
    assert decode_records(text.encode("utf-8")) == _pydantic_fields(text)


@pytest.mark.parametrize("body", NOT_READ_FAST, ids=range(len(NOT_READ_FAST)))
def test_other_bodies_go_to_pydantic(body: Any) -> None:
    assert decode_records(json.dumps(body)) is None


@pytest.mark.parametrize("text", [
    "", "{", '{"records": [{}]} x', '{"records": [{"value": {"type": "JSON", "data": NaN}}]}',
    '{"records": [{"value": {"type": "JSON", "data": 1e400}}]}', '{"records": [{"value": {"type": "JSON", "data": "\\ud800"}}]}',
    '{"records": [{"value": {"type": "STRING", "data": "a\tb"}}]}', "[" * 10_000 + "]" * 10_000,
])
def test_text_that_is_not_plain_json_goes_to_the_json_parser(text: str) -> None:
    assert decode_records(text) is None


def test_duplicate_names_keep_the_last_value_as_json_loads_does() -> None:
    text = '{"records": [{"partition_id": 1, "partition_id": 2, "value": {"type": "JSON", "data": {"a": 1, "a": 2}}}]}'
    assert decode_records(text) == _pydantic_fields(text) == [(2, None, b'{"a":2}', None, ())]


def _event(method: str = "POST", target: str = "/v1/topics/orders/records", body: Any = None,
           headers: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    data = json.dumps({"records": [_record()]} if body is None else body).encode()
    return api_gateway_event(method, target, [("content-type", "application/json"), *(headers or [])], data)


def test_only_produce_requests_the_route_takes_as_they_are_go_the_fast_way() -> None:
    fast = read_fast(_event(headers=[("Idempotency-Key", "abc")]))
    assert fast is not None
    assert (fast.topic, fast.idempotency_key, len(fast.records)) == ("orders", "abc", 1)
    assert read_fast(_event()).idempotency_key is None
    for event in (
        _event(method="PUT"),
        _event(target="/v1/topics/orders/records/"),
        _event(target="/v1/topics/or%2Fders/records"),
        _event(target="/v1/topics/" + "t" * 250 + "/records"),
        _event(target="/v1/topics/orders/partitions/0/records"),
        _event(headers=[("idempotency-key", "")]),
        _event(headers=[("idempotency-key", "k" * 256)]),
        _event(body=_record()),
        {**_event(), "isBase64Encoded": True},
        {**_event(), "body": ""},
    ):
        assert read_fast(event) is None


def test_a_json_value_is_stored_as_its_compact_serialization() -> None:
    text = json.dumps({"records": [{"value": {"type": "JSON", "data": {"b": [1, 2.5, "é"], "a": None}}}]})
    [(_, _, value, _, _)] = decode_records(text)
    assert value == json.dumps({"b": [1, 2.5, "é"], "a": None}, separators=(",", ":"), ensure_ascii=False).encode()



def _answers(monkeypatch: pytest.MonkeyPatch, outcome: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fast path's and the resolver's answers to one produce request whose work (`checked_produce`,
    which both paths call) returns or raises ``outcome``."""
    from functions import app, produce
    from functions.local_adapter import LocalLambdaContext

    monkeypatch.setenv("FLOE_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")

    def work(*args: Any) -> Any:
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(produce, "checked_produce", work)
    event = _event(headers=[("Idempotency-Key", "k-1")])
    request = read_fast(event)
    assert request is not None
    fast = app._produce_fast(request)
    slow = app.app.resolve(event, LocalLambdaContext(aws_request_id="r-1", region="us-east-1"))
    return fast, slow


@pytest.mark.parametrize("outcome", [
    {"results": [{"partition_id": 2, "offset": 10, "timestamp": 1_795_807_200_391}]},
    "api-error", "kafka-error", "client-error", "quota-unavailable",
])
def test_the_fast_path_answers_as_the_resolver_does(monkeypatch: pytest.MonkeyPatch, outcome: Any) -> None:
    from kio.schema.errors import ErrorCode

    from broker_core.client import ClientError, KafkaError
    from functions.errors import ApiError
    from functions.quotas import QuotaUnavailableError

    raised = {
        "api-error": ApiError(429, "over quota", headers={"Retry-After": "3"}, retry_after_s=3),
        "kafka-error": KafkaError(ErrorCode.not_leader_or_follower, "moved", topic="orders", partition=1),
        "client-error": ClientError("no route to 10.0.0.7:9092"),
        "quota-unavailable": QuotaUnavailableError("table gone"),
    }
    fast, slow = _answers(monkeypatch, raised[outcome] if isinstance(outcome, str) else outcome)
    assert fast == slow
    assert json.loads(fast["body"]) == json.loads(slow["body"])


def test_what_no_handler_names_leaves_the_fast_path_as_it_leaves_the_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        _answers(monkeypatch, RuntimeError("boom"))
