"""Suite-wide test settings, and the synthetic data set the training and gpu tests share."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from hypothesis import settings

# CI runs must be reproducible: a property test explores the same examples on every CI run (locally it
# keeps exploring new ones, which is where new counter-examples are found).
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

# A GPU node has torch but not the service's web stack (FastAPI, pydantic, uvicorn, pydicom): there only the
# gpu folder (tests/gpu, which collects without it) is collected, so `pytest -m gpu tests` runs its tests
# instead of stopping on the service modules' import errors. Where the stack is installed (CI) nothing changes.
WEB_STACK = ("fastapi", "pydantic", "uvicorn", "pydicom")


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):  # an import blocker (tests/helpers/no_web_stack), or a None in sys.modules
        return True


MISSING_WEB_STACK = [name for name in WEB_STACK if _missing(name)]
collect_ignore_glob = [f"{p.name}/*" for p in Path(__file__).parent.iterdir()
                       if p.is_dir() and p.name not in ("gpu", "helpers")] if MISSING_WEB_STACK else []


def pytest_report_header() -> str | None:
    if not MISSING_WEB_STACK:
        return None
    return (f"web stack missing ({', '.join(MISSING_WEB_STACK)}): only tests/gpu is collected "
            "(the gpu tests run without it)")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say once, under the skips, how many tests wanted the real photographs and where they were looked for."""
    from support.shared_data import ENV_VAR, SHARED_DATA

    marker = "real photographs not found at "  # support.shared_data.missing_reason
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if marker in str(getattr(r, "longrepr", ""))]
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} skipped for want of the real photographs: looked in {SHARED_DATA}; set {ENV_VAR} to "
            "the shared data folder (docs/testing.md, 'Real photographs')")


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """48 gradable synthetic images at 64 px (EyePACS layout), made once per session; read-only for tests."""
    from training.synthetic.dataset import generate_dataset

    root = tmp_path_factory.mktemp("synth")
    generate_dataset(root, n_images=48, seed=7, size=64, ungradable_fraction=0.0)
    return root
