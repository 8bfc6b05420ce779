"""The metering proxy's arithmetic: DynamoDB item sizes and capacity units, and S3 operation names."""

from __future__ import annotations

import pytest

from bench.aws_meter import dynamodb_charges, item_size, read_units, s3_operation, value_size, write_units


def test_item_size_counts_names_and_values_as_dynamodb_does() -> None:
    # name bytes + value bytes: "id" (2) + "abc" (3); "n" (1) + 12345 (5 digits -> 4 bytes); "b" (1) + 2 bytes
    item = {"id": {"S": "abc"}, "n": {"N": "12345"}, "b": {"B": "AAE="}}
    assert item_size(item) == 2 + 3 + 1 + 4 + 1 + 2
    assert value_size({"L": [{"S": "x"}, {"BOOL": True}]}) == 3 + (1 + 1) + (1 + 1)
    assert value_size({"M": {"k": {"NULL": True}}}) == 3 + 1 + 1 + 1


@pytest.mark.parametrize(("size", "consistent", "units"), [(0, True, 1.0), (4096, True, 1.0), (4097, True, 2.0),
                                                           (100, False, 0.5), (8193, False, 1.5)])
def test_read_units_round_up_to_4_kb_and_halve_for_eventual_reads(size: int, consistent: bool, units: float) -> None:
    assert read_units(size, consistent) == units


def test_write_units_round_up_to_1_kb_with_one_at_least() -> None:
    assert [write_units(size) for size in (0, 1024, 1025, 3000)] == [1.0, 1.0, 2.0, 3.0]


def test_a_transaction_costs_twice_its_items_per_table() -> None:
    request = {"TransactItems": [
        {"Put": {"TableName": "segments", "Item": {"k": {"S": "x" * 1500}}}},
        {"Update": {"TableName": "heads", "Key": {"k": {"S": "p"}}, "ExpressionAttributeValues": {":v": {"N": "1"}}}},
    ]}
    charges = dynamodb_charges("TransactWriteItems", request, {})
    assert charges["segments"].write_units == 4.0
    assert charges["heads"].write_units == 2.0


def test_query_charges_the_sum_of_the_items_it_returns() -> None:
    answer = {"Items": [{"k": {"S": "x" * 3000}}, {"k": {"S": "y" * 3000}}]}
    charges = dynamodb_charges("Query", {"TableName": "segments", "ConsistentRead": True}, answer)
    assert charges["segments"].read_units == 2.0


@pytest.mark.parametrize(("method", "target", "headers", "operation"), [
    ("PUT", "/bucket/a/b.log", {}, "PutObject"),
    ("PUT", "/bucket/a/b.log?partNumber=3&uploadId=u", {}, "UploadPart"),
    ("POST", "/bucket/a/b.log?uploads", {}, "CreateMultipartUpload"),
    ("POST", "/bucket/a/b.log?uploadId=u", {}, "CompleteMultipartUpload"),
    ("GET", "/bucket/a/b.log", {"range": "bytes=0-9"}, "GetObject"),
    ("GET", "/bucket?list-type=2&prefix=a", {}, "ListObjectsV2"),
    ("DELETE", "/bucket/a/b.log", {}, "DeleteObject"),
    ("POST", "/bucket?delete", {}, "DeleteObjects"),
])
def test_s3_requests_are_named_by_their_operation(method: str, target: str, headers: dict[str, str],
                                                  operation: str) -> None:
    assert s3_operation(method, target, headers) == operation
