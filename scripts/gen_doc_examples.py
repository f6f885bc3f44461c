"""Write the documented example responses from a REAL response of the embedded default model.

The OpenAPI example (``service/http/openapi_example.json``, shown at ``/docs``) and the example block of
``docs/integration.md`` (between the ``example:predict-response`` markers) are both produced here, from
scoring one deterministic synthetic fundus photograph (``training.synthetic``, seed 7, grade 3, 512 px) with
the embedded artifact through the same ``service.inference.scoring`` path the API uses. Only ``request_id``,
``study_id`` and ``timing_ms`` are fixed placeholders (they differ on every call); every other value is
the model's. The exam block (``example:exam-response`` markers) is the answer of a live server (the same
scorer, in this process) to ``POST /v1/exams`` with ``examples/fundus-gradable.jpg`` as the right eye and
``examples/fundus-ungradable.jpg`` as the left, each photograph's result cut to the fields that decide
(:func:`exam_excerpt`). ``tests/service/test_doc_examples.py`` re-scores both and fails when a copy drifts
from a real response (e.g. after the embedded model is retrained).

Run after changing the model or the response shape::

    PYTHONPATH=$PWD .venv/bin/python scripts/gen_doc_examples.py
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OPENAPI_EXAMPLE = ROOT / "service" / "http" / "openapi_example.json"
INTEGRATION_DOC = ROOT / "docs" / "integration.md"
BEGIN, END = "<!-- example:predict-response:begin -->", "<!-- example:predict-response:end -->"
EXAM_BEGIN, EXAM_END = "<!-- example:exam-response:begin -->", "<!-- example:exam-response:end -->"
EXAM_PHOTOGRAPHS = {"right": ROOT / "examples" / "fundus-gradable.jpg",
                    "left": ROOT / "examples" / "fundus-ungradable.jpg"}
EXAM_ID = "VISIT-7"
# what the exam block keeps of each photograph's result (the rest is as in /v1/predict)
EXAM_RESULT_KEYS = ("outcome", "outcome_reason", "diagnosis", "uncertainty", "quality", "refer_to_expert",
                    "referral_reasons")
EXAM_UNCERTAINTY_KEYS = ("mutual_information", "referral_threshold_mi")
ELIDED = {"…": "model, entropies, timing_ms, disclaimer as in /v1/predict"}
EXAMPLE_SEED, EXAMPLE_GRADE, EXAMPLE_SIZE = 7, 3, 512
PLACEHOLDERS: dict[str, Any] = {
    "request_id": "5f0c2a9e8b7d4c6a9e1f2b3c4d5e6f70",
    "study_id": "STUDY-42",
    "timing_ms": {"decode": 12.0, "queue": 0.5, "inference": 900.0},
}


def example_image() -> bytes:
    """The example photograph: a deterministic synthetic grade-3 fundus image as PNG bytes."""
    import numpy as np
    from PIL import Image

    from training.synthetic.render import render_fundus

    rgb, _ = render_fundus(np.random.default_rng(EXAMPLE_SEED), EXAMPLE_GRADE, size=EXAMPLE_SIZE, eye="right")
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")  # [H, W, 3] uint8
    return buf.getvalue()


def example_scorer() -> Any:
    """The embedded model, torch fp32 on the CPU: the same numbers on every CPU."""
    from service.inference.loading import load_scorer
    from service.inference.spec import ScorerSpec

    return load_scorer(ScorerSpec(backend="torch", device="cpu", precision="fp32"))


def real_response(scorer: Any = None) -> dict[str, Any]:
    """Score :func:`example_image` with the embedded model; the ``POST /v1/predict`` body with placeholders."""
    from service.inference.prepare import prepare_image
    from service.screening.payload import score_payload

    scorer = scorer if scorer is not None else example_scorer()
    prepared = prepare_image(example_image(), scorer.pipeline)
    [score] = scorer.score_batch([prepared])
    body = score_payload(score, scorer)
    ordered = {"request_id": PLACEHOLDERS["request_id"], "study_id": PLACEHOLDERS["study_id"], **body}
    ordered["timing_ms"] = PLACEHOLDERS["timing_ms"]
    return ordered


def exam_excerpt(body: dict[str, Any]) -> dict[str, Any]:
    """The documented exam answer: placeholder ``request_id``, the model's intended use elided, and each
    photograph's result cut to :data:`EXAM_RESULT_KEYS` (its uncertainty to :data:`EXAM_UNCERTAINTY_KEYS`)."""
    images = []
    for image in body["images"]:
        result = {k: image["result"][k] for k in EXAM_RESULT_KEYS}
        result["uncertainty"] = {k: result["uncertainty"][k] for k in EXAM_UNCERTAINTY_KEYS}
        images.append({**image, "result": {**result, **ELIDED}})
    return {**body, "request_id": PLACEHOLDERS["request_id"], "model": {**body["model"], "intended_use": "…"},
            "images": images}


def real_exam_response(scorer: Any = None) -> dict[str, Any]:
    """``POST /v1/exams`` of :data:`EXAM_PHOTOGRAPHS` to a live server on 127.0.0.1 (scorer: as
    :func:`example_scorer`), as :func:`exam_excerpt` documents it."""
    import httpx

    from service.settings import Settings
    from support.live_server import live_server

    scorer = scorer if scorer is not None else example_scorer()
    settings = Settings(backend="torch", device="cpu", precision="fp32")
    files = [(eye, (path.name, path.read_bytes(), "image/jpeg")) for eye, path in EXAM_PHOTOGRAPHS.items()]
    with live_server(settings, scorer_factory=lambda _spec: scorer) as base:
        response = httpx.post(f"{base}/v1/exams", files=files, data={"exam_id": EXAM_ID}, timeout=120)
    response.raise_for_status()
    return exam_excerpt(dict(response.json()))


def doc_block(body: dict[str, Any], begin: str = BEGIN, end: str = END) -> str:
    """The markdown block that goes between the markers in docs/integration.md."""
    return f"{begin}\n```json\n{json.dumps(body, indent=2, ensure_ascii=False)}\n```\n{end}"


def documented_example(begin: str = BEGIN, end: str = END) -> dict[str, Any]:
    """The JSON currently between the markers of docs/integration.md."""
    text = INTEGRATION_DOC.read_text(encoding="utf-8")
    match = re.search(re.escape(begin) + r"\s*```json\n(.*?)\n```\s*" + re.escape(end), text, re.S)
    if match is None:
        raise ValueError(f"{INTEGRATION_DOC} has no {begin} ... {end} block")
    return dict(json.loads(match.group(1)))


def replace_block(text: str, body: dict[str, Any], begin: str, end: str) -> str | None:
    """``text`` with the block between ``begin`` and ``end`` replaced by ``body``; None without the markers."""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        return None
    return pattern.sub(lambda _: doc_block(body, begin, end), text)


def main() -> int:
    scorer = example_scorer()
    body = real_response(scorer)
    exam = real_exam_response(scorer)
    OPENAPI_EXAMPLE.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    text: str | None = INTEGRATION_DOC.read_text(encoding="utf-8")
    for begin, end, block in ((BEGIN, END, body), (EXAM_BEGIN, EXAM_END, exam)):
        text = replace_block(text or "", block, begin, end)
        if text is None:
            print(f"{INTEGRATION_DOC}: no {begin} ... {end} markers", file=sys.stderr)
            return 1
    INTEGRATION_DOC.write_text(text or "", encoding="utf-8")
    print(f"outcome {body['outcome']}, exam {exam['outcome']}: wrote {OPENAPI_EXAMPLE.name} and {INTEGRATION_DOC.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
