"""scripts/setup.sh: which pip commands run for `core` (make serve) and `dev` (make test), in which order,
and which torch build it chooses (CPU index, pip's own configuration, CUDA on a GPU machine, kept as found);
and that a missing prerequisite (Python < 3.11 or without venv, another platform, too little disk) stops it
with one line before anything is made or downloaded.

The script runs in a scratch copy of the repository layout whose ``.venv/bin/python`` records its pip
arguments instead of installing and answers ``import torch`` with the build the last recorded torch install
would have brought; the CPU-index probe runs for real (python3's urllib) against a local HTTP server or a
closed port, and ``nvidia-smi`` is a stand-in that lists a GPU or none. No network is used. The real install
(sizes and times in docs/install.md) was measured on a fresh clone.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCH = "-m pip install --quiet torch==2.13.0"
PEER = "-m pip install --quiet --no-deps bayesian-torch==0.5.0"  # dev: the peer of bench_peer
CLOSED = "http://127.0.0.1:9/whl/cpu"  # nothing listens on the discard port: the index "does not answer"

FAKE_PYTHON = """#!/bin/bash
state="{root}/torch-installed"
case "$1 $2" in
    "-c import torch"*) [ -f "$state" ] && cat "$state" && exit 0; exit 1 ;;
    "-c import sys, urllib"*) exec python3 "$@" ;;
esac
echo "$*" >> "{root}/calls.log"
if [[ "$*" == *"install"*"torch=="* ]]; then
    if [[ "$*" == *--index-url* ]]; then echo "2.13.0+cpu None" > "$state"; else echo "$FAKE_PIP_TORCH" > "$state"; fi
fi
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON.format(root=tmp_path))
    python.chmod(0o755)
    gpu(tmp_path, False)
    return tmp_path


def gpu(repo: Path, present: bool) -> None:
    """A stand-in nvidia-smi on the script's PATH: ``-L`` lists one GPU, or fails as on a machine without one."""
    smi = repo / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100'\n" if present else "#!/bin/sh\nexit 9\n")
    smi.chmod(0o755)


@pytest.fixture
def cpu_index() -> Iterator[str]:
    """A local HTTP server standing in for the CPU wheel index: its /whl/cpu/torch/ page answers 200."""

    class Index(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/whl/cpu/torch/" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    server.shutdown()
    server.server_close()


def setup(repo: Path, *args: str, index: str = CLOSED, pip_torch: str = "2.13.0+cpu None",
          **env: str) -> subprocess.CompletedProcess[str]:
    """Run setup.sh with ``args``; ``pip_torch`` is what a torch install from pip's own configuration brings."""
    environ = dict(os.environ, PATH=f"{repo / 'bin'}:{os.environ['PATH']}", RADSCREEN_TORCH_CPU_INDEX=index,
                   RADSCREEN_TORCH_INDEX_TIMEOUT_S="2", FAKE_PIP_TORCH=pip_torch,
                   **{"RADSCREEN_SETUP_MIN_FREE_MB": "0", **env})
    if "RADSCREEN_TORCH" not in env:
        environ.pop("RADSCREEN_TORCH", None)
    return subprocess.run(["bash", str(repo / "scripts" / "setup.sh"), *args], env=environ, capture_output=True,
                          text=True, check=False, timeout=60)


def run(repo: Path, *args: str, **kwargs: str) -> list[str]:
    """Run setup.sh with ``args``; return the pip invocations it made (and clear the log)."""
    proc = setup(repo, *args, **kwargs)
    assert proc.returncode == 0, proc.stderr
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
    # torch is already there from core: kept, not installed again
    assert run(repo) == ["-m pip install --quiet --upgrade pip", "-m pip install --quiet -e .[dev]", PEER]
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
    assert run(repo, "dev")[-2:] == ["-m pip install --quiet -e .[dev]", PEER]


def test_unknown_set_is_refused(repo: Path) -> None:
    proc = setup(repo, "serve")
    assert proc.returncode == 2
    assert "usage:" in proc.stderr and "'serve'" in proc.stderr


def test_cpu_machine_takes_torch_from_the_cpu_index_and_says_so(repo: Path, cpu_index: str) -> None:
    proc = setup(repo, "core", index=cpu_index)
    assert proc.returncode == 0, proc.stderr
    calls = (repo / "calls.log").read_text().splitlines()
    assert calls[1] == f"-m pip install --quiet --index-url {cpu_index} torch==2.13.0"
    assert f"CPU build of torch 2.13.0 from {cpu_index}" in proc.stdout
    assert "setup: torch 2.13.0+cpu (torch.version.cuda: None)" in proc.stdout


def test_unreachable_cpu_index_falls_back_to_pips_configuration(repo: Path) -> None:
    start = time.monotonic()
    proc = setup(repo, "core", index=CLOSED)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 30
    assert (repo / "calls.log").read_text().splitlines()[1] == TORCH
    assert f"{CLOSED} did not answer" in proc.stderr
    assert "setup: torch 2.13.0+cpu (torch.version.cuda: None)" in proc.stdout
    assert "warning" not in proc.stderr


def test_a_cuda_build_from_the_fallback_without_a_gpu_is_flagged(repo: Path) -> None:
    proc = setup(repo, "core", index=CLOSED, pip_torch="2.13.0+cu128 12.8")
    assert proc.returncode == 0, proc.stderr
    assert "setup: torch 2.13.0+cu128 (torch.version.cuda: 12.8)" in proc.stdout
    assert "warning: a CUDA build of torch on a machine without a GPU" in proc.stderr


def test_gpu_machine_takes_the_default_cuda_build_without_probing(repo: Path, cpu_index: str) -> None:
    gpu(repo, True)
    proc = setup(repo, "core", index=cpu_index, pip_torch="2.13.0+cu128 12.8")
    assert proc.returncode == 0, proc.stderr
    assert (repo / "calls.log").read_text().splitlines()[1] == TORCH
    assert "setup: torch 2.13.0+cu128 (torch.version.cuda: 12.8)" in proc.stdout
    assert "warning" not in proc.stderr


def test_explicit_cpu_on_a_gpu_machine_takes_the_cpu_index(repo: Path, cpu_index: str) -> None:
    gpu(repo, True)
    calls = run(repo, "core", index=cpu_index, RADSCREEN_TORCH="cpu")
    assert calls[1] == f"-m pip install --quiet --index-url {cpu_index} torch==2.13.0"


def test_an_installed_cuda_torch_is_kept(repo: Path, cpu_index: str) -> None:
    (repo / "torch-installed").write_text("2.13.0+cu128 12.8\n")
    gpu(repo, True)
    proc = setup(repo, "dev", index=cpu_index)
    assert proc.returncode == 0, proc.stderr
    calls = (repo / "calls.log").read_text().splitlines()
    assert not any(" torch==" in c for c in calls)  # the project's torch; the peer's name ends in -torch
    assert calls[-2:] == ["-m pip install --quiet -e .[dev]", PEER]
    assert "torch already in .venv, kept" in proc.stdout
    assert "setup: torch 2.13.0+cu128 (torch.version.cuda: 12.8)" in proc.stdout


def test_unknown_torch_choice_is_refused(repo: Path) -> None:
    proc = setup(repo, "core", RADSCREEN_TORCH="rocm")
    assert proc.returncode == 2 and "RADSCREEN_TORCH must be auto, cpu or cuda" in proc.stderr


# A stand-in interpreter that is not yet a venv: answers the version probes, records anything else it is asked
# (a `-m venv`, a pip download) so a test can see that nothing was.
FAKE_SYSTEM_PYTHON = """#!/bin/bash
case "$2" in
    *"print("*) echo {version}; exit 0 ;;
    *"version_info < (3, 11)"*) exit {too_old} ;;
    *"import ensurepip, venv"*) exit {no_venv} ;;
esac
echo "$*" >> "{root}/calls.log"
"""


def system_python(repo: Path, version: str, *, no_venv: bool = False) -> str:
    """A fresh checkout (no .venv) and a stand-in ``python<version>`` for the script's $PYTHON."""
    shutil.rmtree(repo / ".venv")
    python = repo / "bin" / f"python{version}"
    too_old = int(tuple(map(int, version.split("."))) < (3, 11))
    python.write_text(FAKE_SYSTEM_PYTHON.format(version=version, too_old=too_old, no_venv=int(no_venv), root=repo))
    python.chmod(0o755)
    return str(python)


def refused_before_any_download(repo: Path, proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 3, proc.stderr
    assert not (repo / "calls.log").exists() and not (repo / ".venv").exists()  # nothing made, nothing fetched
    return proc.stderr.strip()


def test_python_3_10_fails_at_once_naming_the_version(repo: Path) -> None:
    python = system_python(repo, "3.10")
    start = time.monotonic()
    err = refused_before_any_download(repo, setup(repo, "dev", PYTHON=python))
    assert time.monotonic() - start < 10
    assert err == (f"setup: Python >= 3.11 is needed; {python} is Python 3.10. Install a newer one and rerun "
                   "with PYTHON=python3.11 (or 3.12, 3.13)")


def test_python_without_its_venv_module_is_named(repo: Path) -> None:
    python = system_python(repo, "3.11", no_venv=True)
    err = refused_before_any_download(repo, setup(repo, "core", PYTHON=python))
    assert "has no venv module" in err and "python3-venv" in err


def test_a_good_python_goes_on_to_make_the_venv(repo: Path) -> None:
    python = system_python(repo, "3.12")
    setup(repo, "core", PYTHON=python)  # the stand-in makes no venv, so the script stops after asking for one
    assert (repo / "calls.log").read_text().splitlines()[0] == "-m venv .venv"


def test_another_machine_is_refused(repo: Path) -> None:
    uname = repo / "bin" / "uname"
    uname.write_text('#!/bin/sh\n[ "$1" = -m ] && echo aarch64 || echo Linux\n')
    uname.chmod(0o755)
    shutil.rmtree(repo / ".venv")
    err = refused_before_any_download(repo, setup(repo, "core"))
    assert err == "setup: Linux x86-64 is needed (torch 2.13.0 and onnxruntime-gpu wheels); this is Linux aarch64"


def test_too_little_disk_is_refused(repo: Path) -> None:
    proc = setup(repo, "dev", RADSCREEN_SETUP_MIN_FREE_MB=str(10**12))
    assert proc.returncode == 3 and not (repo / "calls.log").exists()
    assert f"the 'dev' set needs about {10**12} MB" in proc.stderr
