"""Structured (one JSON object per line) logging for the service.

Only the CLI calls ``configure_logging``; library code just logs with ``extra={...}`` fields.
Nothing here ever receives image bytes or study ids: the access log records method, route
template, status, latency and request id.
"""

from __future__ import annotations

import json
import logging
import sys
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


class CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted, like ``logging.lastResort``.

    A plain ``StreamHandler()`` keeps the stream that was ``sys.stderr`` at configuration time. When
    that stream is later closed (pytest replaces and closes its capture streams between tests;
    an embedding app may swap stderr), every record fails with "--- Logging error --- ... Call
    stack:" on the new stderr instead of being logged.
    """

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler.__init__/setStream assign it: always stderr
        pass


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr for the service and uvicorn loggers (called by ``radscreen serve``).

    Every other library logger reaches the root logger, which gets the same JSON handler at ``warning``:
    without it, Python's last-resort handler would print a library's warning as plain text into the
    JSON log (the multipart parser warns on every malformed body, naming only byte offsets).
    Idempotent: calling it again replaces the handlers instead of adding more.
    """
    handler = CurrentStderrHandler()
    handler.setFormatter(JsonFormatter())
    logging.captureWarnings(True)  # library warnings (e.g. Pillow on a client's corrupt EXIF) as JSON lines
    for name in ("service", "models", "uvicorn", "uvicorn.error", "py.warnings"):
        log = logging.getLogger(name)
        log.handlers[:] = [handler]
        log.setLevel(level.upper())
        log.propagate = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("uvicorn.access").disabled = True  # our access log replaces it (no query strings)
