"""``radscreen dicom-listen`` refuses to start, with exit code 2 and the reason, without a spool folder, with an
invalid AE title, or on a port already taken (never a traceback)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from service.cli import main


def test_needs_a_spool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADSCREEN_PACS_SPOOL_DIR", raising=False)
    assert main(["dicom-listen", "--port", "1"]) == 2


def test_invalid_ae_title(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dicom-listen", "--spool-dir", str(tmp_path), "--ae-title", "A\\B"]) == 2
    assert "ae_title" in capsys.readouterr().err


def test_port_taken(tiny_artifact: Path, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["dicom-listen", "--spool-dir", str(tmp_path), "--port", str(port),
                     "--model-dir", str(tiny_artifact)]) == 2
