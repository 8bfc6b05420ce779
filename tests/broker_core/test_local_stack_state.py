"""How `floe local up` saves DynamoDB items between runs: in DynamoDB's JSON, binary values included."""

from __future__ import annotations

import json

from broker_core.local_stack import attribute_json, attribute_value


def test_binary_attributes_round_trip_through_the_saved_json() -> None:
    # A consumer group member as boto3's client scans it: binary metadata and assignment (static members
    # stay in the table after their process ends), plus every container kind that can hold binary.
    item = {
        "group_id": {"S": "click-counter"},
        "metadata": {"B": b"\x00\x01range\xff"},
        "assignment": {"B": b""},
        "salts": {"BS": [b"\x00", b"\xfe\xff"]},
        "nested": {"M": {"blob": {"B": b"\x80"}, "list": {"L": [{"B": b"\x7f"}, {"N": "3"}, {"NULL": True}]}}},
        "generation": {"N": "4"},
    }
    saved = json.loads(json.dumps({name: attribute_json(value) for name, value in item.items()}))
    assert saved["metadata"] == {"B": "AAFyYW5nZf8="}  # base64, as DynamoDB's JSON has it
    assert {name: attribute_value(value) for name, value in saved.items()} == item
