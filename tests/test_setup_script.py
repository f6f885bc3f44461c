"""scripts/setup.sh: which pip commands run for `core` (make serve) and `dev` (make test), in which order.

The script runs in a scratch copy of the repository layout whose ``.venv/bin/python`` records its
arguments instead of installing, so the stamp logic is tested without the network; the real install
(sizes and times in the README) was measured on a fresh clone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCH = '-m pip install --quiet torch==2.13.0'


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> "{tmp_path}/calls.log"\n')
    python.chmod(0o755)
    return tmp_path


def run(repo: Path, *args: str) -> list[str]:
    """Run setup.sh with ``args``; return the python invocations it made (and clear the log)."""
    subprocess.run(["bash", str(repo / "scripts" / "setup.sh"), *args], check=True, env=dict(os.environ))
    log = repo / "calls.log"
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def test_core_installs_torch_first_then_the_project_without_extras(repo: Path) -> None:
    assert run(repo, "core") == [
        "-m pip install --quiet --upgrade pip", TORCH, "-m pip install --quiet -e ."
    ]
    assert (repo / ".venv" / ".radscreen-installed-core").is_file()
    assert run(repo, "core") == []  # stamp fresh: nothing to do


def test_dev_after_core_adds_extras_and_then_serve_needs_nothing(repo: Path) -> None:
    run(repo, "core")
    assert run(repo) == ["-m pip install --quiet --upgrade pip", TORCH, "-m pip install --quiet -e .[dev]"]
    assert run(repo, "core") == []  # dev includes core: no swap back
    assert run(repo, "dev") == []


def test_core_after_dev_installs_nothing(repo: Path) -> None:
    run(repo, "dev")
    assert run(repo, "core") == []
    assert not (repo / ".venv" / ".radscreen-installed-core").exists()


def test_a_newer_pyproject_reinstalls_the_set(repo: Path) -> None:
    run(repo, "dev")
    stamp = repo / ".venv" / ".radscreen-installed-dev"
    past = time.time() - 60
    os.utime(stamp, (past, past))  # pyproject.toml is now newer than the stamp
    assert run(repo, "core")[-1] == "-m pip install --quiet -e ."  # a stale dev stamp does not satisfy core
    assert run(repo, "dev")[-1] == "-m pip install --quiet -e .[dev]"


def test_unknown_set_is_refused(repo: Path) -> None:
    proc = subprocess.run(["bash", str(repo / "scripts" / "setup.sh"), "serve"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "usage:" in proc.stderr and "'serve'" in proc.stderr
