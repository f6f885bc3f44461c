"""Two replicas give identical answers: the K posterior draws are fixed by the artifact's seed, not drawn
per process, so a load balancer may send a patient's photographs to any replica.

Two real service processes (uvicorn, as deployed), started independently and with different thread counts,
answer the same photographs; everything but the request id and the timings must be equal, bit for bit.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from support.images import blank_png, fundus_png
from tests.helpers.service_process import running_service

PHOTOS = [fundus_png(seed, size=160) for seed in range(4)] + [blank_png()]


def answer(base: str, png: bytes) -> dict[str, Any]:
    reply = httpx.post(f"{base}/v1/predict", content=png, headers={"Content-Type": "image/png"}, timeout=60)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    body.pop("request_id"), body.pop("timing_ms")
    return body


def test_two_replicas_answer_identically(tiny_artifact: Path, tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        bases = [stack.enter_context(running_service(tiny_artifact, tmp_path / f"replica{i}.log",
                                                     env={"RADSCREEN_BACKEND": "auto",
                                                          "RADSCREEN_THREADS": str(threads)}))
                 for i, threads in enumerate((1, 2))]
        with ThreadPoolExecutor(4) as pool:  # concurrent requests: each replica batches them as they come
            first = list(pool.map(lambda png: answer(bases[0], png), PHOTOS))
            second = list(pool.map(lambda png: answer(bases[1], png), reversed(PHOTOS)))[::-1]
    assert first == second
    assert {a["outcome"] for a in first} >= {"retake_ungradable"}  # the blank image is in the comparison
    assert len({a["uncertainty"]["mutual_information"] for a in first}) >= 4  # distinct photographs compared
