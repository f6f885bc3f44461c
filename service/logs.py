"""Structured (one JSON object per line) logging for the service.

Only the CLI calls ``configure_logging``; library code just logs with ``extra={...}`` fields.
Nothing here ever receives image bytes or study ids: the access log records method, route
template, status, latency and request id.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Render a record as JSON: time, level, logger, message, then every ``extra`` field."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(
            {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}
        )
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr for the service and uvicorn loggers (called by ``radscreen serve``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    for name in ("service", "models", "uvicorn", "uvicorn.error"):
        log = logging.getLogger(name)
        log.handlers[:] = [handler]
        log.setLevel(level.upper())
        log.propagate = False
    logging.getLogger("uvicorn.access").disabled = True  # our access log replaces it (no query strings)
