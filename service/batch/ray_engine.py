"""The Ray Data engine: the same job for users who outgrow one machine (``--engine ray``).

Pipeline: input paths -> ``map_batches`` reading + ``prepare_image`` in Ray tasks -> ``map_batches`` on a
pool of model actors, each holding one ``service.inference.scoring.Scorer`` (``concurrency=`` actors) -> rows back
on the driver, which commits them through the same :class:`~service.batch.parts.ChunkWriter` as the local
engine, so resume and exactly-once semantics are the same. Row construction also stays on the driver
(:func:`service.batch.rows.scored_row` on the ``score_payload`` body), so both engines write identical
rows for identical model outputs.

Ray is an optional extra (``pip install 'radial-screen[ray]'``) and is imported only here. With no
``--ray-address`` (or ``RAY_ADDRESS``) a local Ray instance is started for the job and stopped after it;
on a cluster the workers must have this package installed.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from service.batch.inputs import InputItem, RowError
from service.batch.local import load_prepared
from service.batch.rows import Row, error_row, scored_row

if TYPE_CHECKING:
    from service.batch.job import BatchJobConfig
    from service.inference.imaging import ImagePipeline
    from service.inference.scoring import Scorer

logger = logging.getLogger(__name__)

PREPARE_CPUS = 0.5  # per decode task


class RayUnavailableError(RuntimeError):
    """``--engine ray`` was asked for but Ray Data is not installed."""


def _import_ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise RayUnavailableError(
            "--engine ray needs Ray Data: pip install 'radial-screen[ray]' (or use --engine local)"
        ) from exc
    return ray


def _prepare_batch(batch: dict[str, np.ndarray], pipeline: ImagePipeline) -> dict[str, Any]:
    """Ray task: read + prepare each file; each result (PreparedImage or RowError) travels pickled."""
    results = [pickle.dumps(load_prepared(str(file), pipeline), protocol=5) for file in batch["file"]]
    return {"index": batch["index"], "result": np.array(results, dtype=object)}


class ScoreActor:
    """Ray actor: one Scorer loaded from the artifact; scores a batch of prepared images per call."""

    def __init__(self, model_dir: str | None, backend: str, device: str, precision: str,
                 expected_sha256: str) -> None:
        from service.inference.scoring import Scorer

        self.scorer = Scorer.from_artifact(Path(model_dir) if model_dir else None, backend=backend,
                                           device=device, precision=precision)
        sha = self.scorer.model_identity.sha256
        if sha != expected_sha256:  # a worker with another artifact at that path must not mix results
            raise RuntimeError(f"actor loaded model sha256 {sha}, the job runs {expected_sha256}")

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        """``{"index", "result"}`` -> ``{"index", "outcome"}``: JSON of the payload or of the error.

        JSON keeps every float exactly (shortest round-trip repr) and avoids pickles on the way back.
        """
        from service.inference.scoring import PreparedImage, score_payload

        results = [pickle.loads(blob) for blob in batch["result"]]  # our own task's output, not user data
        prepared = [r for r in results if isinstance(r, PreparedImage)]
        scores = iter(self.scorer.score_batch(prepared))
        outcomes = []
        for r in results:
            if isinstance(r, PreparedImage):
                outcomes.append(json.dumps({"payload": score_payload(next(scores), self.scorer)}))
            else:
                outcomes.append(json.dumps({"error": [r.kind, r.detail]}))
        return {"index": batch["index"], "outcome": np.array(outcomes, dtype=object)}


def _ensure_ray(ray: Any, address: str | None) -> bool:
    """Connect to/start Ray unless already initialised; returns whether this call started it."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address)
    else:
        # A local instance: its workers import this package from the same source tree as the driver.
        root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        ray.init(include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    return True


def run_ray(items: Sequence[InputItem], cfg: BatchJobConfig, scorer: Scorer,
            emit: Callable[[list[Row]], None]) -> None:
    """Score ``items`` on Ray Data and pass rows to ``emit`` (driver side) in input order."""
    if not items:
        return
    ray = _import_ray()
    started = _ensure_ray(ray, cfg.ray_address)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True  # contiguous parts, same batches as a rerun would form
        ctx.enable_progress_bars = False  # the job's own tqdm bar reports progress
        sha = scorer.model_identity.sha256
        by_index = {it.index: it for it in items}
        ds = ray.data.from_items([{"index": it.index, "file": str(it.file)} for it in items])
        # Decoding runs in stateless tasks (scaled by Ray), the model in a fixed pool of actors. The
        # fractional CPU request also keeps Ray from fusing the two stages into the actors.
        ds = ds.map_batches(_prepare_batch, fn_kwargs={"pipeline": scorer.pipeline},
                            batch_size=cfg.batch_size, batch_format="numpy", num_cpus=PREPARE_CPUS)
        ds = ds.map_batches(
            ScoreActor,
            fn_constructor_kwargs={
                "model_dir": str(cfg.model_dir) if cfg.model_dir else None, "backend": cfg.backend,
                "device": cfg.device, "precision": cfg.precision, "expected_sha256": sha,
            },
            batch_size=cfg.batch_size, batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=cfg.ray_actors),
        )
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            rows: list[Row] = []
            for index, outcome in zip(batch["index"], batch["outcome"], strict=True):
                item = by_index[int(index)]
                decoded = json.loads(outcome)
                if "error" in decoded:
                    rows.append(error_row(item, RowError(*decoded["error"]), sha))
                else:
                    rows.append(scored_row(item, decoded["payload"]))
            emit(rows)
    finally:
        if started:
            ray.shutdown()
