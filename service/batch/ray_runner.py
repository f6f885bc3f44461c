"""The Ray Data runner: the same job for users who outgrow one machine (``--runner ray``).

Pipeline: input paths -> ``map_batches`` reading + ``prepare_image`` in Ray tasks -> ``map_batches`` on a
pool of model actors, each loading the job's :class:`~service.inference.spec.ScorerSpec` (``load_scorer(spec)``,
the same spec the local runner and the HTTP service load; ``RayOptions.actors`` actors) -> rows back on the
driver, which commits them through the same :class:`~service.batch.parts.ChunkWriter` as the local runner,
so resume and exactly-once semantics are the same. Row construction also stays on the driver
(:func:`service.batch.rows.scored_row` on the ``score_payload`` body), so both runners write identical
rows for identical model outputs. On a GPU the driver pins the actors to cuda and each reserves a GPU
share from Ray (:func:`actor_placement`); the decode tasks stay on CPUs.

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from models.platform.compute import resolve_device
from service.batch.inputs import InputItem, RowError
from service.batch.local import load_prepared
from service.batch.rows import Row, error_row, scored_row
from service.inference.partition import Accepted, score_accepted
from service.inference.spec import ScorerSpec

if TYPE_CHECKING:
    from service.inference.imaging import ImagePipeline

logger = logging.getLogger(__name__)

PREPARE_CPUS = 0.5  # per decode task


class RayUnavailableError(RuntimeError):
    """``--runner ray`` was asked for but Ray Data is not installed."""


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide the Ray pipeline runs (the scorer itself is the job's ``ScorerSpec``)."""

    address: str | None = None  # Ray cluster address; None: RAY_ADDRESS, else a local instance for the job
    actors: int = 1  # model actors, each holding one scorer
    batch_size: int = 16  # images per decode task and per actor call
    gpus_per_actor: float = 1.0  # on cuda: the GPU share each actor reserves (0.5: two actors per GPU)

    def __post_init__(self) -> None:
        g = self.gpus_per_actor
        if g <= 0 or (g > 1 and g % 1):  # Ray accepts a fraction of one GPU or whole GPUs
            raise ValueError(f"gpus_per_actor must be a fraction in (0, 1] or a whole number, got {g}")


def actor_placement(spec: ScorerSpec, options: RayOptions, *,
                    gpu_visible: bool | None = None) -> tuple[ScorerSpec, dict[str, float]]:
    """The spec the actors load and the Ray resources each actor reserves.

    Ray hides every GPU from a task or actor that reserves none (``CUDA_VISIBLE_DEVICES`` is emptied), so
    an actor left at ``device="auto"`` would score on the CPU while the driver's summary records cuda, and
    one at ``device="cuda"`` would fail. The driver therefore resolves ``auto`` once, with the scorer's own
    rule (``models.platform.compute.resolve_device``: cuda when a GPU is visible here), pins the actors to that
    device, and on cuda reserves ``options.gpus_per_actor`` GPU for each. ``gpu_visible`` is injected by
    tests (default: torch's answer).
    """
    device = spec.device
    if device == "auto":
        device = "cuda" if resolve_device(device, gpu_visible=gpu_visible) == "cuda" else "cpu"
    if device != "cuda":
        return replace(spec, device=device), {}
    return replace(spec, device=device), {"num_gpus": options.gpus_per_actor}


def _import_ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise RayUnavailableError(
            "--runner ray needs Ray Data: pip install 'radial-screen[ray]' (or use --runner local)"
        ) from exc
    return ray


def _prepare_batch(batch: dict[str, np.ndarray], pipeline: ImagePipeline) -> dict[str, Any]:
    """Ray task: read + prepare each file; each result (PreparedImage or RowError) travels pickled."""
    results = [pickle.dumps(load_prepared(str(file), pipeline), protocol=5) for file in batch["file"]]
    return {"index": batch["index"], "result": np.array(results, dtype=object)}


class ScoreActor:
    """Ray actor: one Scorer loaded from the job's spec; scores a batch of prepared images per call."""

    def __init__(self, spec: ScorerSpec, expected_sha256: str) -> None:
        from service.inference.loading import load_scorer

        self.scorer = load_scorer(spec)
        sha = self.scorer.model_identity.sha256
        if sha != expected_sha256:  # a worker with another artifact at that path must not mix results
            raise RuntimeError(f"actor loaded model sha256 {sha}, the job runs {expected_sha256}")

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        """``{"index", "result"}`` -> ``{"index", "outcome"}``: JSON of the payload or of the error.

        JSON keeps every float exactly (shortest round-trip repr) and avoids pickles on the way back.
        """
        from service.inference.prepare import PreparedImage
        from service.screening.payload import score_payload

        results = [pickle.loads(blob) for blob in batch["result"]]  # our own task's output, not user data
        outcomes = [
            json.dumps({"payload": score_payload(m.score, self.scorer)}) if isinstance(m, Accepted)
            else json.dumps({"error": [m.kind, m.detail]})
            for m in score_accepted(results, PreparedImage, RowError, self.scorer.score_batch)
        ]
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


def run_ray(items: Sequence[InputItem], spec: ScorerSpec, emit: Callable[[list[Row]], None],
            options: RayOptions, *, pipeline: ImagePipeline, model_sha256: str) -> None:
    """Score ``items`` on Ray Data and pass rows to ``emit`` (driver side) in input order.

    ``pipeline`` is the driver's scorer's (the artifact's preprocessing and the spec's limits) and
    ``model_sha256`` its identity: every actor loading ``spec`` must arrive at the same model.
    """
    if not items:
        return
    ray = _import_ray()
    started = _ensure_ray(ray, options.address)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True  # contiguous parts, same batches as a rerun would form
        ctx.enable_progress_bars = False  # the job's own tqdm bar reports progress
        by_index = {it.index: it for it in items}
        ds = ray.data.from_items([{"index": it.index, "file": str(it.file)} for it in items])
        # Decoding runs in stateless tasks (scaled by Ray), the model in a fixed pool of actors. The
        # fractional CPU request also keeps Ray from fusing the two stages into the actors.
        ds = ds.map_batches(_prepare_batch, fn_kwargs={"pipeline": pipeline},
                            batch_size=options.batch_size, batch_format="numpy", num_cpus=PREPARE_CPUS)
        actor_spec, resources = actor_placement(spec, options)
        ds = ds.map_batches(
            ScoreActor,
            fn_constructor_kwargs={"spec": actor_spec, "expected_sha256": model_sha256},
            batch_size=options.batch_size, batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=options.actors), **resources,
        )
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            rows: list[Row] = []
            for index, outcome in zip(batch["index"], batch["outcome"], strict=True):
                item = by_index[int(index)]
                decoded = json.loads(outcome)
                if "error" in decoded:
                    rows.append(error_row(item, RowError(*decoded["error"]), model_sha256))
                else:
                    rows.append(scored_row(item, decoded["payload"]))
            emit(rows)
    finally:
        if started:
            ray.shutdown()
