"""Write the documented example responses from a REAL response of the embedded default model.

The OpenAPI example (``service/openapi_example.json``, shown at ``/docs``) and the example block of
``docs/integration.md`` (between the ``example:predict-response`` markers) are both produced here, from
scoring one deterministic synthetic fundus photograph (``training.synthetic``, seed 7, grade 3, 512 px) with
the embedded artifact through the same ``service.inference.scoring`` path the API uses. Only ``request_id``,
``study_id`` and ``timing_ms`` are fixed placeholders (they differ on every call); every other value is
the model's. ``tests/service/test_doc_examples.py`` re-scores the same image and fails when either copy
drifts from a real response (e.g. after the embedded model is retrained).

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
OPENAPI_EXAMPLE = ROOT / "service" / "openapi_example.json"
INTEGRATION_DOC = ROOT / "docs" / "integration.md"
BEGIN, END = "<!-- example:predict-response:begin -->", "<!-- example:predict-response:end -->"
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


def real_response() -> dict[str, Any]:
    """Score :func:`example_image` with the embedded model; the ``POST /v1/predict`` body with placeholders."""
    from service.inference.loading import load_scorer
    from service.inference.prepare import prepare_image
    from service.inference.spec import ScorerSpec
    from service.payload import score_payload

    scorer = load_scorer(ScorerSpec(backend="torch", device="cpu", precision="fp32"))  # the same on every CPU
    prepared = prepare_image(example_image(), scorer.pipeline)
    [score] = scorer.score_batch([prepared])
    body = score_payload(score, scorer)
    ordered = {"request_id": PLACEHOLDERS["request_id"], "study_id": PLACEHOLDERS["study_id"], **body}
    ordered["timing_ms"] = PLACEHOLDERS["timing_ms"]
    return ordered


def doc_block(body: dict[str, Any]) -> str:
    """The markdown block that goes between the markers in docs/integration.md."""
    return f"{BEGIN}\n```json\n{json.dumps(body, indent=2, ensure_ascii=False)}\n```\n{END}"


def documented_example() -> dict[str, Any]:
    """The JSON currently between the markers of docs/integration.md."""
    text = INTEGRATION_DOC.read_text(encoding="utf-8")
    match = re.search(re.escape(BEGIN) + r"\s*```json\n(.*?)\n```\s*" + re.escape(END), text, re.S)
    if match is None:
        raise ValueError(f"{INTEGRATION_DOC} has no {BEGIN} ... {END} block")
    return dict(json.loads(match.group(1)))


def main() -> int:
    body = real_response()
    OPENAPI_EXAMPLE.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    text = INTEGRATION_DOC.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        print(f"{INTEGRATION_DOC}: no {BEGIN} ... {END} markers", file=sys.stderr)
        return 1
    INTEGRATION_DOC.write_text(pattern.sub(lambda _: doc_block(body), text), encoding="utf-8")
    print(f"outcome {body['outcome']}: wrote {OPENAPI_EXAMPLE.name} and {INTEGRATION_DOC.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
