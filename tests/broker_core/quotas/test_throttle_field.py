"""How a throttle lands in a response: whole milliseconds, only ever raised, only where the field exists."""

from __future__ import annotations

import datetime

from broker_core.protocol.api_keys import ApiKey
from broker_core.protocol.framing import Request
from broker_core.protocol.messages import NO_THROTTLE, respond
from broker_core.server.handlers import with_throttle


def metadata_response(throttle: datetime.timedelta, version: int = 12) -> object:
    request = Request(ApiKey.METADATA, version, 1, "c", None, 0)
    return respond(request, {"throttle_time": throttle, "brokers": [], "cluster_id": "x", "controller_id": -1,
                             "topics": []})


def test_a_throttle_is_carried_in_whole_milliseconds() -> None:
    response = with_throttle(metadata_response(NO_THROTTLE), 0.0123)
    assert response.throttle_time == datetime.timedelta(milliseconds=12)


def test_a_longer_throttle_already_in_the_response_is_kept() -> None:
    response = with_throttle(metadata_response(datetime.timedelta(milliseconds=500)), 0.1)
    assert response.throttle_time == datetime.timedelta(milliseconds=500)


def test_no_throttle_leaves_the_response_alone() -> None:
    original = metadata_response(NO_THROTTLE)
    assert with_throttle(original, 0.0) is original
    assert with_throttle(None, 1.0) is None


def test_a_version_without_the_field_is_answered_without_it() -> None:
    original = metadata_response(NO_THROTTLE, version=0)
    assert with_throttle(original, 1.0) is original
