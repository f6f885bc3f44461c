"""The Dockerfiles: non-root user, health check on /readyz, pinned torch, no training extras or code."""

from __future__ import annotations

import re

import pytest

from tests.deploy.conftest import DEPLOY, ROOT


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


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_runs_as_non_root_with_readyz_healthcheck(name: str) -> None:
    ins = instructions(name)
    users = [a for k, a in ins if k == "USER"]
    assert users, f"{name} has no USER"
    assert users[-1].split(":")[0] not in {"root", "0"}
    health = [a for k, a in ins if k == "HEALTHCHECK"]
    assert len(health) == 1 and "/readyz" in health[0]
    cmd = [a for k, a in ins if k == "CMD"][-1]
    assert '"radscreen", "serve", "--host", "0.0.0.0"' in cmd


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_torch_is_pinned_and_no_training_extras(name: str) -> None:
    ins = instructions(name)
    runs = " ".join(a for k, a in ins if k == "RUN")
    assert re.match(r"^\d+\.\d+\.\d+$", args(name)["TORCH_VERSION"])
    assert '"torch==${TORCH_VERSION}"' in runs
    for extra in ("train", "batch", "dev", "ray"):
        assert f"[{extra}" not in runs and f",{extra}" not in runs
    copies = [a.split()[0] for k, a in ins if k == "COPY"]
    assert "training" not in copies, "the serving image must not carry the training package"
    assert {"models", "service", "pyproject.toml"} <= set(copies)


def test_cpu_image_uses_the_cpu_index_and_no_torchvision() -> None:
    ins = instructions("Dockerfile.cpu")
    assert [a for k, a in ins if k == "FROM"] == ["python:3.11-slim"]
    assert args("Dockerfile.cpu")["TORCH_INDEX"].endswith("/whl/cpu")
    assert args("Dockerfile.cpu")["TORCH_VERSION"] == "2.13.0"
    assert "torchvision" not in " ".join(a for k, a in ins if k == "RUN")


def test_gpu_image_is_cuda_with_torchvision_and_onnxruntime_gpu_pinned() -> None:
    a = args("Dockerfile.gpu")
    assert re.match(r"nvidia/cuda:12\.\d+\.\d+-cudnn-runtime-ubuntu22\.04", a["CUDA_IMAGE"])
    assert "/whl/cu12" in a["TORCH_INDEX"]
    assert re.match(r"^\d+\.\d+\.\d+$", a["TORCHVISION_VERSION"])
    runs = " ".join(x for k, x in instructions("Dockerfile.gpu") if k == "RUN")
    assert '"torchvision==${TORCHVISION_VERSION}"' in runs
    assert '"onnxruntime-gpu==${ONNXRUNTIME_GPU_VERSION}"' in runs
    assert "python3.11" in runs


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
