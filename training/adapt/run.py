"""``radscreen-train adapt``: from a parent artifact and a programme's graded photographs, a site artifact.

The stages, each kept in the run folder so that a run stopped anywhere and started again with the same command
continues where it stood and ends with the same artifact:

1. the labels file read (``training.adapt.site``), every photograph through the quality gate (``gate.json``);
2. the gradable eyes split by patient into tuning and calibration eyes (``recalibrate``: all are calibration
   eyes), and the calibration eyes checked against the bound asked (``site.check_enough``) *before* any work;
3. ``posterior-prior`` / ``finetune``: the fine-tuning run (``training.adapt.tune``, checkpointed in ``tune/``),
   its weights staged as an artifact (``tuned/``) so that what is scored is byte for byte what ships;
4. the calibration eyes scored through the artifact's own transform and serving draws (``scores-*.npy``, the
   parent's and the adapted model's), the operating point and its cross-fitted promise
   (``training.adapt.promise``);
5. the site artifact written (``training.adapt.site_artifact``): an ordinary artifact the service, the batch job
   and the PACS path load unchanged.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from models.artifact import Artifact, load_artifact, save_artifact
from training.adapt.promise import SitePromise, site_promise
from training.adapt.site import AdaptError, SiteEye, check_enough, gate_verdicts, read_site_labels, site_split
from training.adapt.site_artifact import SiteRecord, write_site_artifact
from training.adapt.tune import TUNING_MODES, TuneOptions, tune, tune_config
from training.data.dataset import ManifestDataset
from training.options import option
from training.predict import mc_probabilities

log = logging.getLogger(__name__)

MODES = ("recalibrate", *TUNING_MODES)
Mode = Literal["recalibrate", "posterior-prior", "finetune"]
ADAPT = "adaptation"
OPTIONS_FILE = "adapt.json"


@dataclass(frozen=True)
class AdaptRequest:
    """One adaptation: what adapts what, and how; each option declared once here and in :class:`TuneOptions`
    (``training.options``: ``radscreen-train adapt``'s flags are generated from these fields)."""

    parent: Path = field(metadata=option("the parent artifact (default: the embedded model)", ADAPT,
                                         flag="--from", parse=Path, metavar="ARTIFACT"))
    labels: Path = field(metadata=option(
        "LABELS.csv: image (relative to --image-root), grade (0-4) or referable (0/1), optional patient and eye",
        ADAPT, flag="--data", parse=Path, required=True, metavar="LABELS.csv"))
    image_root: Path = field(metadata=option("the folder the image column is relative to", ADAPT, parse=Path,
                                             required=True, metavar="DIR"))
    mode: Mode = field(metadata=option("what adaptation does", ADAPT, required=True))
    out: Path = field(metadata=option("folder of the site artifact (new or empty)", ADAPT, flag="--artifact",
                                      parse=Path, required=True, metavar="DIR"))
    run_dir: Path = field(metadata=option(
        "the run folder: gate verdicts, checkpoints, scores; rerun to resume (default: <artifact>.run)", ADAPT,
        flag="--run", parse=Path, metavar="DIR"))
    miss_share: float | None = field(default=None, metadata=option(
        "the operating point's bound on referable calibration eyes answered no_referable_dr (default: the "
        "parent's)", ADAPT))
    calibration_share: float = field(default=0.5, metadata=option(
        "share of the patients kept for the thresholds (fine-tuning modes)", ADAPT))
    tune: TuneOptions = field(default_factory=TuneOptions)
    name: str | None = field(default=None, metadata=option(
        "the site artifact's name (default: <parent>-site)", ADAPT))
    version: str | None = field(default=None, metadata=option("its version (default: <parent's>+site)", ADAPT))
    repeats: int = field(default=200, metadata=option("random patient halves of the cross-fitted promise", ADAPT))
    seed: int = field(default=0, metadata=option("split, fine-tuning and cross-fitting seed", ADAPT))

    def key(self) -> dict[str, Any]:
        """What must not change between a run and its resumption."""
        d = asdict(self)
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in d.items() if k not in ("out", "run_dir")}


@dataclass(frozen=True)
class AdaptResult:
    sha256: str
    promise: SitePromise
    record: SiteRecord


def adapt(req: AdaptRequest, *, command: str, progress: bool = True) -> AdaptResult:
    """Run (or resume) ``req``; see the module docstring."""
    if req.mode not in MODES:
        raise AdaptError(f"--mode {req.mode!r}: expected one of {', '.join(MODES)}")
    if req.out.exists() and any(req.out.iterdir()):
        raise AdaptError(f"{req.out} exists and is not empty: write the site artifact to a new folder")
    try:
        parent = load_artifact(req.parent)
    except (OSError, ValueError) as exc:
        raise AdaptError(f"--from {req.parent}: {exc}") from None
    _claim(req)
    labels = read_site_labels(req.labels, req.image_root)
    if labels.skipped:
        log.warning("rows left out of %s: %s", req.labels.name, labels.skipped_text())
    if not labels.eyes:
        raise AdaptError(f"{req.labels}: no usable row ({labels.skipped_text() or 'the file has no rows'})")
    verdicts = gate_verdicts(labels.eyes, req.image_root, parent.image_transform(), req.run_dir, progress=progress)
    gradable = [e for e in labels.eyes if verdicts[e.image] == "gradable"]
    refused = Counter(verdicts[e.image] for e in labels.eyes if verdicts[e.image] != "gradable")
    miss_share = req.miss_share if req.miss_share is not None else _parent_bound(parent)
    tune_eyes: list[SiteEye] = []
    cal_eyes = gradable
    if req.mode != "recalibrate":
        tune_eyes, cal_eyes = site_split(gradable, req.calibration_share, req.seed)
    check_enough(cal_eyes, miss_share, "calibration eyes" if tune_eyes else "gradable eyes")
    if req.mode != "recalibrate" and len({e.referable for e in tune_eyes}) < 2:
        raise AdaptError(f"the {len(tune_eyes)} tuning eyes need referable and non-referable eyes alike; "
                         "add graded photographs or use --mode recalibrate")
    parent_probs = _scores(parent, cal_eyes, req, "parent", progress)
    site = parent
    if req.mode != "recalibrate":
        site = _tuned(parent, req, tune_eyes, cal_eyes, progress)
    probs = parent_probs if site is parent else _scores(site, cal_eyes, req, "site", progress)
    promise = site_promise(probs, [e.referable for e in cal_eyes], [e.patient for e in cal_eyes],
                           miss_share=miss_share, parent_probs=parent_probs,
                           parent_thresholds=(parent.calibration.decision_threshold,
                                              parent.calibration.referral_threshold_mi),
                           repeats=req.repeats, seed=req.seed)
    if not 0 < promise.decision_threshold < 1:
        raise AdaptError(f"on the site's {promise.n_eyes} calibration eyes the bound of {miss_share:.0%} is kept "
                         f"only by answering every certain eye no_referable_dr (AUC {promise.auc.value:.2f}): this "
                         "model cannot screen them; do not adapt it with these eyes")
    record = SiteRecord(mode=req.mode, parent=parent, n_rows=len(labels.eyes) + sum(map(len, labels.skipped.values())),
                        skipped={k: len(v) for k, v in labels.skipped.items()}, refused=dict(refused),
                        gradable=gradable, tune_eyes=tune_eyes, cal_eyes=cal_eyes, has_patients=labels.has_patients,
                        tune=req.tune if tune_eyes else None, command=command)
    sha = write_site_artifact(req.out, site=site, record=record, promise=promise, name=req.name,
                              version=req.version)
    return AdaptResult(sha, promise, record)


def _parent_bound(parent: Artifact) -> float:
    op = parent.calibration.validation.get("operating_point") or {}
    return float(op.get("max_missed_share", 0.05))


def _claim(req: AdaptRequest) -> None:
    """Record the request in the run folder, or check that a resumed run asks the same."""
    req.run_dir.mkdir(parents=True, exist_ok=True)
    path = req.run_dir / OPTIONS_FILE
    key = json.loads(json.dumps(req.key()))
    if path.is_file():
        saved = json.loads(path.read_text())
        diff = {k: (saved.get(k), v) for k, v in key.items() if saved.get(k) != v}
        if diff:
            raise AdaptError(f"{req.run_dir} holds a run with other options {diff}: use a new --run folder")
    else:
        path.write_text(json.dumps(key, indent=2, sort_keys=True))


def _scores(artifact: Artifact, eyes: list[SiteEye], req: AdaptRequest, which: str, progress: bool) -> np.ndarray:
    """The eyes' draws ``[S, N]`` through the artifact's transform and serving draws, kept per artifact sha."""
    path = req.run_dir / f"scores-{which}-{artifact.sha256[:16]}.npz"
    lines = np.asarray([e.line for e in eyes])
    if path.is_file():
        with np.load(path) as saved:
            if np.array_equal(saved["lines"], lines):
                return np.asarray(saved["probs"])
    dataset = ManifestDataset([e.row(req.image_root) for e in eyes], transform=artifact.image_transform())
    dataset.use_cache(req.run_dir / "cache", progress=progress)
    inp = artifact.image_transform()
    probs, _ = mc_probabilities(artifact.build_model(), dataset, mean=inp.mean, std=inp.std,
                                draws=artifact.serving_draws(), progress=progress)
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, probs=probs, lines=lines)
    tmp.replace(path)
    return probs


def _tuned(parent: Artifact, req: AdaptRequest, tune_eyes: list[SiteEye], cal_eyes: list[SiteEye],
           progress: bool) -> Artifact:
    """The fine-tuned weights as an artifact (the parent's config and calibration, staged in the run folder)."""
    staged = req.run_dir / "tuned"
    if (staged / "manifest.json").is_file():
        return load_artifact(staged)
    config = tune_config(req.parent, parent, req.mode, req.run_dir / "tune", req.tune, req.run_dir / "cache")
    model = tune(config, [e.row(req.image_root) for e in tune_eyes], [e.row(req.image_root) for e in cal_eyes],
                 parent, progress=progress)
    shutil.rmtree(staged, ignore_errors=True)
    save_artifact(staged, model=model, config=parent.config, calibration=parent.calibration,
                  model_card=parent.model_card)
    return load_artifact(staged)
