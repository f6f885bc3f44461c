"""The serving step of a GPU lease (scripts/gpu_check.py ``--serving PACK``): the embedded model on the GPU, measured
first, in about 4 minutes, every row in the report as soon as it is measured.

What a lease carries for it, built here by ``scripts/serving_pack.py`` into ``.lease/serving``:

* ``model/``: the embedded artifact with its fp32 weights as lossless byte planes (``support.weight_planes``,
  47 MiB for 58), unpacked on the node and checked against the manifest's sha256;
* ``photos/``: real photographs (IDRiD lesion photographs and ODIR validation patients, re-encoded smaller to
  fit what a command receives);
* ``wheels/``: the web stack the node lacks (FastAPI, pydantic, uvicorn, pydicom, ...), installed into a
  folder of the run's own (``pip install --no-index --target``), for the live-server test and the service.

The rows, in order, each a step of ``LeaseReport`` (the benchmarks append their own rows as they measure them,
``--report``): the model unpacked; the web stack; ``pytest -m gpu tests/gpu`` on the embedded model (fp32 parity
with the CPU reference, bf16/fp16 drift and flips printed); the model alone (``benchmarks/bench_core.py``) at
batch 1/8/32/128 in fp32 (IEEE, TF32 off), bf16 and fp16, and ONNX Runtime's CUDA provider where it activates;
the service's closed loop at 1, 8 and 64 clients with the service's own decode workers (one a core, up to 16, on
a GPU) against the model alone (``benchmarks/load_service.py``); the precision drift table on the photographs
(``benchmarks/precision_drift.py`` on the first 48, against torch fp32 on the node's CPU; the served ``auto``
answer included). Each has a share of the step's
budget (:data:`SHARES`); a step that outruns its share is stopped and reported ``stopped``, the rows it
appended before staying. On a machine without CUDA the same steps run on the CPU (``--tiny`` sizes: the test
suite's dry run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from support.lease import LeaseReport
from support.weight_planes import PlanesError, unpack

ROOT = Path(__file__).resolve().parents[1]
# Shares of the serving step's budget (240 s on a GPU: 4 minutes of device time)
SHARES = {"gpu tests": 0.22, "model alone": 0.2, "service": 0.3, "precision drift": 0.23}


@dataclass(frozen=True)
class Sizes:
    """What the step measures at: the full lease's, or the dry run's tiny ones."""

    batches: str
    repeats: int
    passes: int | None  # Monte Carlo passes a photograph in the model-alone rows (None: the artifact's)
    clients: tuple[int, ...]
    duration_s: float
    max_batch: int
    drift_batch: int
    drift_photos: int  # the CPU reference costs ~0.3-0.5 s a photograph at 256 px and 32 passes on 16 cores


FULL = Sizes(batches="1,8,32,128", repeats=10, passes=None, clients=(1, 8, 64), duration_s=6.0, max_batch=64,
             drift_batch=16, drift_photos=48)
TINY = Sizes(batches="1,2", repeats=2, passes=4, clients=(1, 2), duration_s=1.0, max_batch=4, drift_batch=4,
             drift_photos=3)


def install_wheels(pack: Path, work: Path) -> tuple[str, str | None]:
    """Install ``pack/wheels/*.whl`` into ``work/site`` (no index, no dependencies); (what happened, the folder
    to put on PYTHONPATH or None)."""
    wheels = sorted((pack / "wheels").glob("*.whl")) if (pack / "wheels").is_dir() else []
    if not wheels:
        return "no wheels carried: the web stack is this Python's own, if any", None
    site = work / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--target", str(site), *map(str, wheels)],
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        return f"pip install failed: {(done.stderr or done.stdout).strip()[-800:]}", None
    return f"installed {len(wheels)} wheels into {site}: {', '.join(w.name.split('-')[0] for w in wheels)}", str(site)


def web_stack(env: dict[str, str]) -> str | None:
    """None when FastAPI and uvicorn import under ``env``, else the reason."""
    done = subprocess.run([sys.executable, "-c", "import fastapi, uvicorn, pydantic_settings, pydicom"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    return None if done.returncode == 0 else done.stderr.strip().splitlines()[-1]


def serving_step(report: LeaseReport, *, pack: Path, device: str, budget_s: float, work: Path, tiny: bool,
                 env: dict[str, str]) -> None:
    """Run the serving step's rows into ``report`` (see the module docstring), within ``budget_s`` seconds."""
    sizes = TINY if tiny else FULL
    started = report.left()

    def share(name: str) -> float:
        """The step's share of the whole report's budget, never past the serving budget's end."""
        spent = started - report.left()
        return max(0.0, min(SHARES[name] * budget_s, budget_s - spent)) / report.budget_s

    model = work / "embedded"
    try:
        sha = unpack(pack / "model", model)
    except (PlanesError, OSError) as exc:
        report.add("serving: model", "failed", reason=str(exc))
        return
    config = json.loads((model / "config.json").read_text())
    serving, arch = config["serving"], config["architecture"]
    passes = serving["mc_samples"] * (2 if serving.get("test_time_flip") else 1)
    report.add("serving: model", "ok", name=config["name"], version=config["version"], weights_sha256=sha,
               input_size=arch["input_size"], width=arch["width"], mc_samples=serving["mc_samples"],
               test_time_flip=serving.get("test_time_flip", False), passes_per_photograph=passes, device=device)
    what, site = install_wheels(pack, work)
    if site:
        env = {**env, "PYTHONPATH": os.pathsep.join([env.get("PYTHONPATH", ""), site]).strip(os.pathsep)}
    missing = web_stack(env)
    report.add("serving: web stack", "ok" if missing is None else "skipped", wheels=what,
               **({"missing": missing} if missing else {}))
    python, photos, out = sys.executable, str(pack / "photos"), str(report.out)
    report.run("serving: gpu tests", [python, "-m", "pytest", "-m", "gpu", "tests/gpu", "-rA", "-p",
                                      "no:cacheprovider", "-q"], share=share("gpu tests"), cwd=ROOT,
               env={**env, "RADSCREEN_PARITY_ARTIFACT": str(model)})
    precisions = "fp32,bf16,fp16" if device == "cuda" else "fp32"
    draws = "drawn-grouped" if device == "cuda" else "drawn-loop"  # as the service runs the draws there
    report.run("serving: model alone", [
        python, "benchmarks/bench_core.py", "--device", device, "--size", str(arch["input_size"]), "--width",
        str(arch["width"]), "--k", str(sizes.passes or passes), "--batch", sizes.batches, "--repeats",
        str(sizes.repeats), "--warmup", "2", "--modes", f"{draws},onnx", "--precisions", precisions,
        "--report", out], share=share("model alone"), cwd=ROOT, env=env, tail=30)
    if missing is None:
        report.run("serving: service", [
            python, "benchmarks/load_service.py", "--model-dir", str(model), "--device", device, "--photos", photos,
            "--concurrency", *map(str, sizes.clients), "--max-batch-size", str(sizes.max_batch), "--duration",
            str(sizes.duration_s), "--rate", "--report", out], share=share("service"), cwd=ROOT, env=env, tail=30)
    else:
        report.add("serving: service", "skipped", reason=f"the web stack does not import here ({missing})")
    report.run("serving: precision drift", [
        python, "benchmarks/precision_drift.py", "--device", device, "--model-dir", str(model), "--photos", photos,
        "--images", str(sizes.drift_photos), "--batch", str(sizes.drift_batch), "--report", out],
        share=share("precision drift"), cwd=ROOT, env=env, tail=30)
