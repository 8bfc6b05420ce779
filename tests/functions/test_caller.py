"""The principal of an API Gateway event: the IAM caller's ARN, assumed-role sessions as their role."""

from __future__ import annotations

import pytest

from functions.caller import principal_of
from functions.local_adapter import api_gateway_event


@pytest.mark.parametrize(("arn", "principal"), [
    ("arn:aws:iam::123456789012:user/alice", "User:arn:aws:iam::123456789012:user/alice"),
    ("arn:aws:iam::123456789012:role/ingest", "User:arn:aws:iam::123456789012:role/ingest"),
    ("arn:aws:sts::123456789012:assumed-role/ingest/i-0abc", "User:arn:aws:iam::123456789012:role/ingest"),
    ("arn:aws-cn:sts::123456789012:assumed-role/ingest/session", "User:arn:aws-cn:iam::123456789012:role/ingest"),
])
def test_the_iam_caller_becomes_the_principal(arn: str, principal: str) -> None:
    event = api_gateway_event("GET", "/v1/topics", [], b"", caller_arn=arn)
    assert principal_of(event) == principal


@pytest.mark.parametrize("authorizer", [None, {}, {"iam": None}, {"iam": {"userArn": ""}}, {"iam": {"userArn": 7}},
                                        {"jwt": {"claims": {"sub": "x"}}}])
def test_an_event_without_an_iam_caller_is_anonymous(authorizer: object) -> None:
    event = api_gateway_event("GET", "/v1/topics", [], b"")
    if authorizer is not None:
        event["requestContext"]["authorizer"] = authorizer
    assert principal_of(event) == "User:ANONYMOUS"
