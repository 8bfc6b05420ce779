"""Which kio entity classes Floe speaks, and how handlers build a response of whatever version was asked.

Handlers describe a response once, as nested dicts that hold the union of the fields every version
knows; `build_entity` walks the kio dataclass of the negotiated version and takes only the fields that
version has, so one handler serves every supported version without per-version code.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.schema.index import api_key_map
from kio.serial._introspect import EntityField, EntityTupleField, classify_field
from kio.static.constants import EntityType

from .api_keys import ApiKey

# ListOffsets' special timestamps: the log start offset, and the high watermark.
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
# Fetch's and ListOffsets' isolation_level that stops at the last stable offset and names aborted transactions.
READ_COMMITTED = 1
# DescribeConfigs' resource types.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
# The throttle time of a response that was not throttled.
NO_THROTTLE = datetime.timedelta(0)

# API key -> (lowest, highest) version Floe serves. The lowest versions are Kafka 4.0's floor (the
# oldest kio generates); the highest are where the behaviour behind every field is implemented.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 10),  # v10: KIP-951's current leader in NOT_LEADER_OR_FOLLOWER answers
    ApiKey.FETCH: (4, 18),  # v13+ addresses topics by id
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.OFFSET_FETCH: (1, 7),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 5),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),  # v5 is KIP-890 part 2 (an epoch bump per transaction)
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.WRITE_TXN_MARKERS: (1, 2),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
}


def api_name(api_key: int) -> str:
    return api_key_map.get(api_key, f"api_{api_key}")


@cache
def request_class(api_key: int, version: int) -> type:
    module = load_payload_module(api_key, version, EntityType.request)
    return module.__dict__[_payload_class_name(module, EntityType.request)]


@cache
def response_class(api_key: int, version: int) -> type:
    module = load_payload_module(api_key, version, EntityType.response)
    return module.__dict__[_payload_class_name(module, EntityType.response)]


def _payload_class_name(module: Any, entity_type: EntityType) -> str:
    for name, value in vars(module).items():
        if isinstance(value, type) and getattr(value, "__type__", None) == entity_type:
            return name
    raise LookupError(f"no {entity_type.name} entity in {module.__name__}")


@cache
def _field_plan(cls: type) -> tuple[tuple[str, type | None, bool, bool], ...]:
    """(name, nested entity type or None, is_array, has_default) for each field of ``cls``."""
    plan = []
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        nested = kind.type_ if isinstance(kind, EntityField | EntityTupleField) else None
        has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        plan.append((field.name, nested, kind.is_array, has_default))
    return tuple(plan)


def respond(request: Any, data: Mapping[str, Any]) -> Any:
    """The response to ``request`` (anything with ``api_key`` and ``api_version``) at its version, from ``data``."""
    return build_entity(response_class(request.api_key, request.api_version), data)


def build_entity(cls: type, data: Mapping[str, Any]) -> Any:
    """Instantiate kio entity ``cls`` from ``data``, ignoring keys the class has no field for.

    Nested entities and arrays of entities are given as dicts and lists of dicts. A field that is
    missing from ``data`` takes the schema default; a missing field without one raises KeyError.
    """
    kwargs = {}
    for name, nested, is_array, has_default in _field_plan(cls):
        if name not in data:
            if has_default:
                continue
            raise KeyError(f"{cls.__qualname__}.{name} has no value and no default")
        value = data[name]
        if nested is not None and value is not None:
            if is_array:
                value = tuple(v if isinstance(v, nested) else build_entity(nested, v) for v in value)
            elif isinstance(value, Mapping):
                value = build_entity(nested, value)
        elif is_array and value is not None and not isinstance(value, tuple):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)
