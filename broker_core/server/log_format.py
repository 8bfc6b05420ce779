"""How a broker process writes its log: text lines for people, or one JSON object per line for log stores.

`configure_logging` sets up the root logger once, at start-up, from ``floe.log.format``. ``text`` is
the line local stacks and tests read (``time LEVEL [broker pid] logger: message``). ``json`` writes,
through python-json-logger, one object per event with ``time`` (ISO 8601, UTC), ``level``, ``logger``,
``message``, ``pid`` and every field the call passed in ``extra``: partition events pass ``topic``,
``partition`` and ``epoch`` (the leader epoch; ``partition_epoch``, ``leader`` and ``isr`` where they
concern the event), so CloudWatch Logs Insights can filter on them (``filter topic = "orders"``).
An exception's traceback goes in ``exc_info`` as one string, so an event stays one line.
"""

from __future__ import annotations

import logging
import time

from pythonjsonlogger.json import JsonFormatter

from broker_core.settings import ConfigError

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s [broker %(process)d] %(name)s: %(message)s"
_JSON_FIELDS = ("asctime", "levelname", "name", "message", "process")
_RENAMED = {"asctime": "time", "levelname": "level", "name": "logger", "process": "pid"}


class _UtcIsoJsonFormatter(JsonFormatter):
    """python-json-logger's formatter with Kafka-style field names and UTC ISO 8601 times (ms)."""

    converter = time.gmtime

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 (logging's name)
        return time.strftime("%Y-%m-%dT%H:%M:%S", self.converter(record.created)) + f".{int(record.msecs):03d}Z"


def formatter(log_format: str) -> logging.Formatter:
    """The formatter of ``floe.log.format``; ConfigError for a format Floe does not write."""
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    if log_format == "json":
        return _UtcIsoJsonFormatter(list(_JSON_FIELDS), rename_fields=_RENAMED)
    raise ConfigError(f"floe.log.format must be one of {', '.join(FORMATS)}, got {log_format!r}")


def configure_logging(level: str, log_format: str) -> None:
    """Send every logger's records at ``level`` and above to stderr in ``log_format``."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=level, handlers=[handler], force=True)
