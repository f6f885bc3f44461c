"""A real ``radscreen serve`` process for the hostile-input suite and benchmarks/memory_bound.py.

The service runs as its own process (``python -m service serve``, JSON logs on stderr into a file) so
that its resident memory can be read from ``/proc/<pid>/status`` and its log checked for tracebacks.
Helpers here speak raw HTTP over sockets where a client library would not misbehave on purpose
(disconnects, stalls, trickles).
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from support.processes import ROOT, free_port, running_process, wait_until_ready


@dataclass(frozen=True)
class Service:
    base: str
    port: int
    pid: int
    log_path: Path

    def log_entries(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far (non-JSON lines come back as ``{"raw": line}``)."""
        entries = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                entries.append({"raw": line})
        return entries

    def access_line(self, request_id: str, timeout: float = 30.0) -> dict[str, Any]:
        """Wait for the access-log line of ``request_id`` (written when the request ends)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for entry in self.log_entries():
                if entry.get("logger") == "service.access" and entry.get("request_id") == request_id:
                    return entry
            time.sleep(0.05)
        raise AssertionError(f"no access line for {request_id} in {self.log_path}")

    def metric(self, name: str, **labels: str) -> float:
        """One sample of the Prometheus text at /metrics (0 when absent)."""
        text = httpx.get(f"{self.base}/metrics", timeout=10).text
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        series = f"{name}{{{want}}}" if labels else name
        for line in text.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        return 0.0


def rss_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` (now) and ``VmHWM`` (peak since start or the last reset) of ``pid`` in KiB."""
    fields = {"VmRSS": 0, "VmHWM": 0}  # both absent once the process has exited
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def reset_peak_rss(pid: int) -> bool:
    """Reset ``VmHWM`` of our own child to its current RSS (``/proc/<pid>/clear_refs`` = 5); False if denied."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@dataclass
class RssWatch:
    """What ``watch_rss`` saw of a process, in KiB."""

    pid: int
    baseline: int  # VmRSS when the watch began
    peak_reset: bool  # VmHWM was reset at the start, so it holds the peak of the watch
    samples: list[int]  # VmRSS every sampling interval

    def peak(self) -> int:
        """The highest RSS seen: the samples and, when it was reset, the kernel's own high-water mark."""
        return max([self.baseline, *self.samples, rss_kib(self.pid)["VmHWM"] if self.peak_reset else 0])


@contextlib.contextmanager
def watch_rss(pid: int, every_s: float = 0.01) -> Iterator[RssWatch]:
    """Sample ``pid``'s RSS every ``every_s`` seconds in a thread for the ``with`` block (baseline taken first)."""
    watch = RssWatch(pid, rss_kib(pid)["VmRSS"], reset_peak_rss(pid), [])
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(every_s):
            watch.samples.append(rss_kib(pid)["VmRSS"])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield watch
    finally:
        stop.set()
        sampler.join(5)


@contextlib.contextmanager
def hostile_service(model_dir: Path | None, log_path: Path, env: Mapping[str, str]) -> Iterator[Service]:
    """`python -m service serve` on a free port with `RADSCREEN_*` `env`; `model_dir` None = embedded."""
    import os

    port = free_port()
    command = [sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(port)]
    if model_dir is not None:
        command += ["--model-dir", str(model_dir)]
    environment = {**os.environ, "RADSCREEN_DEVICE": "cpu", "RADSCREEN_LOG_LEVEL": "info", **env}
    base = f"http://127.0.0.1:{port}"
    with running_process(command, log_path, cwd=ROOT, env=environment) as proc:
        wait_until_ready(proc, f"{base}/readyz", deadline_s=180, log_path=log_path)
        yield Service(base, port, proc.pid, log_path)


def request_head(port: int, path: str, content_type: str, length: int | None, request_id: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Type: {content_type}",
             f"X-Request-ID: {request_id}"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(sock: socket.socket, timeout: float = 60.0) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one HTTP/1.1 response read from ``sock`` (server closes or sends a length)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed before a response: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    length = int(headers.get("content-length", "-1"))
    while length < 0 or len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(status_line.split()[1]), headers, body


def disconnect_mid_body(svc: Service, request_id: str, *, multipart: bool = False) -> None:
    """Declare a 1 MB body, send 64 KiB of it, close the connection."""
    ctype = "multipart/form-data; boundary=xyz" if multipart else "image/png"
    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as sock:
        sock.sendall(request_head(svc.port, "/v1/predict", ctype, 1_000_000, request_id))
        prefix = b'--xyz\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\n\r\n'
        sock.sendall((prefix if multipart else b"\x89PNG\r\n\x1a\n") + b"\x00" * 65536)
        time.sleep(0.2)


def disconnect_while_processing(svc: Service, request_id: str, image: bytes, wait_s: float = 0.3, *,
                                path: str = "/v1/predict", content_type: str = "image/png") -> None:
    """Send a whole body (a valid image by default), then close before the answer (the server's batch wait is
    longer)."""
    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as sock:
        sock.sendall(request_head(svc.port, path, content_type, len(image), request_id) + image)
        time.sleep(wait_s)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (``/proc/<pid>/stat``), in seconds."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stalled_upload(svc: Service, request_id: str) -> tuple[int, dict[str, str], bytes]:
    """Declare 100 kB, send 1 kB, then send nothing more: the server must answer (408), not wait forever."""
    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as sock:
        sock.sendall(request_head(svc.port, "/v1/predict", "image/png", 100_000, request_id) + b"\x00" * 1000)
        return read_response(sock)


def trickled_upload(svc: Service, request_id: str, every_s: float = 0.25) -> tuple[int, dict[str, str], bytes]:
    """Declare 2 MB and send 100 bytes every ``every_s`` (never idle long): the total timeout must end it."""
    import select

    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as sock:
        sock.sendall(request_head(svc.port, "/v1/predict", "image/png", 2_000_000, request_id))
        deadline = time.monotonic() + 120  # the test's own hang guard, far above the server's bound
        while time.monotonic() < deadline:
            readable, _, _ = select.select([sock], [], [], every_s)
            if readable:
                break
            with contextlib.suppress(OSError):
                sock.sendall(b"\x00" * 100)
        return read_response(sock)


def trickled_headers(svc: Service, every_s: float = 0.3, guard_s: float = 30.0) -> tuple[int, dict[str, str], bytes]:
    """Send a request head one byte every ``every_s`` s, never finishing it: the server must answer (408)."""
    import select

    head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{svc.port}\r\nX-Slow: " + "a" * 10_000
    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as sock:
        deadline = time.monotonic() + guard_s  # the test's own hang guard, far above the server's bound
        for byte in head.encode():
            readable, _, _ = select.select([sock], [], [], every_s)
            if readable or time.monotonic() > deadline:
                break
            with contextlib.suppress(OSError):
                sock.sendall(bytes([byte]))
        return read_response(sock)


def multipart_body(parts: Sequence[tuple[str, str | None, bytes]], boundary: str = "hostile") -> tuple[bytes, str]:
    """``(name, filename or None, data)`` parts -> (body, content type)."""
    out = []
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + data + b"\r\n")
    return b"".join(out) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def post(
    svc: Service, path: str, body: bytes, content_type: str, request_id: str, timeout: float = 120.0
) -> httpx.Response:
    headers = {"Content-Type": content_type, "X-Request-ID": request_id}
    return httpx.post(f"{svc.base}{path}", content=body, headers=headers, timeout=timeout)
