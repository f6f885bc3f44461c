"""The parts of a GPU lease's report (scripts/gpu_check.py): written step by step, sized against the limits.

A lease is one command of at most 10 minutes that receives at most 64 MiB and returns at most 8 files of at
most 16 MiB. ``LeaseReport`` appends each step to ``lease.jsonl`` (one JSON object a line) and ``lease.md`` as
soon as it ends, so a command cut off at its limit still returns what it measured. ``sent_bytes`` is what a
lease would receive: the tracked tree without the embedded weights, plus the shards.

A step's child process (a benchmark run with ``--report DIR``) appends its own rows with :func:`append_row`
as it measures them, into the same two files, so a step stopped at its time limit, or a lease cut off, keeps
the rows measured so far; ``RADSCREEN_LEASE_STARTED`` (set by :class:`LeaseReport` for its children) gives
their ``at_s`` the report's clock.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIB = 2**20
SEND_LIMIT = 64 * MIB  # what one command receives: code and data together
RETURN_FILE_LIMIT = 16 * MIB  # each file it returns
RETURN_FILES = 8  # files it returns
EMBEDDED_WEIGHTS = "models/default/weights.safetensors"  # left out of what a lease sends
STARTED_ENV = "RADSCREEN_LEASE_STARTED"  # the report's start (seconds since the epoch), for its children's rows
# The lease's training batch: at 512 px the host's work per step (~11 ms: benchmarks/train_step_host.py) is
# about 10 % of a batch-256 step at 140 TFLOP/s (35 % of 400), where a batch-32 step would wait for the host;
# the tensors kept for the backward are at most 52 GB (203 MB an image in fp32, counted on the meta device; bf16
# halves most of them), within an H100's 80. docs/results-benchmarks.md, "The training step's host work".
LEASE_BATCH = 256
BASE_BATCH, BASE_LR = 16, 1e-3  # the recipe's defaults (TrainConfig): Adam at lr 1e-3 on batches of 16


def scaled_lr(batch: int) -> float:
    """The learning rate for ``batch`` by the square-root rule for Adam (Malladi et al. 2022, "On the SDEs and
    scaling rules for adaptive gradient algorithms"): ``BASE_LR · √(batch / BASE_BATCH)``; ρ's group follows
    (``--rho-lr`` unset)."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    return BASE_LR * math.sqrt(batch / BASE_BATCH)


def lease_recipe(*, size: int, epochs: int, batch: int, val_every: int) -> list[str]:
    """The ``radscreen-train fit`` options of the lease's training run (other than data, output and budget)."""
    return ["--input-size", str(size), "--epochs", str(epochs), "--batch-size", str(batch),
            "--lr", f"{scaled_lr(batch):.3g}", "--val-every", str(val_every)]


@dataclass
class LeaseReport:
    """The report in ``out``: ``lease.jsonl`` and ``lease.md``, appended to after every step."""

    out: Path
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.jsonl, self.md = self.out / "lease.jsonl", self.out / "lease.md"
        self.md.write_text(f"# GPU lease\n\nstarted {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, budget "
                           f"{self.budget_s:.0f} s\n", encoding="utf-8")
        self.jsonl.write_text("", encoding="utf-8")

    def left(self) -> float:
        """Seconds of the budget left."""
        return self.budget_s - (time.monotonic() - self.started)

    def add(self, step: str, status: str, *, text: str = "", **figures: Any) -> dict[str, Any]:
        """Append one step: its status (``ok``, ``failed``, ``skipped``, ``stopped``), figures and text."""
        return append_row(self.out, step, status, text=text, at_s=round(time.time() - self.started_wall, 1),
                          **figures)

    def run(self, step: str, cmd: Sequence[str], *, share: float, cwd: Path, env: Mapping[str, str] | None = None,
            reserve: float = 0.0, tail: int = 60) -> tuple[int | None, str]:
        """Run ``cmd`` for at most ``share`` of the budget (and never into the last ``reserve`` seconds), with
        ``$RADSCREEN_LEASE_STARTED`` set for the rows it appends itself (:func:`append_row`); report it as a
        step; (exit status or None when stopped or not started, its output)."""
        limit = min(share * self.budget_s, self.left() - reserve)
        if limit < 5:
            self.add(step, "skipped", reason=f"the budget is spent ({self.left():.0f} s left)", command=shlex.join(cmd))
            return None, ""
        begun = time.monotonic()
        code: int | None
        try:
            child_env = {**(env if env is not None else os.environ), STARTED_ENV: repr(self.started_wall)}
            done = subprocess.run(list(cmd), cwd=cwd, env=child_env, text=True,
                                  capture_output=True, timeout=limit, check=False)
            code, output = done.returncode, done.stdout + done.stderr
            status = "ok" if code == 0 else "failed"
        except subprocess.TimeoutExpired as exc:
            code, status = None, "stopped"
            output = "".join(x.decode() if isinstance(x, bytes) else (x or "") for x in (exc.stdout, exc.stderr))
        except OSError as exc:
            code, status, output = None, "failed", f"could not start: {exc}"
        text = "\n".join(output.strip().splitlines()[-tail:])
        self.add(step, status, text=text, command=shlex.join(cmd), exit=code,
                 seconds=round(time.monotonic() - begun, 1), limit_s=round(limit))
        return code, output


def append_row(out: Path, step: str, status: str, *, text: str = "", at_s: float | None = None,
               **figures: Any) -> dict[str, Any]:
    """Append one row to ``out/lease.jsonl`` (one JSON object a line) and ``out/lease.md``, each written in one
    call and flushed on return. ``at_s``: seconds since the report began (default: from
    ``$RADSCREEN_LEASE_STARTED``, absent where no report set it)."""
    if at_s is None and (started := os.environ.get(STARTED_ENV)):
        at_s = round(time.time() - float(started), 1)
    record = {"step": step, "status": status, **({"at_s": at_s} if at_s is not None else {}), **figures}
    with (out / "lease.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")
    lines = [f"\n## {step}: {status}\n"]
    lines += [f"- {k}: {v}" for k, v in figures.items() if k not in ("output",)]
    if text:
        lines.append(f"\n```\n{text.strip()}\n```")
    with (out / "lease.md").open("a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return record


def tree_files(root: Path) -> list[Path]:
    """The files a lease sends of this tree: git's tracked files where git is there, else every file."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True, timeout=60)
        return [root / p for p in listed.stdout.decode().split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        return [p for p in root.rglob("*") if p.is_file() and ".git" not in p.relative_to(root).parts]


def folder_bytes(folder: Path | None) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder else 0


def sent_bytes(root: Path, shards: Path | None) -> dict[str, int]:
    """What a lease would receive: the tree without the embedded weights, the shards, and their sum."""
    tree = sum(p.stat().st_size for p in tree_files(root) if p.is_file() and p != root / EMBEDDED_WEIGHTS)
    data = folder_bytes(shards)
    return {"tree_bytes": tree, "shards_bytes": data, "sent_bytes": tree + data, "limit_bytes": SEND_LIMIT}


def returned_files(out: Path) -> dict[str, Any]:
    """The files ``out`` would return, against the count and size limits."""
    files = sorted(p for p in out.rglob("*") if p.is_file())
    largest = max((p.stat().st_size for p in files), default=0)
    return {"files": len(files), "files_limit": RETURN_FILES, "largest_bytes": largest,
            "largest_limit_bytes": RETURN_FILE_LIMIT,
            "within_limits": len(files) <= RETURN_FILES and largest <= RETURN_FILE_LIMIT}


def training_throughput(run_dir: Path, flops_per_image: float | None) -> dict[str, Any]:
    """Images per second over the trained epochs (from history.json and data.json), and the FLOP rate that
    makes when ``flops_per_image`` (one training step's forward and backward, per image) is known."""
    history = json.loads((run_dir / "history.json").read_text())
    n_train = int(json.loads((run_dir / "data.json").read_text())["n_train"])
    rows = [r for r in history if r.get("phase") != "init"]
    seconds = sum(float(r["seconds"]) for r in rows)
    images = n_train * len(rows)
    rate = images / seconds if seconds else float("nan")
    out: dict[str, Any] = {"epochs": len(rows), "train_images": n_train, "seconds": round(seconds, 1),
                           "images_per_s": round(rate, 1)}
    if flops_per_image:
        out["gflop_per_image"] = float(f"{flops_per_image / 1e9:.4g}")
        out["achieved_tflop_per_s"] = float(f"{rate * flops_per_image / 1e12:.4g}")
    return out


def step_flops(*, model: str, width: int, size: int, train_samples: int, device: str) -> float:
    """FLOPs of one training step's forward and backward per image (torch's FlopCounterMode on one image:
    convolutions and matrix products; the weight sampling's elementwise work is not counted)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from models.nn.registry import create_model
    from models.nn.vgg import mc_logits

    net = create_model(model, width=width, input_size=size).to(device)
    x = torch.zeros(1, 3, size, size, device=device)
    with FlopCounterMode(display=False) as counter:
        mc_logits(net, x, train_samples).sum().backward()
    return float(counter.get_total_flops())
