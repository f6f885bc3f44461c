"""The documented example responses are real: docs/integration.md and the OpenAPI example at /docs are
the embedded default model's answer to the example image, and the exam block a live server's answer to the
documented exam request (scripts/gen_doc_examples.py writes them all).

Re-scores the example image with the embedded model and compares every value except the placeholders
(request_id, study_id, timing_ms). When this fails after a model or response change, rerun
``PYTHONPATH=$PWD .venv/bin/python scripts/gen_doc_examples.py`` and review the diff.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER_KEYS = ("request_id", "study_id", "timing_ms")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_doc_examples", ROOT / "scripts" / "gen_doc_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return _generator()


@pytest.fixture(scope="module")
def scorer(gen: ModuleType) -> Any:
    return gen.example_scorer()


@pytest.fixture(scope="module")
def real(gen: ModuleType, scorer: Any) -> dict[str, Any]:
    return dict(gen.real_response(scorer))


def _assert_same(doc: Any, real: Any, where: str) -> None:
    """Equal structure and strings; floats to 1e-5 relative. CPU kernels differ in the last bits between
    processors (AVX2, AVX-512, AMX), and a mutual information of 4e-7 nat is the difference of two entropies
    near 0.5 nat, so its last digits move by about 1e-6 relative from one machine to another."""
    if isinstance(real, dict):
        assert isinstance(doc, dict) and list(doc) == list(real), f"{where}: keys {list(doc)} != {list(real)}"
        for key in real:
            _assert_same(doc[key], real[key], f"{where}.{key}")
    elif isinstance(real, list):
        assert isinstance(doc, list) and len(doc) == len(real), f"{where}: {len(doc)} items != {len(real)}"
        for i, (d, r) in enumerate(zip(doc, real, strict=True)):
            _assert_same(d, r, f"{where}[{i}]")
    elif isinstance(real, float) and not isinstance(real, bool):
        assert doc == pytest.approx(real, rel=1e-5, abs=1e-15), f"{where}: {doc!r} != {real!r}"
    else:
        assert doc == real, f"{where}: {doc!r} != {real!r}"


def test_integration_doc_example_is_a_real_response(gen: ModuleType, real: dict[str, Any]) -> None:
    documented = gen.documented_example()
    _assert_same({k: v for k, v in documented.items() if k not in PLACEHOLDER_KEYS},
                 {k: v for k, v in real.items() if k not in PLACEHOLDER_KEYS}, "docs/integration.md")
    assert list(documented) == list(real)


def test_integration_doc_exam_example_is_a_live_answer(gen: ModuleType, scorer: Any) -> None:
    """The exam block is what a live server answers to the documented request (photographs cut by the
    generator's one rule), its outcome line word for word."""
    documented = gen.documented_example(gen.EXAM_BEGIN, gen.EXAM_END)
    live = gen.real_exam_response(scorer)
    _assert_same({k: v for k, v in documented.items() if k != "request_id"},
                 {k: v for k, v in live.items() if k != "request_id"}, "docs/integration.md exam")
    assert documented["exam_id"] == "VISIT-7" and [im["eye"] for im in documented["images"]] == ["right", "left"]


def test_openapi_example_is_the_same_real_response(gen: ModuleType, real: dict[str, Any]) -> None:
    from service.app import create_app
    from service.http.schemas import EXAMPLE_PREDICTION

    stored = json.loads(gen.OPENAPI_EXAMPLE.read_text(encoding="utf-8"))
    assert stored == EXAMPLE_PREDICTION == gen.documented_example()
    _assert_same(stored, real, "service/http/openapi_example.json")
    schema = create_app().openapi()
    example = schema["components"]["schemas"]["PredictionResponse"]["examples"][0]
    assert example == stored
    route = schema["paths"]["/v1/predict"]["post"]["responses"]["200"]["content"]["application/json"]["example"]
    assert route == stored


def test_documented_quality_issues_and_outcomes_match_the_schema() -> None:
    from typing import get_args

    from service.http.schemas import Outcome, QualityIssue

    text = (ROOT / "docs" / "integration.md").read_text(encoding="utf-8")
    for name in (*get_args(QualityIssue), *get_args(Outcome)):
        assert f"`{name}`" in text, f"docs/integration.md does not mention `{name}`"
