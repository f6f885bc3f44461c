"""Write a synthetic fundus data set in the EyePACS layout, reproducibly and in parallel.

Image ``i`` of a data set depends only on ``(seed, i)``: its pixels come from a generator seeded with
``np.random.SeedSequence([seed, i])``, and its grade from the patient's pair of grades, seeded with
``(seed, patient_id)``; images ``2p`` and ``2p + 1`` are the left and right eye of patient ``p``.
Any subset can therefore be regenerated identically, by any number of worker processes.

Example::

    from pathlib import Path
    from training.synthetic import generate_dataset
    manifest = generate_dataset(Path("data/synth"), n_images=2000, seed=0, size=256, workers=2)
    # data/synth/trainLabels.csv, data/synth/train/0_left.jpeg, ..., metadata.csv, dataset.json
"""

from __future__ import annotations

import json
import logging
import multiprocessing
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from PIL import Image

from models.io.atomic import atomic_write, atomic_write_bytes
from models.io.csv_cells import write_csv
from training.synthetic.fundus import Eye, draw_frame
from training.synthetic.lesions import CONFOUNDER_KINDS, LESION_KINDS
from training.synthetic.render import render_fundus

logger = logging.getLogger(__name__)

# /2: camera frame formats (3:2 and 4:3 with the disc clipped, square with a notch, square), and colour,
# vessel contrast/width, texture and sharpness matched to IDRiD photographs (benchmarks/fundus_stats.py).
GENERATOR_VERSION = "radscreen-synthetic-fundus/2"
# EyePACS is ~73.5/7/15/2.5/2 %; enriched so that referable (grade >= 2) is ~32 % of images.
DEFAULT_GRADE_PROBS: tuple[float, float, float, float, float] = (0.55, 0.13, 0.21, 0.06, 0.05)
SAME_GRADE_BOTH_EYES = 0.6  # otherwise the second eye's grade is an independent draw (keeps the marginal)
_PATIENT_STREAM = 0x5EED  # separates the patient-grade stream from the per-image streams
SYNTHETIC_STATEMENT = (
    "SYNTHETIC DATA: procedurally generated images that imitate colour fundus photographs. They are not "
    "photographs of any person, carry no clinical information, and a model trained on them is not fit "
    "for clinical use."
)
ImageFormat = Literal["jpeg", "png"]
METADATA_COLUMNS: tuple[str, ...] = (
    "image",
    "level",
    "patient_id",
    "eye",
    "gradable",
    "ungradable_kind",
    "subtle",
    *LESION_KINDS,
    *CONFOUNDER_KINDS,
    "jpeg_quality",
    "frame",
    "width",
    "height",
    "fov_x",
    "fov_y",
    "fov_radius",
    "seed",
    "index",
)


@dataclass(frozen=True)
class ImagePlan:
    """What image ``index`` of a data set shows, decided before any pixel is drawn."""

    index: int
    image: str  # EyePACS-style name: "<patient_id>_<eye>"
    patient_id: int
    eye: Eye
    grade: int
    gradable: bool
    frame: str  # camera frame format, one of fundus.FRAME_FORMATS


def _check_probs(grade_probs: Sequence[float]) -> np.ndarray:
    probs = np.asarray(grade_probs, dtype=np.float64)
    if probs.shape != (5,) or (probs < 0).any() or not np.isclose(probs.sum(), 1.0):
        raise ValueError(f"grade_probs must be 5 non-negative numbers summing to 1, got {list(grade_probs)}")
    return probs


def patient_grades(seed: int, patient_id: int, grade_probs: Sequence[float] = DEFAULT_GRADE_PROBS) -> tuple[int, int]:
    """(left, right) DR grades of a synthetic patient: correlated, each with marginal ``grade_probs``."""
    probs = _check_probs(grade_probs)
    rng = np.random.default_rng(np.random.SeedSequence([seed, patient_id, _PATIENT_STREAM]))
    first = int(rng.choice(5, p=probs))
    other = int(rng.choice(5, p=probs))
    second = first if rng.random() < SAME_GRADE_BOTH_EYES else other
    return (first, second) if rng.random() < 0.5 else (second, first)


def image_rng(seed: int, index: int) -> np.random.Generator:
    """The generator that draws everything about image ``index`` of the data set with this ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([seed, index]))


def plan_image(
    seed: int, index: int, *, ungradable_fraction: float = 0.08, grade_probs: Sequence[float] = DEFAULT_GRADE_PROBS
) -> ImagePlan:
    """Patient, eye, grade, gradability and camera frame of image ``index`` (cheap: no rendering)."""
    patient, side = divmod(index, 2)
    eye: Eye = "left" if side == 0 else "right"
    grade = patient_grades(seed, patient, grade_probs)[side]
    rng = image_rng(seed, index)
    gradable = bool(rng.random() >= ungradable_fraction)
    return ImagePlan(index, f"{patient}_{eye}", patient, eye, grade, gradable, draw_frame(rng))


def render_image(
    seed: int,
    index: int,
    *,
    size: int = 256,
    ungradable_fraction: float = 0.08,
    grade_probs: Sequence[float] = DEFAULT_GRADE_PROBS,
) -> tuple[np.ndarray, dict[str, Any], ImagePlan]:
    """Render image ``index`` of the data set: (uint8 ``[H, size, 3]``, info, plan).

    ``H`` depends on the frame format drawn for the image (``info["frame"]``; see ``fundus.py``).
    """
    plan = plan_image(seed, index, ungradable_fraction=ungradable_fraction, grade_probs=grade_probs)
    rng = image_rng(seed, index)
    rng.random()  # the gradability draw made by plan_image
    draw_frame(rng)  # and its frame draw
    image, info = render_fundus(rng, plan.grade, size=size, gradable=plan.gradable, eye=plan.eye, frame=plan.frame)
    return image, info, plan


_Job = tuple[Path, int, list[int], int, float, tuple[float, ...], str]


def _render_chunk(job: _Job) -> list[dict[str, Any]]:
    """Worker: render and write a list of image indices; returns their metadata rows."""
    image_dir, seed, indices, size, ungradable_fraction, grade_probs, fmt = job
    rows = []
    for index in indices:
        image, info, plan = render_image(
            seed, index, size=size, ungradable_fraction=ungradable_fraction, grade_probs=grade_probs
        )
        path = image_dir / f"{plan.image}.{fmt}"
        pil = Image.fromarray(image, mode="RGB")
        with atomic_write(path, fsync=False) as tmp:  # whole or absent; no fsync per image (regenerable)
            if fmt == "jpeg":
                pil.save(tmp, format="JPEG", quality=info["jpeg_quality"])
            else:
                pil.save(tmp, format="PNG")
        rows.append(
            {
                "image": plan.image,
                "level": plan.grade,
                "patient_id": plan.patient_id,
                "eye": plan.eye,
                "gradable": int(info["gradable"]),
                "ungradable_kind": info["ungradable_kind"] or "",
                "subtle": int(info["subtle"]),
                **info["lesions"],
                "jpeg_quality": info["jpeg_quality"],
                "frame": info["frame"],
                "width": image.shape[1],
                "height": image.shape[0],
                "fov_x": info["fov"][0],
                "fov_y": info["fov"][1],
                "fov_radius": info["fov"][2],
                "seed": seed,
                "index": index,
            }
        )
    return rows


def _write_csv(path: Path, columns: Sequence[str], rows: list[dict[str, Any]]) -> None:
    with atomic_write(path, fsync=False) as tmp, tmp.open("w", newline="") as f:  # the one CSV rule
        write_csv(f, columns, ([row.get(c) for c in columns] for row in rows))


def _render_all(jobs: list[_Job], n_images: int, *, workers: int, progress: bool) -> list[dict[str, Any]]:
    """Every chunk's rows, in image order: in this process (``workers == 1``) or in ``spawn``-ed ones."""
    rows: list[dict[str, Any]] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n_images, desc="synth", unit="img")
    results: Iterator[list[dict[str, Any]]]
    if workers == 1:
        results = map(_render_chunk, jobs)
        executor = None
    else:
        executor = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        results = executor.map(_render_chunk, jobs)
    try:
        for chunk_rows in results:
            rows.extend(chunk_rows)
            if bar is not None:
                bar.update(len(chunk_rows))
    finally:
        if executor is not None:
            executor.shutdown()
        if bar is not None:
            bar.close()
    rows.sort(key=lambda r: r["index"])
    return rows


def generate_dataset(
    out_dir: Path,
    *,
    n_images: int,
    seed: int,
    size: int = 256,
    ungradable_fraction: float = 0.08,
    workers: int = 1,
    image_format: ImageFormat = "jpeg",
    grade_probs: Sequence[float] = DEFAULT_GRADE_PROBS,
    progress: bool = False,
) -> Path:
    """Generate ``n_images`` synthetic fundus photographs under ``out_dir`` in the EyePACS layout.

    Writes ``train/<patient>_<eye>.<ext>``, ``trainLabels.csv`` (``image,level``), ``metadata.csv``
    (patient, eye, gradability, lesion counts by kind, frame format, frame size and FOV circle in px,
    seed, index) and ``dataset.json`` (generator
    version, parameters, counts, and the statement that the data are synthetic). Ungradable images keep
    their grade in ``trainLabels.csv``; ``metadata.csv`` flags them ``gradable=0``.
    Returns the path of ``trainLabels.csv``.

    ``workers > 1`` renders in ``spawn``-ed processes (safe next to torch's threads); a script calling
    it must therefore guard its entry point with ``if __name__ == "__main__":``.
    """
    if n_images < 1:
        raise ValueError(f"n_images must be >= 1, got {n_images}")
    if not 0.0 <= ungradable_fraction <= 1.0:
        raise ValueError(f"ungradable_fraction must be in [0, 1], got {ungradable_fraction}")
    if image_format not in ("jpeg", "png"):
        raise ValueError(f"Unknown image_format {image_format!r}; expected one of: jpeg, png")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    probs = tuple(float(p) for p in _check_probs(grade_probs))
    out_dir = Path(out_dir)
    image_dir = out_dir / "train"
    image_dir.mkdir(parents=True, exist_ok=True)

    chunk = max(1, min(64, n_images // (4 * workers) or 1))
    jobs: list[_Job] = [
        (image_dir, seed, list(range(s, min(s + chunk, n_images))), size, ungradable_fraction, probs, image_format)
        for s in range(0, n_images, chunk)
    ]
    rows = _render_all(jobs, n_images, workers=workers, progress=progress)
    manifest = out_dir / "trainLabels.csv"
    _write_csv(manifest, ("image", "level"), rows)
    _write_csv(out_dir / "metadata.csv", METADATA_COLUMNS, rows)
    grades = np.bincount([r["level"] for r in rows], minlength=5)
    gradable = sum(r["gradable"] for r in rows)
    counts = {
        "grade": {str(g): int(grades[g]) for g in range(5)},
        "referable": int(grades[2:].sum()),
        "gradable": int(gradable),
        "ungradable": int(n_images - gradable),
    }
    description = {
        "generator": GENERATOR_VERSION,
        "synthetic": True,
        "statement": SYNTHETIC_STATEMENT,
        "layout": "EyePACS: trainLabels.csv (image,level), images in train/<image>.<ext>",
        "seed": seed,
        "n_images": n_images,
        "n_patients": (n_images + 1) // 2,
        "size": size,
        "image_format": image_format,
        "ungradable_fraction": ungradable_fraction,
        "grade_probs": list(probs),
        "counts": counts,
        "label": "referable = grade >= 2 (EyePACS/ICDR scale 0-4)",
    }
    atomic_write_bytes(out_dir / "dataset.json", (json.dumps(description, indent=2) + "\n").encode(), fsync=False)
    logger.info(
        "wrote %d synthetic images (%d referable, %d ungradable) to %s",
        n_images,
        counts["referable"],
        n_images - gradable,
        out_dir,
    )
    return manifest
