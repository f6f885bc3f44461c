"""$RADSCREEN_SHARED_DATA points the real-photograph tests at the shared data folder (support/shared_data.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.shared_data import REPO_ROOT, shared_data_dir

SHOW = "from support.images import IDRID; from support.shared_data import missing_reason; " \
       "print(IDRID); print(missing_reason(IDRID))"


def show(env: dict[str, str]) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", SHOW], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          check=True, timeout=60)
    return proc.stdout.splitlines()


def test_the_variable_moves_every_real_photograph_path(tmp_path: Path) -> None:
    env = dict(os.environ, RADSCREEN_SHARED_DATA=str(tmp_path))
    idrid, reason = show(env)
    assert Path(idrid) == tmp_path / "idrid-lesion-54"
    assert reason == f"real photographs not found at {tmp_path / 'idrid-lesion-54'} (set RADSCREEN_SHARED_DATA " \
                     "to the shared data folder)"


def test_default_is_the_shared_folder_beside_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADSCREEN_SHARED_DATA", raising=False)
    assert shared_data_dir() == REPO_ROOT.parent / "shared" / "data"
    env = {k: v for k, v in os.environ.items() if k != "RADSCREEN_SHARED_DATA"}
    assert Path(show(env)[0]) == REPO_ROOT.parent / "shared" / "data" / "idrid-lesion-54"
