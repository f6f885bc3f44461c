"""The learning curve's arms: a share of the training patients, nested, whole patients, per source and stratum."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from training.config import TrainConfig
from training.data.manifest import Manifest, ManifestRow
from training.data.prepare import source_split
from training.data.splits import training_subset


def _rows(seed: int = 0) -> list[ManifestRow]:
    """Two sources with overlapping patient numbers, two eyes a patient, about a fifth referable; EyePACS
    patients also carry a second copy of each eye."""
    rng = np.random.default_rng(seed)
    rows: list[ManifestRow] = []
    for source, patients in (("odir", 300), ("eyepacs", 120)):
        for p in range(patients):
            grade = int(rng.choice([0, 0, 0, 1, 2, 3]))
            for eye in ("left", "right"):
                copies = ("natural-1024", "stretched-256") if source == "eyepacs" else (None,)
                for copy in copies:
                    rows.append(ManifestRow(path=Path(f"{source}/{p}_{eye}_{copy}.jpg"), grade=grade,
                                            patient_id=str(p), eye=eye, row_no=len(rows) + 2, source=source,
                                            copy=copy))
    return rows


def _patients(rows: list[ManifestRow]) -> set[tuple[str | None, str]]:
    return {(r.source, r.patient_id) for r in rows}


def test_a_fraction_keeps_that_share_of_each_source_and_stratum_and_whole_patients() -> None:
    rows = _rows()
    half = training_subset(rows, 0.5, seed=3)
    for source in ("odir", "eyepacs"):
        for referable in (False, True):
            every = {r.patient_id for r in rows if r.source == source and r.referable == referable}
            chosen = {r.patient_id for r in half if r.source == source and r.referable == referable}
            assert len(chosen) == round(0.5 * len(every)), (source, referable, len(chosen), len(every))
    # every row of a kept patient is kept (both eyes, every copy), none of a dropped one
    kept = _patients(half)
    assert [r for r in rows if (r.source, r.patient_id) in kept] == half
    # patient 7 of ODIR and patient 7 of EyePACS are two people, chosen independently
    assert {r.source for r in half} == {"odir", "eyepacs"}


def test_smaller_fractions_are_nested_in_larger_ones_and_the_seed_decides() -> None:
    rows = _rows()
    quarter, half = (_patients(training_subset(rows, f, seed=0)) for f in (0.25, 0.5))
    assert quarter < half < _patients(rows)
    assert len(quarter) < len(half)
    assert _patients(training_subset(rows, 0.5, seed=0)) == half  # same seed, same patients
    assert _patients(training_subset(rows, 0.5, seed=1)) != half


def test_the_whole_set_and_bad_fractions() -> None:
    rows = _rows()
    assert training_subset(rows, 1.0) == rows
    tiny = training_subset(rows, 0.001)  # every stratum keeps at least one patient
    assert Counter((r.source, r.referable) for r in tiny).keys() == Counter(
        (r.source, r.referable) for r in rows).keys()
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            training_subset(rows, bad)
    with pytest.raises(ValueError, match="train_fraction"):
        TrainConfig(data="x", out="y", train_fraction=0.0)


def test_a_learning_curve_arm_changes_training_only() -> None:
    rows = Manifest(_rows(), source=Path("m.csv"))
    whole = source_split(rows, TrainConfig(data="m.csv", out="o", layout="manifest"))
    half = source_split(rows, TrainConfig(data="m.csv", out="o", layout="manifest", train_fraction=0.5))
    assert half.val == whole.val and half.test == whole.test
    assert set(map(id, half.train)) < set(map(id, whole.train))
    assert 0.4 < len(_patients(half.train)) / len(_patients(whole.train)) < 0.6
    # a train-only copy follows its patients into the subset
    copies = source_split(rows, TrainConfig(data="m.csv", out="o", layout="manifest", train_fraction=0.5,
                                            train_only_copies=("stretched-256",)))
    stretched = {(r.source, r.patient_id) for r in copies.train if r.copy == "stretched-256"}
    natural = {(r.source, r.patient_id) for r in copies.train if r.copy == "natural-1024"}
    assert stretched == natural and stretched
    assert not any(r.copy == "stretched-256" for r in copies.val + copies.test)
