"""Training precision follows the machine: ``--precision auto`` takes bf16 only where it is native, and an
explicit bf16 where oneDNN would emulate it (~70x slower, docs/results-benchmarks.md) is refused with a message.
The CPU is injected (models.platform.cpu.detect_cpu) so both kinds are exercised on whatever machine runs the tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from models.platform.cpu import CpuCapability, detect_cpu
from training.cli import main as train_main
from training.config import TrainConfig
from training.loop import Trainer, training_runtime

AVX2_ONLY = detect_cpu(cpuinfo="model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx fma avx2\n", isa="AVX2")
AMX = detect_cpu(cpuinfo="model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: avx2 avx512f avx512_bf16 "
                         "amx_bf16 amx_tile\n", isa="AVX512")


def resolve_precision(requested: str, *, cpu: CpuCapability, device: str = "cpu") -> str:
    config = TrainConfig(data="d", out="o", precision=requested, device=device)  # type: ignore[arg-type]
    return training_runtime(config, cpu=cpu).precision


def test_auto_takes_bf16_only_where_it_is_native() -> None:
    assert resolve_precision("auto", cpu=AVX2_ONLY) == "fp32"
    assert resolve_precision("auto", cpu=AMX) == "bf16"
    assert resolve_precision("bf16", cpu=AMX) == "bf16"
    assert resolve_precision("fp32", cpu=AMX) == "fp32"  # an explicit fp32 is never upgraded


def test_explicit_bf16_on_an_emulating_cpu_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"no native bf16 \(AMD EPYC.*--precision fp32, or auto"):
        resolve_precision("bf16", cpu=AVX2_ONLY)


def test_a_cuda_device_where_none_is_visible_names_the_flag() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    with pytest.raises(ValueError, match=r"--device cuda: .*no CUDA device is available"):
        resolve_precision("fp32", cpu=AMX, device="cuda")


def test_the_config_rejects_an_unknown_precision() -> None:
    with pytest.raises(ValueError, match="Unknown precision 'fp16'"):
        TrainConfig(data="d", out="o", precision="fp16")  # type: ignore[arg-type]


def test_the_trainer_records_the_resolved_precision(tmp_path: Path) -> None:
    """'auto' is resolved once, so config.json, the resume check and the card name what actually ran."""
    cfg = TrainConfig(data=str(tmp_path), out=str(tmp_path / "run"), precision="auto", device="cpu")
    assert Trainer(cfg, progress=False, cpu=AVX2_ONLY).config.precision == "fp32"
    assert Trainer(cfg, progress=False, cpu=AMX).config.precision == "bf16"
    with pytest.raises(ValueError, match="no native bf16"):
        Trainer(TrainConfig(data="d", out="o", precision="bf16", device="cpu"), progress=False, cpu=AVX2_ONLY)


def _fit(data: Path, out: Path, *extra: str) -> list[str]:
    return ["fit", "--data", str(data), "--out", str(out), "--width", "2", "--input-size", "32", "--epochs", "2",
            "--batch-size", "8", "--device", "cpu", "--no-progress", "--stop-after-steps", "1", *extra]


def test_fit_cli_refuses_emulated_bf16_before_any_work(tiny_data: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert train_main(_fit(tiny_data, out, "--precision", "bf16", "--native-bf16", "no")) == 2
    err = capsys.readouterr().err
    assert err.startswith("radscreen-train fit: precision=bf16 was requested, but ") and "no native bf16" in err
    assert "--precision fp32, or auto" in err  # the fix is named in the CLI's own terms
    assert "Traceback" not in err
    assert not out.exists()  # refused before the run directory was made


def test_fit_cli_auto_writes_the_chosen_precision(tiny_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert train_main(_fit(tiny_data, out, "--precision", "auto", "--native-bf16", "no")) == 0
    assert json.loads((out / "config.json").read_text())["precision"] == "fp32"


def test_cli_user_errors_are_one_line_messages_not_tracebacks(tiny_data: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A bad setting, a missing manifest or artifact: exit 2 and one line naming the problem; -v re-raises."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "keep.txt").write_text("an earlier run")
    cases = [
        (_fit(tiny_data, run, "--epochs", "0", "--restart"), "fit: nll_epochs (1) cannot exceed epochs (0)."),
        (_fit(tmp_path / "nowhere", tmp_path / "run2"), "fit: " + str(tmp_path / "nowhere" / "trainLabels.csv")
         + ": manifest file not found"),
        (["evaluate", "--artifact", str(tmp_path / "none"), "--data", str(tiny_data), "--out", str(tmp_path / "e")],
         f"evaluate: Artifact directory {tmp_path / 'none'} does not exist"),
        (["export", "--artifact", str(tmp_path / "none"), "--out", str(tmp_path / "g.onnx")],
         f"export: Artifact directory {tmp_path / 'none'} does not exist"),
    ]
    for argv, message in cases:
        assert train_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err == f"radscreen-train {message} (rerun with -v for the traceback)\n", err
    assert (run / "keep.txt").exists()  # --restart with a bad setting deleted nothing
    with pytest.raises(ValueError, match="cannot exceed epochs"):
        train_main(["-v", *_fit(tiny_data, run, "--epochs", "0")])


def test_a_resume_where_auto_resolves_otherwise_is_refused(tiny_data: Path, tmp_path: Path) -> None:
    """A run started in bf16 (an AMX machine) is not continued in fp32 (an AVX2 machine): the numerics
    would change mid-run, so the resume check names the difference instead."""
    cfg = TrainConfig(data=str(tiny_data), out=str(tmp_path / "run"), width=2, input_size=32, epochs=2,
                      batch_size=8, eval_samples=2, mc_samples=4, precision="auto", device="cpu")
    Trainer(cfg, progress=False, cpu=AMX).fit(stop_after_steps=1)
    with pytest.raises(ValueError, match=r"different settings \{'precision': \('bf16', 'fp32'\)\}"):
        Trainer(cfg, progress=False, cpu=AVX2_ONLY).fit()
