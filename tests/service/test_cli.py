"""The ``radscreen`` console script: argument handling, artifact pre-check, batch dispatch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from service.cli import main


def test_serve_refuses_a_bad_artifact_before_starting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--model-dir", str(tmp_path / "nope"), "--port", "0"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_serve_refuses_a_tampered_artifact(
    tiny_artifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_artifact, copy)
    (copy / "MODEL_CARD.md").write_text("tampered\n")
    assert main(["serve", "--model-dir", str(copy)]) == 2
    assert "MODEL_CARD.md" in capsys.readouterr().err


def test_unknown_command_and_help() -> None:
    with pytest.raises(SystemExit) as info:
        main(["nonsense"])
    assert info.value.code == 2
    out = subprocess.run([sys.executable, "-m", "service", "--help"], capture_output=True, text=True, check=True)
    assert "serve" in out.stdout and "batch" in out.stdout


def test_batch_is_dispatched_to_the_batch_cli() -> None:
    pytest.importorskip("service.batch.cli")
    out = subprocess.run([sys.executable, "-m", "service", "batch", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "score" in out.stdout
    assert out.stdout.startswith("usage: radscreen batch ")  # the command as typed, not radscreen-batch
