"""Synthetic fundus generator: determinism, grade-driven lesions, ungradable share, EyePACS layout."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from training.data import read_eyepacs, read_synthetic
from training.synthetic import (
    CONFOUNDER_KINDS,
    DEFAULT_GRADE_PROBS,
    FRAME_FORMATS,
    LESION_KINDS,
    UNGRADABLE_KINDS,
    generate_dataset,
    patient_grades,
    plan_image,
    quality_gate_examples,
    render_fundus,
    render_image,
)
from training.synthetic.fundus import Eye, pixel_grid, sample_geometry
from training.synthetic.lesions import plan_lesions

SIZE = 96


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(list(key)))


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    generate_dataset(out, n_images=12, seed=3, size=SIZE)
    return out


def test_same_seed_and_index_give_identical_pixels_and_other_seeds_differ() -> None:
    a, info_a, _ = render_image(11, 5, size=SIZE)
    b, info_b, _ = render_image(11, 5, size=SIZE)
    c, _, _ = render_image(12, 5, size=SIZE)
    d, _, _ = render_image(11, 6, size=SIZE)
    assert a.dtype == np.uint8 and a.shape[1:] == (SIZE, 3) and a.shape[0] <= SIZE
    assert np.array_equal(a, b) and info_a == info_b
    assert not np.array_equal(a, c)
    assert not np.array_equal(a, d)


def test_dataset_files_are_byte_identical_across_runs_and_worker_counts(small_dataset: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    generate_dataset(again, n_images=12, seed=3, size=SIZE, workers=2)
    for name in ("trainLabels.csv", "metadata.csv"):
        assert (again / name).read_bytes() == (small_dataset / name).read_bytes()
    files = sorted(p.name for p in (small_dataset / "train").iterdir())
    assert len(files) == 12
    for name in files:
        assert (again / "train" / name).read_bytes() == (small_dataset / "train" / name).read_bytes()
    # Any single image regenerates alone, identically (same pixels, same JPEG quality -> same bytes).
    image, info, plan = render_image(3, 7, size=SIZE)
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG", quality=info["jpeg_quality"])
    assert buf.getvalue() == (small_dataset / "train" / f"{plan.image}.jpeg").read_bytes()


def test_other_seed_gives_other_images(small_dataset: Path, tmp_path: Path) -> None:
    generate_dataset(tmp_path, n_images=2, seed=4, size=SIZE)
    assert (tmp_path / "train" / "0_left.jpeg").read_bytes() != (small_dataset / "train" / "0_left.jpeg").read_bytes()


def test_manifest_is_eyepacs_layout_and_reads_back(small_dataset: Path) -> None:
    with (small_dataset / "trainLabels.csv").open() as f:
        header = f.readline().strip()
        body = list(csv.reader(f))
    assert header == "image,level"
    assert [r[0] for r in body[:4]] == ["0_left", "0_right", "1_left", "1_right"]
    rows = read_eyepacs(small_dataset / "trainLabels.csv", small_dataset / "train")
    assert len(rows) == 12 and not rows.skipped
    assert [r.grade for r in rows] == [int(r[1]) for r in body]
    assert rows[2].patient_id == rows[3].patient_id == "1" and (rows[2].eye, rows[3].eye) == ("left", "right")
    meta = list(csv.DictReader((small_dataset / "metadata.csv").open()))
    synth = read_synthetic(small_dataset)
    assert [r.gradable for r in synth] == [m["gradable"] == "1" for m in meta]
    for m in meta:
        plan = plan_image(3, int(m["index"]))
        assert (m["image"], int(m["level"]), m["gradable"] == "1") == (plan.image, plan.grade, plan.gradable)
    info = json.loads((small_dataset / "dataset.json").read_text())
    assert info["synthetic"] is True and "SYNTHETIC" in info["statement"]
    assert info["seed"] == 3 and info["n_images"] == 12
    assert sum(info["counts"]["grade"].values()) == 12
    assert info["counts"]["referable"] == sum(int(r[1]) >= 2 for r in body)


def test_lesion_kinds_follow_the_grade_rules() -> None:
    rng = _rng(0)
    for grade in range(5):
        for _ in range(300):
            c = plan_lesions(rng, grade).counts
            dr = {k: c[k] for k in LESION_KINDS}
            if grade == 0:
                assert sum(dr.values()) == 0
            elif grade == 1:
                assert dr["microaneurysm"] >= 1 and sum(dr.values()) == dr["microaneurysm"]
            else:
                assert dr["haemorrhage"] + dr["hard_exudate"] >= 1
            if grade == 3:  # severe NPDR: many haemorrhages, cotton-wool spots
                assert dr["haemorrhage"] >= 9 and dr["cotton_wool_spot"] >= 1
            if grade >= 3:
                assert dr["haemorrhage"] >= 3
            assert (dr["new_vessels"] >= 1) == (grade == 4)
            assert dr["preretinal_haemorrhage"] == 0 or grade == 4


def test_grade_2_is_sometimes_subtle_and_counts_overlap_between_neighbours() -> None:
    rng = _rng(1)
    g2 = [plan_lesions(rng, 2) for _ in range(400)]
    g3 = [plan_lesions(rng, 3) for _ in range(400)]
    subtle = [p for p in g2 if p.subtle]
    assert 0.2 < len(subtle) / len(g2) < 0.4
    assert all(p.counts["haemorrhage"] <= 2 and p.contrast < 0.7 for p in subtle)
    assert max(p.counts["haemorrhage"] for p in g2) >= min(p.counts["haemorrhage"] for p in g3)
    g1_ma = [plan_lesions(rng, 1).counts["microaneurysm"] for _ in range(400)]
    assert max(g1_ma) >= min(p.counts["microaneurysm"] for p in g2 if not p.subtle)


def test_confounders_are_independent_of_the_grade() -> None:
    rng = _rng(2)
    rates = []
    for grade in (0, 1, 2):
        plans = [plan_lesions(rng, grade) for _ in range(600)]
        rates.append([np.mean([p.counts[k] > 0 for p in plans]) for k in CONFOUNDER_KINDS])
    assert np.allclose(rates[0], rates[1], atol=0.08) and np.allclose(rates[0], rates[2], atol=0.08)
    assert min(rates[0]) > 0.1  # every confounder kind does occur


def test_render_info_reports_the_planned_lesions_and_lesions_change_pixels() -> None:
    _, info = render_fundus(_rng(5), 4, size=SIZE)
    assert info["grade"] == 4 and info["gradable"] and info["lesions"]["new_vessels"] >= 1
    assert set(info["lesions"]) == set(LESION_KINDS + CONFOUNDER_KINDS)
    # Same random stream up to the lesion plan; a severe eye is visibly different from a healthy one.
    healthy, _ = render_fundus(_rng(6), 0, size=SIZE, eye="left")
    severe, info3 = render_fundus(_rng(6), 3, size=SIZE, eye="left")
    assert info3["lesions"]["haemorrhage"] >= 9
    assert np.abs(healthy.astype(int) - severe.astype(int)).max() > 40


def test_anatomy_disc_side_follows_the_eye_and_outside_fov_is_black() -> None:
    sides: tuple[tuple[Eye, int], ...] = (("right", 1), ("left", -1))
    for eye, sign in sides:
        geom = sample_geometry(_rng(7), SIZE, eye)
        assert np.sign(geom.disc_x - geom.cx) == sign
        assert np.sign(geom.fovea_x - geom.disc_x) == -sign
        for frame in FRAME_FORMATS:
            image, info = render_fundus(_rng(7), 0, size=SIZE, eye=eye, frame=frame)
            h, w = image.shape[:2]
            cx = info["fov"][0]
            _, xx = pixel_grid(h, w)
            corner = image[:6, :6].astype(float)
            assert corner.mean() < 8, frame  # near-black outside the field of view
            centre = image[h // 3 : 2 * h // 3, w // 3 : 2 * w // 3].astype(float)
            assert centre[..., 0].mean() > centre[..., 2].mean() + 20, frame  # orange-red retina: R >> B
            bright = image.sum(axis=2) > np.percentile(image.sum(axis=2), 99.5)  # the optic disc
            assert np.sign(xx[bright].mean() - cx) == sign, frame


def test_ungradable_fraction_and_kinds() -> None:
    plans = [plan_image(0, i, ungradable_fraction=0.08) for i in range(4000)]
    frac = np.mean([not p.gradable for p in plans])
    assert 0.065 < frac < 0.095
    assert all(p.gradable for p in (plan_image(0, i, ungradable_fraction=0.0) for i in range(200)))
    dark, info = render_fundus(_rng(8), 2, size=SIZE, gradable=False, ungradable_kind="dark")
    ok, _ = render_fundus(_rng(8), 2, size=SIZE, gradable=True)
    assert not info["gradable"] and info["ungradable_kind"] == "dark" and info["grade"] == 2
    assert dark.mean() < 0.35 * ok.mean()
    blurred, _ = render_fundus(_rng(8), 2, size=SIZE, gradable=False, ungradable_kind="blur")

    def detail(img: np.ndarray) -> float:
        g = img[..., 1].astype(float)[SIZE // 4 : 3 * SIZE // 4, SIZE // 4 : 3 * SIZE // 4]
        return float(np.abs(np.diff(g, axis=1)).mean())

    assert detail(blurred) < 0.5 * detail(ok)
    with pytest.raises(ValueError, match="expected one of"):
        render_fundus(_rng(8), 2, size=SIZE, gradable=False, ungradable_kind="foggy")


def test_grade_distribution_is_enriched_and_both_eyes_correlate() -> None:
    pairs = np.array([patient_grades(0, p) for p in range(3000)])
    grades = pairs.reshape(-1)
    freq = np.bincount(grades, minlength=5) / len(grades)
    assert np.allclose(freq, DEFAULT_GRADE_PROBS, atol=0.025)
    assert 0.28 < (grades >= 2).mean() < 0.37
    same = (pairs[:, 0] == pairs[:, 1]).mean()
    independent_same = float(np.sum(np.square(DEFAULT_GRADE_PROBS)))
    assert same > independent_same + 0.2
    plans = [plan_image(0, i) for i in range(6)]
    assert [p.image for p in plans] == ["0_left", "0_right", "1_left", "1_right", "2_left", "2_right"]
    assert (plans[0].grade, plans[1].grade) == patient_grades(0, 0)


def test_generate_dataset_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="n_images"):
        generate_dataset(tmp_path, n_images=0, seed=0)
    with pytest.raises(ValueError, match="ungradable_fraction"):
        generate_dataset(tmp_path, n_images=2, seed=0, ungradable_fraction=1.5)
    with pytest.raises(ValueError, match="grade_probs"):
        generate_dataset(tmp_path, n_images=2, seed=0, grade_probs=(0.5, 0.5, 0.5, 0.0, 0.0))


def test_quality_gate_examples_cover_non_fundus_and_every_defect() -> None:
    examples = quality_gate_examples(seed=0, size=64)
    names = {e.name for e in examples}
    assert {f"ungradable_{k}" for k in UNGRADABLE_KINDS} <= names
    assert sum(not e.is_fundus for e in examples) >= 5
    assert all(e.image.shape[1:] == (64, 3) and e.image.shape[0] <= 64 and e.image.dtype == np.uint8 for e in examples)
    assert sum(e.gradable for e in examples) == len(FRAME_FORMATS)  # one gradable photograph per frame format
    assert all(not e.gradable for e in examples if not e.is_fundus)
    assert any(e.gradable for e in examples)
