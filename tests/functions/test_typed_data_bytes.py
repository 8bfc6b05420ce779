"""A JSON key or value is stored as its compact serialization, byte for byte what json.dumps writes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.models import DataType, TypedData


@pytest.mark.parametrize("data", [
    {"order_id": 7, "note": "two sugars, no milk", "nested": [1, 2.5, None, True, {"k": "v"}]},
    "caf\u00e9 \u2028 \U0001f600", 10**30, -0.0, 1e100, 0.1, float("nan"), float("inf"), [], {},
])
def test_json_data_is_stored_as_compact_json_dumps_would_write_it(data: Any) -> None:
    expected = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert TypedData(type=DataType.JSON, data=data).to_bytes() == expected
