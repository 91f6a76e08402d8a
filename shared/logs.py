"""Structured logging, configured once per process by the service's ``__main__``."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else came in through ``extra=`` and is context.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class ConsoleFormatter(logging.Formatter):
    """Readable single-line form for people at a terminal: ``msg key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        context = " ".join(
            f"{key}={value}" for key, value in vars(record).items() if key not in _STANDARD
        )
        stamp = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        line = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if context:
            line = f"{line}  {context}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    """Send all logging to stdout as JSON lines (``fmt="json"``) or console lines."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter() if fmt == "json" else ConsoleFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The Kafka and Spark client libraries are chatty at INFO.
    for noisy in ("py4j", "aiokafka", "kafka", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
