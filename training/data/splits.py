"""Patient-level train/validation/test splits: both eyes of a patient always land in the same split.

Stratified by whether the patient has referable DR in any eye, so each split gets about the same
referable share; deterministic given the seed and independent of the row order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from training.data.manifest import ManifestRow


class DataSplit(NamedTuple):
    """The three splits, each a list of manifest rows in their original order."""

    train: list[ManifestRow]
    val: list[ManifestRow]
    test: list[ManifestRow]


def split_by_patient(
    rows: Sequence[ManifestRow], fractions: Sequence[float] = (0.7, 0.15, 0.15), seed: int = 0
) -> DataSplit:
    """Split ``rows`` into train/val/test by patient, with about ``fractions`` of the images in each.

    Within each stratum (patients with / without a referable eye) patients are shuffled with
    ``seed`` and dealt out in turn to whichever split is furthest below its target image count.
    """
    return _parts(rows, assign_sides(rows, fractions, seed))


def _parts(rows: Sequence[ManifestRow], side: np.ndarray) -> DataSplit:
    parts: tuple[list[ManifestRow], list[ManifestRow], list[ManifestRow]] = ([], [], [])
    for i, row in enumerate(rows):
        parts[int(side[i])].append(row)
    return DataSplit(*parts)


def assign_sides(rows: Sequence[ManifestRow], fractions: Sequence[float], seed: int) -> np.ndarray:
    """The split of each row (0 train, 1 validation, 2 test), ``[len(rows)]``: :func:`split_by_patient`'s rule."""
    fr = np.asarray(fractions, dtype=np.float64)
    if fr.shape != (3,) or (fr < 0).any() or not np.isclose(fr.sum(), 1.0):
        raise ValueError(f"fractions must be 3 non-negative numbers summing to 1, got {list(fractions)}")
    by_patient: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_patient[row.patient_id].append(i)
    strata: dict[bool, list[str]] = {False: [], True: []}
    for patient in sorted(by_patient):
        strata[any(rows[i].referable for i in by_patient[patient])].append(patient)

    assignment = np.zeros(len(rows), dtype=np.int64)
    rng = np.random.default_rng(seed)
    for referable in (False, True):
        patients = strata[referable]
        order = rng.permutation(len(patients))
        target = fr * sum(len(by_patient[p]) for p in patients)
        filled = np.zeros(3)
        for j in order.tolist():
            members = by_patient[patients[j]]
            k = int(np.argmax(target - filled))  # the split with the largest shortfall
            filled[k] += len(members)
            assignment[members] = k
    return assignment


def split_by_source(
    rows: Sequence[ManifestRow], fractions: Sequence[float] = (0.7, 0.15, 0.15), seed: int = 0
) -> DataSplit:
    """:func:`split_by_patient` within each ``source`` (rows without one form one group), joined back in row order.

    A patient is the pair (source, patient_id): programmes number their patients independently, so patient 7
    of ODIR and patient 7 of EyePACS are two people, each split with their own source. Every source gets about
    ``fractions`` of its own images in each split, stratified by referable as :func:`split_by_patient` does,
    with the same ``seed``; a source's assignment does not depend on the other sources, so a single-source
    manifest splits exactly as before (and ODIR's eyes land where a model trained on ODIR alone put them).
    """
    return _parts(rows, source_sides(rows, fractions, seed))


def source_sides(rows: Sequence[ManifestRow], fractions: Sequence[float] = (0.7, 0.15, 0.15),
                 seed: int = 0) -> np.ndarray:
    """:func:`split_by_source`'s assignment: int64 ``[N]``, 0 train, 1 validation, 2 test, in row order."""
    groups: dict[str | None, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        groups[row.source].append(i)
    side = np.zeros(len(rows), dtype=np.int64)
    for members in groups.values():
        side[members] = assign_sides([rows[i] for i in members], fractions, seed)
    return side


def split_from_sides(rows: Sequence[ManifestRow], side: Sequence[int] | np.ndarray) -> DataSplit:
    """The split that an assignment made earlier (``source_sides``, e.g. recorded in packed shards) gives."""
    return _parts(rows, np.asarray(side, dtype=np.int64))


def training_subset(rows: Sequence[ManifestRow], fraction: float, seed: int = 0) -> list[ManifestRow]:
    """About ``fraction`` of the training patients, for a learning curve; rows kept in their order.

    Within each source and each stratum (patients with / without a referable eye), patients are ranked by one
    seeded permutation and the first ``round(fraction * n)`` are kept (at least one where the stratum has any),
    so a smaller fraction keeps a subset of a larger one's patients (nested arms) and both eyes of a patient,
    and every copy of them, stay together. ``fraction`` 1 returns every row.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"the training fraction must be in (0, 1], got {fraction}")
    if fraction == 1:
        return list(rows)
    by_patient: dict[tuple[str | None, str], list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_patient[(row.source, row.patient_id)].append(i)
    strata: dict[tuple[str | None, bool], list[tuple[str | None, str]]] = defaultdict(list)
    for key in sorted(by_patient, key=lambda k: (k[0] or "", k[1])):
        strata[(key[0], any(rows[i].referable for i in by_patient[key]))].append(key)
    keep: set[int] = set()
    rng = np.random.default_rng(seed)
    for stratum in sorted(strata, key=lambda s: (s[0] or "", s[1])):
        patients = strata[stratum]
        ranked = rng.permutation(len(patients))
        for j in ranked[:max(1, round(fraction * len(patients)))].tolist():
            keep.update(by_patient[patients[j]])
    return [row for i, row in enumerate(rows) if i in keep]
