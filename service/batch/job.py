"""One batch scoring job, start to finish: discover inputs, resume, score, assemble, summarise.

The runners (``local``: a thread/process pool; ``ray``: Ray Data) only produce rows; this module owns
everything that makes the job resumable and loss-free: it opens the parts folder (refusing another model's
results), hands the runner only the inputs not yet committed, commits rows through the one
:class:`ChunkWriter`, and finally assembles the results file in input order from the committed parts plus
the rows rejected up front.

The scorer is described once, by the job's :class:`~service.inference.spec.ScorerSpec`: the driver loads it
(for the model's identity, thresholds and the local runner) and every Ray actor loads the same spec.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tqdm import tqdm

from service.batch.exams import (
    GroupBy,
    exam_rows,
    exam_summary,
    exams_path_for,
    memberships,
    photograph_hashes,
    write_exams,
)
from service.batch.inputs import InputSource, discover
from service.batch.local import PoolKind, run_local
from service.batch.output import output_format, output_model_shas, write_output
from service.batch.parts import ChunkWriter, PartStore, PartStoreError, part_ends
from service.batch.ray_runner import RayOptions, run_ray
from service.batch.rows import Row, error_row
from service.batch.summary import SummaryBuilder, format_summary, plot_summary, write_summary_json
from service.inference.spec import ScorerSpec

if TYPE_CHECKING:
    from service.inference.scoring import Scorer

logger = logging.getLogger(__name__)

RunnerKind = Literal["local", "ray"]  # what runs the scoring loop (CLI --runner, formerly --engine)

# the modules whose code decides a row: decode and limits, quality gate, preprocessing, the network and its
# draws, the uncertainty maths, the decision and the row itself. A resume after any of them changed (an
# upgrade between a kill and a rerun) is refused rather than mixing two versions in one results file.
SCORING_CODE = ("models.image.fov", "models.image.preprocessing", "models.nn.layers", "models.nn.vgg",
                "models.nn.draws", "models.serving.onnx_backend", "models.nn.uncertainty",
                "models.outcome.decision", "service.inference.imaging",
                "service.inference.dicom",
                "models.image.quality", "service.inference.prepare", "service.inference.scoring",
                "service.inference.backends",
                "service.inference.partition", "service.batch.rows")


@dataclass(frozen=True)
class BatchJobConfig:
    """Everything one run needs; rerunning with the same values resumes the same job."""

    input: Path
    output: Path
    spec: ScorerSpec = field(default_factory=ScorerSpec)  # the model and how to run it (every runner)
    batch_size: int = 16
    workers: int = 2
    pool: PoolKind = "thread"
    runner: RunnerKind = "local"
    restart: bool = False
    summary: Path | None = None
    plot: Path | None = None
    id_column: str | None = None
    path_column: str | None = None
    image_root: Path | None = None
    chunk_size: int = 64  # rows per part file (service.batch.parts.ChunkWriter)
    flush_seconds: float = 10.0  # ... or whatever is scored after this long, so short jobs commit too
    progress: bool = True
    ray_address: str | None = None
    ray_actors: int = 1
    group_by: GroupBy | None = None  # score exams too (service.batch.exams): patient, filename or study
    patient_column: str = "patient"
    eye_column: str = "eye"
    exams_output: Path | None = None  # default: <output stem>.exams.csv beside the output


@dataclass(frozen=True)
class JobResult:
    """What a finished run produced."""

    output: Path
    rows: int
    scored_now: int
    summary: dict[str, Any]
    exams_output: Path | None = None


def parts_dir_for(output: Path) -> Path:
    """The resume folder next to the output: ``results.csv`` -> ``results.csv.parts/``."""
    return output.with_name(output.name + ".parts")


def runtime_summary(scorer: Scorer) -> dict[str, Any]:
    """How the machine shaped this run (the summary's ``runtime`` field): backend, device, CPU
    capability, precision and strategy with the reason for each choice."""
    return {"backend": scorer.backend.name, "device": scorer.backend.device, **scorer.runtime}


def scoring_code_digest() -> str:
    """sha256 (16 hex digits) over the source of :data:`SCORING_CODE`, as installed."""
    digest = hashlib.sha256()
    for name in SCORING_CODE:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"cannot locate the source of {name} for the scoring-code digest")
        digest.update(name.encode() + b"\0" + Path(spec.origin).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def scoring_settings(scorer: Scorer) -> dict[str, Any]:
    """What, beside the model, shapes a row's numbers: recorded in the parts folder and checked on resume."""
    return {"mc_samples": scorer.model_identity.mc_samples, "head_draws": scorer.model_identity.head_draws,
            "test_time_flip": scorer.model_identity.test_time_flip, "precision": scorer.precision,
            "backend": scorer.backend.name, "device": str(scorer.backend.device),
            "strategy": scorer.runtime.get("strategy"), "max_pixels": scorer.pipeline.max_pixels,
            "max_upload_bytes": scorer.pipeline.max_bytes, "scoring_code": scoring_code_digest()}


def log_runtime(runtime: dict[str, Any]) -> None:
    cpu = runtime.get("cpu") or {}
    logger.info("runtime: %s on %s, CPU %s (torch ISA %s, native bf16 %s), precision %s (%s), strategy %s",
                runtime["backend"], runtime["device"], cpu.get("model_name", "?"), cpu.get("isa", "?"),
                "yes" if cpu.get("native_bf16") else "no", runtime.get("precision"),
                runtime.get("precision_reason", "-"), runtime.get("strategy"))


def _check_existing_output(output: Path, parts_dir: Path, sha: str, restart: bool) -> None:
    """Refuse to overwrite a results file of another model when no parts folder says otherwise."""
    if restart or parts_dir.exists() or not output.exists():
        return
    shas = output_model_shas(output)
    if shas and shas != {sha}:
        raise PartStoreError(
            f"{output} holds results from model sha256 {', '.join(sorted(shas))}, not from the loaded model "
            f"{sha}; pass --restart to replace it, or write to another --output"
        )


def assemble(source: InputSource, store: PartStore, sha: str) -> Iterator[Row]:
    """Every input row exactly once, in input order: committed rows, and the up-front error rows."""
    for item in source.items:
        if item.error is not None:
            yield error_row(item, item.error, sha)
            continue
        row = store.get(item.id)
        if row is None:  # the runner finished without committing it: a bug, never a silent loss
            raise RuntimeError(f"input row {item.index} has no committed result; rerun to resume")
        yield {**row, "path": item.path}


def run_job(cfg: BatchJobConfig, *, scorer: Scorer | None = None) -> JobResult:
    """Run (or resume) the job described by ``cfg`` and return the summary; see the module docstring.

    ``scorer``: an already loaded ``load_scorer(cfg.spec)`` to reuse (tests, benchmarks); Ray actors still load
    ``cfg.spec`` themselves and must arrive at the same model sha256.
    """
    output_format(cfg.output)  # unsupported suffix or missing pyarrow: fail before any work
    source = discover(cfg.input, path_column=cfg.path_column, id_column=cfg.id_column,
                      image_root=cfg.image_root)
    groups = (memberships(source, cfg.input, cfg.group_by, patient_column=cfg.patient_column,
                          eye_column=cfg.eye_column, image_root=cfg.image_root, max_bytes=cfg.spec.max_upload_bytes)
              if cfg.group_by else None)  # an unusable manifest fails now
    from service.inference.loading import load_scorer

    scorer = scorer if scorer is not None else load_scorer(cfg.spec)
    runtime = runtime_summary(scorer)
    log_runtime(runtime)
    sha = scorer.model_identity.sha256
    parts_dir = parts_dir_for(cfg.output)
    _check_existing_output(cfg.output, parts_dir, sha, cfg.restart)

    with PartStore.open(parts_dir, model_sha256=sha, input_description=source.description,
                        scoring=scoring_settings(scorer), restart=cfg.restart) as store:
        done = store.done_ids
        todo = [it for it in source.items if it.error is None and it.id not in done]
        n_done = sum(1 for it in source.items if it.error is None) - len(todo)
        if n_done:
            logger.info("resuming: %d of %d inputs already scored", n_done, len(source.items))
        ends = part_ends([it.id for it in source.items if it.error is None], cfg.chunk_size)
        writer = ChunkWriter(store, chunk_size=cfg.chunk_size, flush_seconds=cfg.flush_seconds, ends=ends)
        with tqdm(total=len(source.items) - sum(it.error is not None for it in source.items), initial=n_done,
                  unit="img", desc="scoring", disable=not cfg.progress, dynamic_ncols=True) as bar:

            def emit(rows: list[Row]) -> None:
                writer.add(rows)
                bar.update(len(rows))

            try:
                if cfg.runner == "local":
                    run_local(todo, scorer, emit, batch_size=cfg.batch_size, workers=cfg.workers, pool=cfg.pool,
                              part_ends=ends)
                elif cfg.runner == "ray":
                    options = RayOptions(address=cfg.ray_address, actors=cfg.ray_actors, batch_size=cfg.batch_size)
                    run_ray(todo, cfg.spec, emit, options, pipeline=scorer.pipeline, model_sha256=sha)
                else:
                    raise ValueError(f"unknown runner {cfg.runner!r}; expected one of: local, ray")
            except KeyboardInterrupt:  # Ctrl-C: keep every row already scored, then stop (the CLI says how to resume)
                writer.flush()
                logger.info("interrupted: %d rows committed in %s", len(store.done_ids), parts_dir)
                raise
            writer.flush()

        builder = SummaryBuilder(
            decision_threshold=scorer.calibration.decision_threshold,
            referral_threshold_mi=scorer.calibration.referral_threshold_mi,
            model={"name": scorer.model_identity.name, "version": scorer.model_identity.version,
                   "sha256": scorer.model_identity.sha256},
        )
        kept: list[Row] = []  # the columns the exam rule reads, only when grouping into exams

        def keep(row: Row) -> Row:
            if groups is not None:
                kept.append({"id": row["id"], "outcome": row["outcome"], "error": row["error"]})
            return row

        n_rows = write_output(cfg.output, (keep(builder.add(r)) for r in assemble(source, store, sha)))

    summary = {**builder.build(), "runtime": runtime}
    exams_output = None
    if groups is not None:
        hashes = photograph_hashes(source.items, groups, scorer.pipeline)
        exams = exam_rows(kept, source.items, groups, sha, hashes)
        exams_output = cfg.exams_output or exams_path_for(cfg.output)
        write_exams(exams_output, exams)
        summary["exams"] = exam_summary(exams)
    if cfg.summary is not None:
        write_summary_json(cfg.summary, summary)
    if cfg.plot is not None:
        plot_summary(cfg.plot, builder)
    return JobResult(output=cfg.output, rows=n_rows, scored_now=len(todo), summary=summary, exams_output=exams_output)


__all__ = ["BatchJobConfig", "JobResult", "format_summary", "parts_dir_for", "run_job"]
