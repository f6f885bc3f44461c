"""``ScorerSpec``: one description of the scorer, from the service settings and from the batch flags alike."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from service.batch.cli import build_parser, main, scorer_spec
from service.inference.loading import load_scorer
from service.inference.spec import ScorerSpec, knobs
from service.settings import ScorerSettings, Settings

SCORER_ENV = ("MODEL_DIR", "BACKEND", "DEVICE", "PRECISION", "NATIVE_BF16", "STRATEGY", "MC_SAMPLES", "THREADS",
              "MAX_PIXELS", "MAX_UPLOAD_BYTES")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No RADSCREEN_* variable and no .env file from the machine running the tests."""
    for name in SCORER_ENV:
        monkeypatch.delenv(f"RADSCREEN_{name}", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "tensorrt"}, "unknown backend 'tensorrt'; expected one of: auto, torch, onnxruntime"),
        ({"strategy": "fused"}, "unknown strategy 'fused'; expected one of: auto, grouped, loop"),
        ({"precision": "int4"}, "unknown precision 'int4'; expected one of: auto, fp32, bf16, fp16, int8"),
        ({"native_bf16": "maybe"}, "unknown native_bf16 'maybe'; expected one of: detect, yes, no"),
        ({"mc_samples": 0}, r"mc_samples must be in \[1, 256\], got 0"),
        ({"mc_samples": 257}, r"mc_samples must be in \[1, 256\], got 257"),
        ({"threads": 0}, r"threads must be in \[1, 1024\], got 0"),
        ({"max_pixels": 0}, "max_pixels must be >= 1, got 0"),
        ({"max_upload_bytes": 1023}, "max_upload_bytes must be >= 1024, got 1023"),
    ],
)
def test_a_bad_spec_is_refused_with_the_valid_choices(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ScorerSpec(**kwargs)  # type: ignore[arg-type]


def test_the_spec_pickles_as_ray_ships_it_and_loads_the_scorer_it_describes(tiny_artifact: Path) -> None:
    spec = ScorerSpec(model_dir=tiny_artifact, backend="torch", device="cpu", strategy="grouped", mc_samples=5,
                      threads=1, max_pixels=123_456, max_upload_bytes=654_321, native_bf16="no")
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec
    scorer = load_scorer(again)
    assert scorer.backend.name == "torch" and scorer.backend.device == "cpu"
    assert scorer.runtime["strategy"] == "grouped" and scorer.runtime["threads"] == 1
    assert scorer.model_identity.mc_samples == 5
    assert scorer.runtime["cpu"]["native_bf16"] is False  # the override reached the CPU detection
    assert (scorer.pipeline.max_pixels, scorer.pipeline.max_bytes) == (123_456, 654_321)


def test_the_load_log_names_the_serving_draws_as_the_api_does(tiny_artifact: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """The "model loaded" line says mc_samples, test_time_flip and passes: the response's model fields."""
    with caplog.at_level("INFO", logger="service.inference.loading"):
        scorer = load_scorer(ScorerSpec(model_dir=tiny_artifact, backend="torch", device="cpu", mc_samples=3))
    (record,) = [r for r in caplog.records if r.getMessage() == "model loaded"]
    identity = scorer.model_identity
    assert (record.mc_samples, record.test_time_flip, record.passes) == (  # type: ignore[attr-defined]
        3, identity.test_time_flip, identity.passes)
    assert not hasattr(record, "k")


def test_service_settings_give_the_spec_of_their_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert Settings().scorer_spec() == ScorerSpec()  # model_dir None: the embedded model, found per process
    monkeypatch.setenv("RADSCREEN_MODEL_DIR", str(tmp_path / "m"))
    monkeypatch.setenv("RADSCREEN_BACKEND", "torch")
    monkeypatch.setenv("RADSCREEN_STRATEGY", "loop")
    monkeypatch.setenv("RADSCREEN_MC_SAMPLES", "8")
    monkeypatch.setenv("RADSCREEN_MAX_UPLOAD_BYTES", "4096")
    monkeypatch.setenv("RADSCREEN_MAX_PIXELS", "1000000")
    monkeypatch.setenv("RADSCREEN_MAX_BATCH_SIZE", "4")  # a service-only knob: not part of the spec
    assert Settings().scorer_spec() == ScorerSpec(model_dir=tmp_path / "m", backend="torch", strategy="loop",
                                                  mc_samples=8, max_upload_bytes=4096, max_pixels=1_000_000)
    assert ScorerSettings().scorer_spec() == Settings().scorer_spec()


def test_the_settings_are_the_spec_fields_with_the_spec_types_defaults_and_bounds() -> None:
    settings = ScorerSettings.model_fields
    assert list(settings) == [k.name for k in knobs()]
    for k in knobs():
        s = settings[k.name]
        if k.name != "model_dir":  # the settings show the embedded folder; the spec says None (found per process)
            assert s.annotation == k.hint and s.default == k.default, k.name
        bounds = {type(m).__name__: m for m in s.metadata}
        assert (getattr(bounds.get("Ge"), "ge", None), getattr(bounds.get("Le"), "le", None)) == (k.knob.ge, k.knob.le)
        assert s.description == k.knob.doc


def test_every_spec_field_is_a_batch_flag_naming_its_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["score", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for k in knobs():
        assert f"--{k.name.replace('_', '-')}" in text and f"RADSCREEN_{k.name.upper()}" in text, k.name
        if k.choices:  # a value outside the spec's Literal is refused by the parser itself
            with pytest.raises(SystemExit):
                parse(f"--{k.name.replace('_', '-')}", "bogus")


def parse(*argv: str) -> ScorerSpec:
    return scorer_spec(build_parser().parse_args(["score", "--input", "in", "--output", "out.csv", *argv]))


def test_batch_flags_build_the_same_spec(tmp_path: Path) -> None:
    assert parse() == ScorerSpec()
    assert parse("--model-dir", str(tmp_path), "--backend", "onnxruntime", "--device", "cpu", "--precision", "fp32",
                 "--native-bf16", "yes", "--strategy", "grouped", "--mc-samples", "12", "--threads", "3",
                 "--max-pixels", "5000000", "--max-upload-bytes", "2048") == ScorerSpec(
        model_dir=tmp_path, backend="onnxruntime", device="cpu", precision="fp32", native_bf16="yes",
        strategy="grouped", mc_samples=12, threads=3, max_pixels=5_000_000, max_upload_bytes=2048)


def test_batch_flags_default_to_the_service_variables_and_win_over_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RADSCREEN_MODEL_DIR", str(tmp_path / "env-model"))
    monkeypatch.setenv("RADSCREEN_BACKEND", "onnxruntime")
    monkeypatch.setenv("RADSCREEN_MC_SAMPLES", "4")
    monkeypatch.setenv("RADSCREEN_MAX_PIXELS", "777")
    assert parse() == ScorerSpec(model_dir=tmp_path / "env-model", backend="onnxruntime", mc_samples=4,
                                 max_pixels=777)
    assert parse("--backend", "torch", "--mc-samples", "16", "--model-dir", str(tmp_path)) == ScorerSpec(
        model_dir=tmp_path, backend="torch", mc_samples=16, max_pixels=777)


def test_the_old_engine_flag_still_selects_the_runner() -> None:
    base = ["score", "--input", "in", "--output", "out.csv"]
    assert build_parser().parse_args(base).runner == "local"
    assert build_parser().parse_args([*base, "--engine", "ray"]).runner == "ray"
    assert build_parser().parse_args([*base, "--runner", "ray"]).runner == "ray"


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--mc-samples", "0"], {}, "--mc-samples (or RADSCREEN_MC_SAMPLES): Input should be greater than or equal"),
        (["--max-upload-bytes", "10"], {}, "--max-upload-bytes (or RADSCREEN_MAX_UPLOAD_BYTES): Input should be"),
        ([], {"RADSCREEN_THREADS": "many"}, "--threads (or RADSCREEN_THREADS): Input should be a valid integer"),
    ],
)
def test_a_bad_model_setting_exits_2_naming_the_flag_and_the_variable(
    argv: list[str], env: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    folder = tmp_path / "images"
    folder.mkdir()
    code = main(["score", "--input", str(folder), "--output", str(tmp_path / "r.csv"), "--no-progress", *argv])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("radscreen-batch: ") and expected in err
    assert not (tmp_path / "r.csv").exists()


def test_a_missing_embedded_model_names_the_setting_that_points_elsewhere(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """models/ names no setting; the loader adds the service's variable and the batch job's flag."""
    from models.artifact import ArtifactError
    from models.artifact import storage as artifact_storage

    monkeypatch.setattr(artifact_storage, "DEFAULT_ARTIFACT_DIR", tmp_path / "default")
    hint = r"embedded default artifact is missing.*\(RADSCREEN_MODEL_DIR, or --model-dir\)"
    with pytest.raises(ArtifactError, match=hint):
        load_scorer(ScorerSpec(device="cpu"))
    with pytest.raises(ArtifactError, match=r"does not exist$"):  # a directory that was named needs no hint
        load_scorer(ScorerSpec(model_dir=tmp_path / "elsewhere", device="cpu"))
