"""``radscreen-train prune`` on a tiny artifact: the packed artifact, its manifest and card, the dense tensors
it loads to, served draws with exact zeros, and the service and ONNX export reading it unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from models.artifact import (
    ARTIFACT_FORMAT,
    PACKED_ARTIFACT_FORMAT,
    WEIGHTS_FILE,
    ArtifactError,
    load_artifact,
    replace_model_card,
)
from models.nn.pruning import PRUNED_RHO, prune_state_dict, snr, weight_prefixes
from models.serving.onnx_backend import export_graph
from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.spec import ScorerSpec
from support.artifacts import build_tiny_artifact
from support.images import encode, fundus_like
from training.cli import main as train_main


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_artifact(tmp_path_factory.mktemp("parent") / "tiny", width=8, head_draws=4)


@pytest.fixture(scope="module")
def pruned(parent: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pruned") / "snr-25"
    effect = out.parent / "effect.md"
    effect.write_text("AUC 0.900 against the parent's 0.901 (test fixture).\n")
    assert train_main(["prune", "--artifact", str(parent), "--keep", "0.25", "--out", str(out),
                       "--effect", str(effect)]) == 0
    return out


def test_kept_share_is_exact_and_the_lowest_snr_weights_are_removed(parent: Path, pruned: Path) -> None:
    before, after = load_artifact(parent).state_dict(), load_artifact(pruned).state_dict()
    total = sum(before[p + "_mu"].numel() for p in weight_prefixes(before))
    kept_masks = {p: ~((after[p + "_mu"] == 0) & (after[p + "_rho"] == PRUNED_RHO)) for p in weight_prefixes(after)}
    assert sum(int(m.sum()) for m in kept_masks.values()) == round(0.25 * total)
    kept = torch.cat([snr(before[p + "_mu"], before[p + "_rho"])[m] for p, m in kept_masks.items()])
    removed = torch.cat([snr(before[p + "_mu"], before[p + "_rho"])[~m] for p, m in kept_masks.items()])
    assert kept.min() >= removed.max()


def test_loads_to_the_same_dense_tensors_bit_for_bit(parent: Path, pruned: Path) -> None:
    expected = prune_state_dict(load_artifact(parent).state_dict(), 0.25).state
    got = load_artifact(pruned).state_dict()
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        assert torch.equal(got[k].view(torch.int32), v.view(torch.int32)), k


def test_manifest_hashes_the_packed_weights_and_the_file_is_smaller(parent: Path, pruned: Path) -> None:
    manifest = json.loads((pruned / "manifest.json").read_text())
    assert manifest["format"] == PACKED_ARTIFACT_FORMAT
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((pruned / name).read_bytes()).hexdigest() == digest, name
    assert json.loads((parent / "manifest.json").read_text())["format"] == ARTIFACT_FORMAT  # dense stays format 1
    # mask 1/32 of the fp32 bytes + 25 % of the values; biases dense
    assert (pruned / WEIGHTS_FILE).stat().st_size < 0.4 * (parent / WEIGHTS_FILE).stat().st_size


def test_card_names_the_parent_the_share_the_method_and_the_effect(parent: Path, pruned: Path) -> None:
    p, art = load_artifact(parent), load_artifact(pruned)
    card = art.model_card
    assert p.sha256 in card and p.files[WEIGHTS_FILE] in card
    assert f"{p.config.name} {p.config.version}" in card
    assert "Method: snr" in card and "keep 25 %" in card and "(25.00 %; asked 25 %)" in card
    assert "AUC 0.900 against the parent's 0.901" in card
    assert art.config.version == f"{p.config.version}+prune-snr-25"
    assert art.calibration.referral_threshold_mi == p.calibration.referral_threshold_mi
    assert art.calibration.precision_drift == {}


def test_served_draws_are_exactly_zero_where_pruned_and_the_parents_elsewhere(parent: Path, pruned: Path) -> None:
    art = load_artifact(pruned)
    dense = art.state_dict()
    net, ref = art.serving_network(), load_artifact(parent).serving_network()
    for i, (conv, ref_conv) in enumerate(zip(net.convs, ref.convs, strict=True)):
        mask = ~((dense[f"features.{_conv_index(dense, i)}.weight_mu"] == 0)
                 & (dense[f"features.{_conv_index(dense, i)}.weight_rho"] == PRUNED_RHO))  # [O, C, k, k]
        w = conv.weight  # [K, O, C, k, k]
        assert torch.equal(w[:, ~mask], torch.zeros_like(w[:, ~mask]))
        assert torch.equal(w[:, mask], ref_conv.weight[:, mask])  # same seed: the kept noise is the parent's
    head_mask = ~((dense["head.weight_mu"] == 0) & (dense["head.weight_rho"] == PRUNED_RHO))  # [1, in]
    head = net.linears[0].weight  # [K, M·1, in]
    assert torch.equal(head[:, :, ~head_mask[0]], torch.zeros_like(head[:, :, ~head_mask[0]]))


def _conv_index(state: dict[str, torch.Tensor], i: int) -> int:
    return sorted(int(k.split(".")[1]) for k in state if k.startswith("features.") and k.endswith("weight_mu"))[i]


def test_the_service_scores_it_and_onnx_exports_it(pruned: Path, tmp_path: Path) -> None:
    scorer = load_scorer(ScorerSpec(model_dir=pruned, backend="torch", device="cpu"))
    scores = scorer.score_batch([prepare_image(encode(fundus_like(s)), scorer.pipeline) for s in range(2)])
    assert all(0.0 <= s.probability <= 1.0 and np.isfinite(s.mutual_information) for s in scores)
    assert export_graph(load_artifact(pruned).serving_network(), tmp_path / "g.onnx").stat().st_size > 0


def test_replacing_the_card_keeps_the_packed_format(pruned: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(pruned, copy)
    replace_model_card(copy, load_artifact(copy).model_card + "\nMore.\n")
    assert json.loads((copy / "manifest.json").read_text())["format"] == PACKED_ARTIFACT_FORMAT
    load_artifact(copy).state_dict()


def test_an_unknown_format_is_refused_by_name(pruned: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(pruned, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["format"] = "radscreen-artifact/9"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="is 'radscreen-artifact/9'; this code reads 'radscreen-artifact/1', "
                                            "'radscreen-artifact/2'"):
        load_artifact(copy)


@pytest.mark.parametrize(("args", "message"), [
    (["--keep", "25"], "--keep is a share in (0, 1]"),
    (["--keep", "0.5", "--method", "random"], None),
])
def test_bad_arguments_get_one_line(parent: Path, tmp_path: Path, args: list[str], message: str | None,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["prune", "--artifact", str(parent), "--out", str(tmp_path / "x"), *args]
    if message is None:
        with pytest.raises(SystemExit) as exit_info:
            train_main(argv)
        assert exit_info.value.code == 2
        assert "invalid choice: 'random'" in capsys.readouterr().err
        return
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
