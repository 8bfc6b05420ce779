"""floe.log.format: text lines as before, or one JSON object per line with time, level, logger, message,
and topic/partition/epoch fields on the partition, leadership and ISR events."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.log.config import LogConfig
from broker_core.server.log_format import formatter
from broker_core.server.partition import Partition
from broker_core.settings import ConfigError


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """Every record of the broker_core loggers, formatted as floe.log.format=json formats it."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter("json"))
    logger = logging.getLogger("broker_core")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def events(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_has_time_level_logger_message_and_the_extra_fields(json_lines: io.StringIO) -> None:
    logging.getLogger("broker_core.example").warning("%s-%d went %s", "orders", 2, "offline",
                                                     extra={"topic": "orders", "partition": 2, "epoch": 7})
    [event] = events(json_lines)
    assert {k: event[k] for k in ("level", "logger", "message", "topic", "partition", "epoch")} == {
        "level": "WARNING", "logger": "broker_core.example", "message": "orders-2 went offline",
        "topic": "orders", "partition": 2, "epoch": 7}
    assert event["time"].endswith("Z") and event["time"][10] == "T"


def test_a_traceback_stays_inside_its_one_line(json_lines: io.StringIO) -> None:
    try:
        raise ValueError("bad segment")
    except ValueError:
        logging.getLogger("broker_core.example").exception("cleaning failed")
    [line] = json_lines.getvalue().splitlines()
    assert "ValueError: bad segment" in json.loads(line)["exc_info"]


def test_leadership_changes_of_a_partition_carry_its_topic_partition_and_epoch(tmp_path: Path,
                                                                              json_lines: io.StringIO) -> None:
    partition = Partition.open(tmp_path, "orders", 3, "topic-id-1", LogConfig(), broker_id=1)
    try:
        partition.become_leader(5, 9, (1, 2), (1, 2))
        partition.become_leader(5, 10, (1, 2), (1,))  # the same term: no new event
        partition.become_follower(2, 6, 11, (1, 2), (2,))
    finally:
        partition.close()
    leader, follower = events(json_lines)
    assert {k: leader[k] for k in ("topic", "partition", "epoch", "leader", "partition_epoch", "isr")} == {
        "topic": "orders", "partition": 3, "epoch": 5, "leader": 1, "partition_epoch": 9, "isr": [1, 2]}
    assert leader["logger"] == "broker_core.server.partition"
    assert {k: follower[k] for k in ("topic", "partition", "epoch", "leader", "isr")} == {
        "topic": "orders", "partition": 3, "epoch": 6, "leader": 2, "isr": [2]}


def test_text_stays_the_default_line_and_an_unknown_format_is_refused() -> None:
    record = logging.LogRecord("broker_core.x", logging.INFO, __file__, 1, "hello %s", ("there",), None)
    assert formatter("text").format(record).endswith(f"INFO [broker {record.process}] broker_core.x: hello there")
    with pytest.raises(ConfigError, match="floe.log.format must be one of text, json"):
        formatter("yaml")

