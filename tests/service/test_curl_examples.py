"""Every ``curl`` line of README.md and docs/integration.md, run as written against a real server.

The lines are taken from the documents' fenced ``bash`` blocks (nothing is restated here), the host
``http://127.0.0.1:8000`` is replaced by a live uvicorn server with the tiny test model, and each line
runs with the real ``curl`` in a shell: README lines from the repository root (they use
``examples/*.jpg``), docs/integration.md lines in order in a folder holding a copy of ``examples/`` and the
``fundus.jpg``, ``a.jpg``, ``b.png``, ``right.dcm`` and ``left.dcm`` they name (the DICOM files wrap the
example photograph; ``b.png`` and ``left.dcm``, the left eye's, hold it mirrored: one photograph cannot stand for
both eyes).
Lines that send ``X-API-Key: s3cret`` go to a server started with that key.
Each answer must be a success of the kind the line asks for: no problem+json, and the documented
shape (a prediction with its outcome, a FHIR Bundle, a batch of results, the model, metrics).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.live_server import live_server, settings_for
from support.processes import ROOT

DOC_HOST = "http://127.0.0.1:8000"
API_KEY = "s3cret"
OUTCOMES = {"refer_referable_dr", "grader_review_uncertain", "retake_ungradable", "no_referable_dr"}
FENCE = re.compile(r"```bash\n(.*?)```", re.DOTALL)

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl command line tool")


def curl_lines(doc: Path) -> list[str]:
    """The ``curl`` command lines of ``doc``'s bash blocks, in document order."""
    lines = []
    for block in FENCE.findall(doc.read_text()):
        lines += [line.strip() for line in block.splitlines() if line.strip().startswith("curl ")]
    return lines


@pytest.fixture(scope="module")
def servers(tiny_artifact: Path) -> Iterator[dict[bool, str]]:
    """Base URLs of two live servers: without (False) and with (True) the documented API key."""
    with (
        live_server(settings_for(tiny_artifact, max_upload_bytes=20 * 1024 * 1024)) as open_base,
        live_server(settings_for(tiny_artifact, max_upload_bytes=20 * 1024 * 1024, api_key=API_KEY)) as keyed,
    ):
        yield {False: open_base, True: keyed}


def run(line: str, servers: dict[bool, str], cwd: Path) -> str:
    """Run one documented line against the matching server; its stdout."""
    base = servers[f"X-API-Key: {API_KEY}" in line]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # `python` = venv
    done = subprocess.run(["bash", "-o", "pipefail", "-c", line.replace(DOC_HOST, base)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (line, done.stderr)
    assert done.stdout.strip() or ">" in line, line  # a redirected line writes its file instead
    return done.stdout


def check_answer(line: str, out: str) -> None:
    """The answer is the success the line asks for, in its documented shape."""
    if "/metrics" in line:
        assert all(row.startswith("radscreen_") for row in out.splitlines()) and "radscreen_requests_total" in out
        return
    if ">" in line.split("/v1/")[-1]:  # e.g. `... > result.json`: checked by the line that reads the file
        return
    body: dict[str, Any] = json.loads(out)
    assert "/problems/" not in str(body.get("type", "")), (line, body)
    if "fhir" in line:
        assert body["resourceType"] == "Bundle" and body["entry"], line
    elif "/v1/exams" in line:
        assert body["outcome"] in OUTCOMES and set(body["eyes"]) == {"right", "left"}, line
        assert len(body["images"]) == len(re.findall(r"-F (?:right|left|image)=@", line)), line
    elif "/v1/predict/batch" in line:
        assert body["count"] == len(re.findall(r"-F image=@", line)) and all("result" in i for i in body["items"])
    elif "/predict" in line:
        assert body["outcome"] in OUTCOMES, line
        assert body["model"]["training_data"] and body["model"]["intended_use"], line
    elif "/v1/model" in line:
        assert body["model"]["name"] and body["calibration"]["referral_threshold_mi"] > 0, line


def test_readme_curl_lines_answer_as_documented(servers: dict[bool, str]) -> None:
    lines = curl_lines(ROOT / "README.md")
    assert lines, "README.md has no curl line"  # the quick start's one request
    for line in lines:
        check_answer(line, run(line, servers, ROOT))


def test_integration_doc_curl_lines_answer_as_documented(servers: dict[bool, str], tmp_path: Path) -> None:
    lines = curl_lines(ROOT / "docs" / "integration.md")
    assert len(lines) >= 16, lines  # the example-image block and the curl block
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    example = ROOT / "examples" / "fundus-gradable.jpg"
    for name in ("fundus.jpg", "a.jpg"):
        shutil.copy(example, tmp_path / name)
    from PIL import Image

    with Image.open(example) as photo:  # the other eye: the example mirrored (the same pixels would be refused)
        photo.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(tmp_path / "b.png")
    from tests.helpers.dicom_files import JPEG_BASELINE, op_dicom, rgb_of

    for side, name, rgb in (("R", "right.dcm", rgb_of(example)), ("L", "left.dcm", rgb_of(example)[:, ::-1].copy())):
        (tmp_path / name).write_bytes(op_dicom(rgb, syntax=JPEG_BASELINE, laterality=side))
    for line in lines:  # in order: a later line may read what an earlier one wrote (result.json)
        check_answer(line, run(line, servers, tmp_path))
    assert json.loads((tmp_path / "result.json").read_text())["outcome"]
