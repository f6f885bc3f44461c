"""Servers started as subprocesses in tests: a free port, start with a log file, wait for readiness, always stop.

Used by the end-to-end service (tests.helpers.service_process), the hostile-input service
(support.hostile_service) and the Prometheus scrape test.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]  # the repository: the working directory of the servers
LOG_TAIL_CHARS = 3000


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the server binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_process(
    command: Sequence[str], log_path: Path, *, cwd: Path, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``command`` with stdout and stderr in ``log_path``; terminate it (then kill) on exit."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(list(command), cwd=cwd, env=None if env is None else dict(env), stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def wait_until_ready(
    proc: subprocess.Popen[bytes], url: str, *, deadline_s: float, log_path: Path, poll_s: float = 0.25
) -> None:
    """Return once GET ``url`` answers 200; raise ``RuntimeError`` with the log tail otherwise.

    Fails as soon as ``proc`` exits (with its exit code) or after ``deadline_s`` seconds, so a server
    that crashes on start-up is reported with its own error instead of a bare timeout. Connection
    errors while the server is still starting are expected and retried.
    """
    deadline = time.monotonic() + deadline_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {proc.returncode}:\n{_tail(log_path)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} not ready within {deadline_s} s:\n{_tail(log_path)}")
        time.sleep(poll_s)


def _tail(log_path: Path) -> str:
    """The last characters of the process log (it may not exist if the process never started)."""
    try:
        return log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError as exc:
        return f"(no log at {log_path}: {exc})"
