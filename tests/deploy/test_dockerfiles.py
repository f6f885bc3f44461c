"""The Dockerfiles, read for what they do: non-root user, a health check that passes exactly when /readyz
answers 200, a command that serves on the configured address, pinned torch, no training extras or code.

The shell parts (the CMD, the HEALTHCHECK probe, the words of each ``pip install``) are run by a real shell
and a real Python with the image's own ENV and ARG defaults, so a rewording that keeps the behaviour passes
and a change of behaviour fails. tests/deploy/test_image_cpu.py builds the CPU image and checks it served.
"""

from __future__ import annotations

import http.server
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.deploy import DEPLOY, ROOT

DOCKERFILES = ["Dockerfile.cpu", "Dockerfile.gpu"]
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
# pip options followed by a value (the value is not a requirement)
PIP_VALUE_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-r", "--requirement",
                     "-c", "--constraint"}


def instructions(name: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs with line continuations joined and comments dropped."""
    text = (DEPLOY / name).read_text(encoding="utf-8")
    kept = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(kept))
    out = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def args(name: str) -> dict[str, str]:
    """Build-arg defaults of a Dockerfile."""
    return dict(a.split("=", 1) for k, a in instructions(name) if k == "ARG" and "=" in a)


def shell_words(text: str, env: Mapping[str, str]) -> list[str]:
    """The words ``sh`` makes of ``text`` (quotes removed, ``$VAR`` and ``${VAR:+word}`` expanded) under ``env``."""
    done = subprocess.run(["sh", "-c", f'set -- {text}; printf "%s\\0" "$@"'], env=dict(env), capture_output=True,
                          text=True, check=True, timeout=10)
    return done.stdout.split("\0")[:-1]


def image_env(name: str) -> dict[str, str]:
    """The environment the image's processes start with: its ENV instructions in order, on a base PATH."""
    env = {"PATH": BASE_PATH}
    for keyword, arguments in instructions(name):
        if keyword == "ENV":
            env |= dict(word.split("=", 1) for word in shell_words(arguments, env))
    return env


def pip_installs(name: str) -> list[list[str]]:
    """The arguments after ``pip install`` of every pip install the build runs, as the shell passes them."""
    build_args = {"PATH": BASE_PATH, **args(name)}
    out = []
    for keyword, arguments in instructions(name):
        if keyword == "RUN":
            for command in arguments.split("&&"):
                words = shell_words(command, build_args) if command.split()[:2] == ["pip", "install"] else []
                if words:
                    out.append(words[2:])
    return out


def requirements(install: list[str]) -> list[str]:
    """The requirement specifiers of one ``pip install`` (its options and their values left out)."""
    reqs, skip = [], False
    for word in install:
        if skip:
            skip = False
        elif word in PIP_VALUE_OPTIONS:
            skip = True
        elif not word.startswith("-"):
            reqs.append(word)
    return reqs


def option(install: list[str], name: str) -> str | None:
    return install[install.index(name) + 1] if name in install else None


def project_name(requirement: str) -> str:
    return re.split(r"[\[=<>!~; ]", requirement, maxsplit=1)[0].lower()


def installs_of(name: str, package: str) -> list[tuple[list[str], str]]:
    """``(install arguments, requirement)`` for every requirement of ``package`` the build installs."""
    return [(i, r) for i in pip_installs(name) for r in requirements(i) if project_name(r) == package]


def exec_form(arguments: str) -> list[str]:
    """The JSON array of an exec-form CMD (or of a HEALTHCHECK's CMD)."""
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), arguments
    return value


@pytest.mark.parametrize("name", DOCKERFILES)
def test_runs_as_non_root(name: str) -> None:
    users = [a for k, a in instructions(name) if k == "USER"]
    assert users, f"{name} has no USER"
    assert users[-1].split(":")[0] not in {"root", "0"}


@contextmanager
def readyz_stub(status: list[int]) -> Iterator[int]:
    """An HTTP server on 127.0.0.1 answering GET /readyz with ``status[0]`` (404 elsewhere); yields its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status[0] if self.path == "/readyz" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


@pytest.mark.parametrize("name", DOCKERFILES)
def test_health_check_passes_exactly_when_readyz_answers_200_on_the_listen_port(name: str) -> None:
    checks = [a for k, a in instructions(name) if k == "HEALTHCHECK"]
    assert len(checks) == 1
    _options, _, probe = checks[0].partition(" CMD ")
    argv = exec_form(probe)
    if argv[0] in ("python", "python3"):  # the image's venv Python; -I: the probe needs the standard library only
        argv[:1] = [sys.executable, "-I"]
    status = [200]
    with readyz_stub(status) as port:
        env = {**image_env(name), "PATH": BASE_PATH, "RADSCREEN_LISTEN_PORT": str(port)}

        def probe_exit() -> int:
            return subprocess.run(argv, env=env, capture_output=True, timeout=30, check=False).returncode

        assert probe_exit() == 0
        status[0] = 503  # loading, or the model failed
        assert probe_exit() != 0
    assert probe_exit() != 0  # nothing listens on the port any more


@pytest.mark.parametrize("name", DOCKERFILES)
def test_command_serves_on_the_configured_address_and_the_exposed_port(name: str, tmp_path: Path) -> None:
    """The CMD run by ``sh`` with the image's ENV, ``radscreen`` replaced by a stub printing its arguments."""
    stub = tmp_path / "radscreen"
    stub.write_text('#!/bin/sh\nprintf "%s\\0" "$@"\n', encoding="utf-8")
    stub.chmod(0o755)
    command = exec_form([a for k, a in instructions(name) if k == "CMD"][-1])
    env = image_env(name)

    def served_with(overrides: Mapping[str, str]) -> list[str]:
        run_env = {**env, **overrides, "PATH": f"{tmp_path}{os.pathsep}{BASE_PATH}"}
        done = subprocess.run(command, env=run_env, capture_output=True, text=True, timeout=10, check=True)
        return done.stdout.split("\0")[:-1]

    port = env["RADSCREEN_LISTEN_PORT"]
    assert served_with({}) == ["serve", "--host", "0.0.0.0", "--port", port]
    assert [a for k, a in instructions(name) if k == "EXPOSE"] == [port]
    # `docker run --env` moves the server; the health check reads the same variable (test above)
    assert served_with({"RADSCREEN_LISTEN_HOST": "127.0.0.1", "RADSCREEN_LISTEN_PORT": "9123"}) == [
        "serve", "--host", "127.0.0.1", "--port", "9123"]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_venv_comes_first_on_path(name: str) -> None:
    env = image_env(name)
    assert env["PATH"].split(os.pathsep)[0] == f"{env['VIRTUAL_ENV']}/bin"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_torch_is_pinned_and_no_training_extras_or_code(name: str) -> None:
    (_, torch), = installs_of(name, "torch")
    assert re.fullmatch(r"torch==\d+\.\d+\.\d+(\+cpu)?", torch), torch
    projects = [r for i in pip_installs(name) for r in requirements(i) if r.startswith(".")]
    assert projects == ["."], "the project is installed once, without extras (train, batch, dev, ray)"
    copies = [a.split()[0] for k, a in instructions(name) if k == "COPY"]
    assert "training" not in copies, "the serving image must not carry the training package"
    assert {"models", "service", "pyproject.toml"} <= set(copies)


def test_cpu_image_installs_the_local_torch_cpu_build_and_no_torchvision() -> None:
    """The CPU build of the torch these tests run on (the image test compares its numbers with this checkout)."""
    (install, torch), = installs_of("Dockerfile.cpu", "torch")
    assert torch == f"torch=={importlib.metadata.version('torch').split('+')[0]}+cpu"
    index = option(install, "--index-url")
    assert index is not None and index.rstrip("/").endswith("/whl/cpu")
    assert option(install, "--find-links") is None  # optional local wheels; by default the CPU index only
    assert not installs_of("Dockerfile.cpu", "torchvision")
    # the project itself without dependencies (the deps stage installed them), then `pip check` in the same step
    pip_steps = [[shell_words(step, {}) if step.split()[:1] == ["pip"] else [] for step in run.split("&&")]
                 for keyword, run in instructions("Dockerfile.cpu") if keyword == "RUN"]
    project = [(words, steps[i + 1:]) for steps in pip_steps for i, words in enumerate(steps)
               if words[:2] == ["pip", "install"] and requirements(words[2:]) == ["."]]
    assert len(project) == 1
    (words, after), = project
    assert "--no-deps" in words and ["pip", "check"] in after


@pytest.mark.parametrize(("name", "base"), [("Dockerfile.cpu", r"python:3\.11-slim"),
                                          ("Dockerfile.gpu", r"nvidia/cuda:\d+\.\d+\.\d+-cudnn-runtime-ubuntu22\.04")])
def test_base_image_is_a_build_arg_with_the_documented_default(name: str, base: str) -> None:
    froms = [a for k, a in instructions(name) if k == "FROM"]
    # the first stage starts from the build arg; later stages only from earlier stages
    assert froms[0].split()[0] == "${BASE_IMAGE}"
    stages = {a.split()[2] for a in froms if len(a.split()) == 3 and a.split()[1].upper() == "AS"}
    assert all(a.split()[0] in stages for a in froms[1:])
    assert re.fullmatch(base, args(name)["BASE_IMAGE"])


# PyTorch's release matrix: the CUDA lines each torch release ships wheels for (download.pytorch.org/whl/cuXYZ).
# 2.13: CUDA 12.6 and 13.0 (12.8 was dropped in 2.12). Its default PyPI wheel is the 13.0 build: torch 2.13.0's
# metadata on PyPI requires cuda-toolkit==13.0.3 and nvidia-cudnn-cu13==9.20.0.48 (read with
# `pip install --dry-run --no-deps --report - torch==2.13.0 --platform manylinux_2_28_x86_64`).
TORCH_CUDA_LINES = {"2.13.0": {"12.6", "13.0"}}


def gpu_cuda_line() -> tuple[str, str]:
    """``(major.minor, major)`` of the GPU image's base image, e.g. ("13.0", "13")."""
    m = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.\d+-cudnn-runtime-ubuntu22\.04", args("Dockerfile.gpu")["BASE_IMAGE"])
    assert m, "BASE_IMAGE is not an nvidia/cuda cudnn-runtime image"
    return f"{m.group(1)}.{m.group(2)}", m.group(1)


def test_gpu_image_torch_comes_from_the_base_images_cuda_line() -> None:
    a = args("Dockerfile.gpu")
    line, _ = gpu_cuda_line()
    assert a["CUDA_LINE"] == line
    assert line in TORCH_CUDA_LINES[a["TORCH_VERSION"]], f"torch {a['TORCH_VERSION']} has no CUDA {line} wheels"
    assert a["TORCH_INDEX"] == f"https://download.pytorch.org/whl/cu{line.replace('.', '')}"
    (install, torch), = installs_of("Dockerfile.gpu", "torch")
    assert torch == f"torch=={a['TORCH_VERSION']}" and option(install, "--index-url") == a["TORCH_INDEX"]
    assert [r for _, r in installs_of("Dockerfile.gpu", "onnxruntime-gpu")] == [
        f"onnxruntime-gpu=={a['ONNXRUNTIME_GPU_VERSION']}"]
    # nothing imports torchvision: the image does not carry it (images are decoded by Pillow on the CPU)
    assert not installs_of("Dockerfile.gpu", "torchvision")


def test_gpu_image_onnxruntime_gpu_is_built_for_the_base_images_cuda_major() -> None:
    """Read from the installed onnxruntime-gpu itself: its build info and the CUDA libraries its CUDA provider
    links. A mismatch makes ORT fall back to the CPU on the GPU image (or, now, refuse to start)."""
    from support.cuda_line import installed_onnxruntime_cuda_line

    pinned = args("Dockerfile.gpu")["ONNXRUNTIME_GPU_VERSION"]
    ort = installed_onnxruntime_cuda_line()
    if (ort.package, ort.version) != ("onnxruntime-gpu", pinned):  # its metadata is not the pinned build's
        pytest.skip(f"the GPU image pins onnxruntime-gpu {pinned}, this environment has {ort.package} {ort.version}: "
                    "the pinned build's CUDA line can only be read with it installed")
    line, major = gpu_cuda_line()
    assert ort.build_cuda is not None and ort.build_cuda.split(".")[0] == major, (ort.build_cuda, line)
    assert ort.needed_cuda_majors == {int(major)}, ort.needed


def test_dockerignore_keeps_heavy_and_private_paths_out_of_the_context() -> None:
    ignored = set((ROOT / ".dockerignore").read_text(encoding="utf-8").split())
    assert {".git", ".venv", "data", "runs"} <= ignored


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_model_dir_points_into_the_copied_tree(name: str) -> None:
    env = " ".join(a for k, a in instructions(name) if k == "ENV")
    match = re.search(r"RADSCREEN_MODEL_DIR=(\S+)", env)
    assert match, f"{name} does not set RADSCREEN_MODEL_DIR"
    workdir = [a for k, a in instructions(name) if k == "WORKDIR"][-1]
    assert match.group(1).startswith(f"{workdir}/models/")  # COPY models ./models lands there
