"""``radscreen-train`` as a newcomer meets it: --help with defaults, synth's folder guard, evaluate's progress
bar, and the documented weight-free ONNX export snippet (run from docs/training.md)."""

from __future__ import annotations

import argparse
import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from support.artifacts import build_tiny_artifact
from training.cli import build_parser
from training.cli import main as train_main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "training.md"


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize("command", ["synth", "fit", "evaluate", "export"])
def test_help_has_a_line_and_the_default_for_every_option(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        train_main([command, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    parser = _subparser(command)
    formatter = parser._get_formatter()
    for action in parser._actions:
        if action.dest == "help" or action.help == argparse.SUPPRESS:  # a renamed flag's hidden former spelling
            continue
        assert action.help, f"{command} {action.option_strings}: no help text"
        rendered = formatter._get_help_string(action) or ""
        says_nothing = action.required or action.default in (None, False)
        # a default that says something is shown once (appended, or in the help's own words); none otherwise
        assert ("%(default)s" in rendered) == (not says_nothing and "default" not in action.help), action.dest
    flat = re.sub(r"\s+", " ", text)
    expected = {"synth": "number of images (default: 2000)", "fit": "(default: auto)",
                "evaluate": "(default: 200)", "export": "(default: the embedded model)"}[command]
    assert expected in flat
    assert "(default: None)" not in flat and "(default: False)" not in flat
    assert not re.search(r"\(default: [^()]*\) \(default:", flat)  # never two defaults for one option


def test_fit_defaults_to_device_auto_and_the_authors_recipe() -> None:
    args = build_parser().parse_args(["fit", "--data", "d", "--out", "o"])
    assert (args.device, args.rho_init, args.lr, args.amsgrad, args.optimizer) == ("auto", -4.0, 1e-3, True, "adam")


def test_synth_refuses_a_non_empty_folder_and_overwrite_clears_it(tmp_path: Path) -> None:
    out = tmp_path / "synth"
    assert train_main(["synth", "--out", str(out), "--n", "6", "--size", "64", "--workers", "1"]) == 0
    with pytest.raises(SystemExit, match=r"not empty.*--overwrite"):
        train_main(["synth", "--out", str(out), "--n", "3", "--size", "64", "--workers", "1"])
    assert len(list((out / "train").iterdir())) == 6  # nothing was touched
    assert train_main(["synth", "--out", str(out), "--n", "3", "--size", "64", "--workers", "1", "--overwrite"]) == 0
    assert len(list((out / "train").iterdir())) == 3  # old images gone, not mixed with the new ones
    assert len((out / "trainLabels.csv").read_text().strip().splitlines()) == 1 + 3


def test_synth_overwrite_never_deletes_foreign_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match=r"notes\.txt"):
        train_main(["synth", "--out", str(tmp_path), "--n", "2", "--size", "64", "--overwrite"])
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_evaluate_shows_a_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "synth"
    assert train_main(["synth", "--out", str(data), "--n", "8", "--size", "64", "--workers", "1",
                       "--ungradable-fraction", "0", "--seed", "3"]) == 0
    art = build_tiny_artifact(tmp_path / "art")
    capsys.readouterr()
    assert train_main(["evaluate", "--artifact", str(art), "--data", str(data), "--out", str(tmp_path / "eval"),
                       "--n-bootstrap", "3"]) == 0
    assert re.search(r"scoring 8 images x 16 draws: 100%", capsys.readouterr().err)


def test_top_level_help_examples_are_cpu_sized_and_warn_about_the_full_size_model(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        train_main(["--help"])
    text = capsys.readouterr().out.replace("\\\n", " ")  # join the examples' continued lines
    fits = [line.split() for line in text.splitlines() if line.strip().startswith("radscreen-train fit")]
    assert fits and all("--width" in f and "--input-size" in f for f in fits)
    args = build_parser().parse_args(fits[0][1:])
    assert (args.width, args.input_size) == (16, 128)
    assert "full-size model" in text and "use a GPU" in text


def test_evaluate_says_what_it_measured_and_what_it_left_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "synth"
    assert train_main(["synth", "--out", str(data), "--n", "12", "--size", "64", "--workers", "1",
                       "--ungradable-fraction", "0.34", "--seed", "5"]) == 0
    with (data / "metadata.csv").open() as f:
        ungradable = sum(row["gradable"] == "0" for row in csv.DictReader(f))
    assert 0 < ungradable < 12
    art = build_tiny_artifact(tmp_path / "art")
    capsys.readouterr()
    assert train_main(["evaluate", "--artifact", str(art), "--data", str(data), "--out", str(tmp_path / "eval"),
                       "--n-bootstrap", "3", "--no-progress"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[:out.rindex("}") + 1])
    assert "validation" not in summary  # these are the given images' metrics, not the artifact's validation split
    assert (summary["images_evaluated"], summary["ungradable_left_out"]) == (12 - ungradable, ungradable)
    assert summary["metrics"]["n_images"] == summary["images_evaluated"]


def test_batch_usage_names_the_command_as_typed(capsys: pytest.CaptureFixture[str]) -> None:
    from service.cli import main as radscreen_main

    with pytest.raises(SystemExit):
        radscreen_main(["batch", "score", "--help"])
    assert capsys.readouterr().out.startswith("usage: radscreen batch score ")


def _doc_snippet() -> str:
    text = DOCS.read_text()
    section = text[text.index("## Export"):]
    return section[section.index("```python") + len("```python"):section.index("```", section.index("```python") + 3)]


def test_export_doc_snippet_runs_and_matches_the_torch_draws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from models.artifact import load_artifact
    from models.nn.draws import materialise_draws

    monkeypatch.chdir(tmp_path)
    build_tiny_artifact(tmp_path / "models" / "my-model")
    assert train_main(["export", "--artifact", "models/my-model", "--out", "runs/graph.onnx"]) == 0
    namespace: dict[str, object] = {}
    exec(compile(_doc_snippet(), str(DOCS), "exec"), namespace)  # the documented code, as written
    logits = namespace["logits"]
    assert isinstance(logits, np.ndarray)
    artifact = load_artifact("models/my-model")
    draws = artifact.serving_draws()
    net = materialise_draws(artifact.build_model(), mc_samples=draws.mc_samples, seed=draws.draw_seed)
    size = artifact.config.architecture.input_size
    with torch.no_grad():
        expected = net(torch.zeros(1, 3, size, size)).numpy()  # [K, B, 1]
    assert logits.shape == expected.shape == (16, 1, 1)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)
    assert len(np.unique(logits.round(6))) > 1  # the K draws really differ
