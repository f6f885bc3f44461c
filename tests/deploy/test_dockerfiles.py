"""The Dockerfiles: non-root user, health check on /readyz, pinned torch, no training extras or code."""

from __future__ import annotations

import re

import pytest

from tests.helpers.deploy import DEPLOY, ROOT


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
    assert cmd.startswith('["sh", "-c", "exec radscreen serve ')


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_listen_port_is_one_setting_for_server_health_check_and_expose(name: str) -> None:
    ins = instructions(name)
    env = " ".join(a for k, a in ins if k == "ENV")
    assert "RADSCREEN_LISTEN_HOST=0.0.0.0" in env
    port = re.search(r"RADSCREEN_LISTEN_PORT=(\d+)", env)
    assert port and [a for k, a in ins if k == "EXPOSE"] == [port.group(1)]
    cmd = [a for k, a in ins if k == "CMD"][-1]
    assert '--host \\"${RADSCREEN_LISTEN_HOST}\\" --port \\"${RADSCREEN_LISTEN_PORT}\\"' in cmd
    health = next(a for k, a in ins if k == "HEALTHCHECK")
    assert "os.environ.get('RADSCREEN_LISTEN_PORT', '8000')" in health and "127.0.0.1:{port}/readyz" in health


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_torch_is_pinned_and_no_training_extras(name: str) -> None:
    ins = instructions(name)
    runs = " ".join(a for k, a in ins if k == "RUN")
    assert re.match(r"^\d+\.\d+\.\d+$", args(name)["TORCH_VERSION"])
    assert '"torch==${TORCH_VERSION}"' in runs or '"torch==${TORCH_VERSION}+cpu"' in runs
    for extra in ("train", "batch", "dev", "ray"):
        assert f"[{extra}" not in runs and f",{extra}" not in runs
    copies = [a.split()[0] for k, a in ins if k == "COPY"]
    assert "training" not in copies, "the serving image must not carry the training package"
    assert {"models", "service", "pyproject.toml"} <= set(copies)


@pytest.mark.parametrize(("name", "base"), [("Dockerfile.cpu", r"python:3\.11-slim"),
                                          ("Dockerfile.gpu", r"nvidia/cuda:\d+\.\d+\.\d+-cudnn-runtime-ubuntu22\.04")])
def test_base_image_is_a_build_arg_with_the_documented_default(name: str, base: str) -> None:
    froms = [a for k, a in instructions(name) if k == "FROM"]
    # the first stage starts from the build arg; later stages only from earlier stages
    assert froms[0].split()[0] == "${BASE_IMAGE}"
    stages = {a.split()[2] for a in froms if len(a.split()) == 3 and a.split()[1].upper() == "AS"}
    assert all(a.split()[0] in stages for a in froms[1:])
    assert re.fullmatch(base, args(name)["BASE_IMAGE"])


def test_cpu_image_installs_only_the_cpu_torch_build_and_no_torchvision() -> None:
    ins = instructions("Dockerfile.cpu")
    a = args("Dockerfile.cpu")
    assert a["TORCH_INDEX"].endswith("/whl/cpu")
    assert a["TORCH_VERSION"] == "2.13.0"
    assert a["TORCH_FIND_LINKS"] == ""  # optional local wheels; empty = the CPU index only
    runs = " ".join(x for k, x in ins if k == "RUN")
    # "+cpu" pins the CPU build whatever the index; the build then refuses any other torch.
    assert '"torch==${TORCH_VERSION}+cpu"' in runs
    assert "torch.__version__ == '${TORCH_VERSION}+cpu' and torch.version.cuda is None" in runs
    assert "torchvision" not in runs
    # The project itself: core dependencies only, into the venv that PATH puts first.
    assert "pip install --no-deps . " in runs + " " and "pip check" in runs
    env = " ".join(x for k, x in ins if k == "ENV")
    assert "VIRTUAL_ENV=/opt/venv" in env and "PATH=/opt/venv/bin:$PATH" in env


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
    runs = " ".join(x for k, x in instructions("Dockerfile.gpu") if k == "RUN")
    assert '"torch==${TORCH_VERSION}"' in runs and '"onnxruntime-gpu==${ONNXRUNTIME_GPU_VERSION}"' in runs
    assert "python3.11" in runs
    # nothing imports torchvision: the image does not carry it (images are decoded by Pillow on the CPU)
    assert "torchvision" not in runs and "TORCHVISION_VERSION" not in a


def test_gpu_image_onnxruntime_gpu_is_built_for_the_base_images_cuda_major() -> None:
    """Read from the installed onnxruntime-gpu itself: its build info and the CUDA libraries its CUDA provider
    links. A mismatch makes ORT fall back to the CPU on the GPU image (or, now, refuse to start)."""
    from tests.helpers.cuda_line import installed_onnxruntime_cuda_line

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
