"""The service's JSON logging survives a swapped-and-closed stderr.

``radscreen serve`` (and tests/service/test_cli.py) call ``configure_logging``; pytest then closes the
capture stream that was ``sys.stderr`` at that moment. A handler bound to that stream turned every later
service log record into "--- Logging error --- ... Call stack:" noise in the property-based run.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from service.logs import configure_logging

NAMES = ("service", "models", "uvicorn", "uvicorn.error", "py.warnings")


@pytest.fixture
def restore_loggers() -> Iterator[None]:
    saved = {n: (logging.getLogger(n).handlers[:], logging.getLogger(n).level, logging.getLogger(n).propagate)
             for n in NAMES}
    access_disabled = logging.getLogger("uvicorn.access").disabled
    yield
    logging.captureWarnings(False)
    for name, (handlers, level, propagate) in saved.items():
        log = logging.getLogger(name)
        log.handlers[:], log.level, log.propagate = handlers, level, propagate
    logging.getLogger("uvicorn.access").disabled = access_disabled


def test_records_go_to_the_current_stderr_after_the_old_one_is_closed(
    restore_loggers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("info")
    logging.getLogger("service.access").info("one", extra={"request_id": "r1"})
    first.close()  # what pytest does to its capture stream after the test that configured logging
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("service.access").info("two", extra={"request_id": "r2"})
    text = second.getvalue()
    assert "Logging error" not in text and "Call stack" not in text
    [line] = text.splitlines()
    entry = json.loads(line)
    assert (entry["message"], entry["request_id"], entry["level"]) == ("two", "r2", "info")


def test_configure_logging_is_idempotent(restore_loggers: None) -> None:
    configure_logging("info")
    configure_logging("warning")
    log = logging.getLogger("service")
    assert len(log.handlers) == 1 and log.level == logging.WARNING and log.propagate is False
