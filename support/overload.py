"""A closed-loop overload driver: ``clients`` threads each POST one image after the other for ``duration`` s.

Shared by the overload test (tests/service/test_hostile_inputs.py, a few seconds) and
benchmarks/overload.py (the 60-s measurement). Each answer is recorded with its status, latency and
``Retry-After``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import httpx
import numpy as np


@dataclass(frozen=True)
class Answer:
    status: int
    latency_s: float
    retry_after: str | None
    problem_type: str | None


def drive(base: str, image: bytes, *, clients: int, duration: float, timeout: float = 120.0,
          polite: bool = True) -> list[Answer]:
    """Every answer of ``clients`` closed-loop clients over ``duration`` seconds (a request started before
    the end is waited for). ``polite``: after a 503 a client waits its Retry-After; else 50 ms."""
    answers: list[Answer] = []
    lock = threading.Lock()
    end = time.monotonic() + duration

    def client(i: int) -> None:
        with httpx.Client(base_url=base, timeout=timeout) as http:
            n = 0
            while time.monotonic() < end:
                started = time.monotonic()
                r = http.post("/v1/predict", content=image, headers={
                    "Content-Type": "image/png", "X-Request-ID": f"overload-{i:03d}-{n:05d}"})
                n += 1
                problem = r.json().get("type") if r.status_code >= 400 else None
                answer = Answer(r.status_code, time.monotonic() - started, r.headers.get("retry-after"), problem)
                with lock:
                    answers.append(answer)
                if r.status_code == 503:  # a polite client: waits Retry-After (at most until the end)
                    pause = float(r.headers.get("retry-after", "0.05")) if polite else 0.05
                    time.sleep(max(0.0, min(pause, end - time.monotonic())))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=duration + timeout + 10)
    return answers


def p99(latencies: list[float]) -> float:
    return float(np.percentile(np.asarray(latencies), 99)) if latencies else 0.0


def _percentiles(latencies: list[float]) -> str:
    if not latencies:
        return "-"
    p50, p99_ = np.percentile(np.asarray(latencies), [50, 99])
    return f"p50 {p50:.2f} s, p99 {p99_:.2f} s"


def summary(answers: list[Answer]) -> str:
    ok = [a.latency_s for a in answers if a.status == 200]
    busy = [a.latency_s for a in answers if a.status == 503]
    pct = _percentiles
    return (f"{len(ok)} x 200 ({pct(ok)}), {len(busy)} x 503 ({pct(busy)}), "
            f"{len(answers) - len(ok) - len(busy)} other")
