"""IncrementalAlterConfigs' operations on a topic's configs, before the result is validated."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from broker_core.server.admin_configs import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    ConfigChangeError,
    incremental_changes,
)


def test_set_and_delete_change_only_the_named_settings() -> None:
    current = {"retention.ms": "1000", "segment.bytes": "4096"}
    changed = incremental_changes(current, [("retention.ms", OP_DELETE, None), ("retention.bytes", OP_SET, "10")], {})
    assert changed == {"segment.bytes": "4096", "retention.bytes": "10"}
    assert current == {"retention.ms": "1000", "segment.bytes": "4096"}


def test_append_starts_from_the_effective_value_and_subtract_removes_items() -> None:
    appended = incremental_changes({}, [("cleanup.policy", OP_APPEND, "compact")], {"cleanup.policy": "delete"})
    assert appended == {"cleanup.policy": "delete,compact"}
    again = incremental_changes(appended, [("cleanup.policy", OP_APPEND, "compact")], {})
    assert again == {"cleanup.policy": "delete,compact"}
    assert incremental_changes(appended, [("cleanup.policy", OP_SUBTRACT, "delete")], {}) == {"cleanup.policy": "compact"}


@pytest.mark.parametrize(("changes", "code", "named"), [
    ([("retention.ms", OP_APPEND, "5")], ErrorCode.invalid_config, "retention.ms"),
    ([("retention.ms", OP_SUBTRACT, "5")], ErrorCode.invalid_config, "retention.ms"),
    ([("retention.ms", 7, "5")], ErrorCode.invalid_config, "retention.ms"),
    ([("retention.ms", OP_SET, None)], ErrorCode.invalid_config, "retention.ms"),
    ([("retention.ms", OP_SET, "1"), ("retention.ms", OP_DELETE, None)], ErrorCode.invalid_request, "retention.ms"),
])
def test_refused_changes_name_the_setting(changes: list[tuple[str, int, str | None]], code: ErrorCode,
                                          named: str) -> None:
    with pytest.raises(ConfigChangeError, match=named.replace(".", r"\.")) as caught:
        incremental_changes({}, changes, {})
    assert caught.value.error_code == code
