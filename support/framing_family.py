"""The framing family of real photographs: which photographs, which half, and every render the gate must judge.

Photographs come from the shared data (``support.shared_data``; research use, never copied into the project):
EyePACS' natural copies (``eyepacs-5k``, copy ``natural-1024``: 384 px camera frames), ODIR-5K's normal and DR
eyes (512 px, circle-cropped and stretched), IDRiD (1024 px camera frames) and ``CHOSEN``, photographs picked by
eye as plainly gradable. Each photograph belongs to one half, ``tune`` or ``report``, by a hash of its patient
(``split_of``): thresholds are chosen on ``tune`` and the results reported on ``report``.

``judge_photograph`` runs one photograph through the gate as a programme would send it, then renders its
canonical disc (``support.framings``) in every framing x size (no finish) and every framing x finish (at a
seeded size), and the same for one degradation of it (round robin over ``DEGRADED``): the original's verdict
is the truth for the gradable renders, and each degraded render must be refused *for its reason*.
``judge_nonfundus`` does the same for a generated non-fundus image (``support.nonfundus``).

Example::

    rows = judge_photograph(Photo("idrid", "IDRiD_01.jpg", IDRID / "IDRiD_01.jpg", "IDRiD_01", "dr"), 0)
"""

from __future__ import annotations

import csv
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.image.decode import DECODE_SIDE
from models.image.quality import assess_quality
from service.inference.imaging import decode_rgb
from support.degradations import darkened, eyelid_shadow, overexposed, strong_blur
from support.framings import FINISHES, FRAMINGS, SIZES, canonical, render
from support.nonfundus import NON_FUNDUS
from support.shared_data import IDRID, ODIR, SHARED_DATA

EYEPACS = SHARED_DATA / "eyepacs-5k"
# degradation -> (function, the issues that count as refused "for its reason")
DEGRADED = {
    "blur": (strong_blur, ("blurred",)),
    "dark": (darkened, ("too_dark",)),
    "overexposed": (overexposed, ("overexposed",)),
    "obstructed": (eyelid_shadow, ("obstructed",)),
}
NON_FUNDUS_REASONS = ("not_fundus", "no_field_of_view")
# Photographs picked by eye from the shared sets as plainly gradable (sharp vessels to the periphery, even
# exposure, no shadow), from every set and grade, so that the family does not rest on the gate's verdicts alone.
CHOSEN = (
    "eyepacs-5k/images/1029_left.jpg",
    "eyepacs-5k/images/1032_right.jpg",
    "odir-5k/images/1_left.jpg",
    "odir-5k/images/1_right.jpg",
    "odir-5k/images/8_left.jpg",
    "idrid-lesion-54/IDRiD_01.jpg",
    "idrid-lesion-54/IDRiD_02.jpg",
)


@dataclass(frozen=True)
class Photo:
    """One source photograph: its set, name, file, patient key (for the split) and category."""

    source: str
    name: str
    path: Path
    patient: str
    category: str  # "normal" or "dr" (graded DR or DR keywords)


def split_of(patient: str) -> str:
    """``tune`` or ``report``: a fixed hash of the patient, so both eyes of a patient fall in one half."""
    return "tune" if zlib.crc32(patient.encode()) % 2 == 0 else "report"


def _sample(photos: list[Photo], n: int | None, seed: int) -> list[Photo]:
    if n is None or n >= len(photos):
        return photos
    rng = np.random.default_rng(seed)
    return [photos[i] for i in sorted(rng.choice(len(photos), n, replace=False))]


def eyepacs_photos() -> list[Photo]:
    with (EYEPACS / "labels.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["copy"] == "natural-1024"]
    return [Photo("eyepacs", r["image"], EYEPACS / "images" / r["image"], f"eyepacs-{r['patient']}",
                  "normal" if r["dr_grade"] == "0" else "dr") for r in rows]


def odir_photos() -> list[Photo]:
    with (ODIR / "labels.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["category"] in ("normal_fundus", "dr_keyword")]
    return [Photo("odir", r["image"], ODIR / r["image"], f"odir-{r['patient']}",
                  "normal" if r["category"] == "normal_fundus" else "dr") for r in rows]


def idrid_photos() -> list[Photo]:
    return [Photo("idrid", p.name, p, p.stem, "dr") for p in sorted(IDRID.glob("*.jpg"))]


def chosen_photos() -> list[Photo]:
    return [Photo("chosen", rel, SHARED_DATA / rel, f"chosen-{rel}", "chosen") for rel in CHOSEN]


def photographs(per_set: int | None, split: str, seed: int = 0) -> list[Photo]:
    """Up to ``per_set`` photographs of each set (seeded) in ``split`` (``tune``, ``report`` or ``all``)."""
    out: list[Photo] = []
    for k, photos in enumerate((eyepacs_photos(), odir_photos(), idrid_photos(), chosen_photos())):
        in_split = [p for p in photos if split in ("all", split_of(p.patient))]
        out += _sample(in_split, per_set, seed + k)
    return out


def decode(path: Path) -> np.ndarray:
    """The photograph as the service decodes an upload of it: uint8 [H, W, 3]."""
    data = path.read_bytes()
    return decode_rgb(data, max_pixels=50_000_000, max_bytes=len(data) + 1, size=DECODE_SIDE)


def family(disc: np.ndarray, rng: np.random.Generator) -> Iterator[tuple[str, str, str, np.ndarray]]:
    """(framing, size, finish, image) for every framing x size and every framing x finish (at a seeded size)."""
    for framing in FRAMINGS:
        for size in SIZES:
            yield framing, str(size), "plain", render(disc, framing, size, "plain", rng)
        for finish in FINISHES[1:]:
            size = int(rng.choice(SIZES))
            yield framing, "any", finish, render(disc, framing, size, finish, rng)


def _row(photo_set: str, name: str, split: str, truth: str, framing: str, size: str, finish: str,
         issues: list[str], details: str = "") -> dict[str, str]:
    return {"set": photo_set, "name": name, "split": split, "truth": truth, "framing": framing, "size": size,
            "finish": finish, "issues": ";".join(issues), "details": details}


def judge_photograph(photo: Photo, index: int, *, degrade: bool = True, family_too: bool = True
                     ) -> list[dict[str, str]]:
    """Rows of verdicts: the original (framing ``original``), its family if gradable, and one degradation's family.

    ``truth`` is the category for the original, ``gradable`` for its renders and the degradation's name for the
    degraded ones. ``family_too=False``: the original only.
    """
    split = split_of(photo.patient)
    rgb = decode(photo.path)
    report = assess_quality(rgb)
    why = "; ".join(f.message for f in report.findings)  # each refusal's measure, value and threshold
    rows = [_row(photo.source, photo.name, split, photo.category, "original", "native", "plain", report.issues, why)]
    if not report.gradable or not family_too:
        return rows
    disc = canonical(rgb)
    if disc is None:
        return rows
    rng = np.random.default_rng(zlib.crc32(photo.name.encode()))
    for framing, size, finish, img in family(disc, rng):
        rows.append(_row(photo.source, photo.name, split, "gradable", framing, size, finish,
                         assess_quality(img).issues))
    if degrade:
        kind = sorted(DEGRADED)[index % len(DEGRADED)]
        bad = DEGRADED[kind][0](disc, rng)
        for framing, size, finish, img in family(bad, rng):
            rows.append(_row(photo.source, photo.name, split, kind, framing, size, finish,
                             assess_quality(img).issues))
    return rows


def judge_nonfundus(index: int) -> list[dict[str, str]]:
    """Rows of verdicts on the family of one generated non-fundus image (the makers in turn, seeded by index)."""
    kind = sorted(NON_FUNDUS)[index % len(NON_FUNDUS)]
    rng = np.random.default_rng(1000 + index)
    img = NON_FUNDUS[kind](rng, 512)
    split = "tune" if index % 2 == 0 else "report"
    return [_row("nonfundus", f"{kind}-{index}", split, "non_fundus", framing, size, finish,
                 assess_quality(out).issues) for framing, size, finish, out in family(img, rng)]


def refused_for_reason(truth: str, issues: list[str]) -> bool:
    """A degraded or non-fundus render is refused for its reason (``truth`` is the degradation's name)."""
    reasons = NON_FUNDUS_REASONS if truth == "non_fundus" else DEGRADED[truth][1]
    return any(i in reasons for i in issues)
