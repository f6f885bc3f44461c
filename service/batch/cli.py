"""``radscreen-batch`` (also ``radscreen batch`` and ``python -m service.batch``): score a folder or manifest.

Example (a day's screening images, resumable; rerun the same command after an interruption)::

    radscreen-batch score --input /data/screening/2026-11-21 --output referrals.csv \\
        --summary referrals.summary.json --plot referrals.png

    radscreen-batch score --input trainLabels.csv --image-root train/ --id-column image \\
        --output eyepacs.parquet --batch-size 32 --workers 4

    # one outcome per patient visit as well: ODIR/EyePACS file names {patient}_{left|right}
    radscreen-batch score --input odir/images --output odir.csv --group-by filename   # + odir.exams.csv

    # the model settings are the service's: flags, else RADSCREEN_* variables (service/settings.py)
    RADSCREEN_MODEL_DIR=models/my-run radscreen-batch score --input day/ --output day.csv \\
        --backend torch --precision fp32 --strategy loop --max-pixels 54200000

Exit status: 0 done, 2 unusable input or arguments (message on stderr; ``--plot`` without matplotlib is
refused before anything is scored), 130 interrupted (Ctrl-C: what was scored is committed; rerun the same
command to resume), 1 unexpected failure.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from service.batch.inputs import InputError
from service.batch.output import OutputError
from service.batch.parts import PartStoreError
from service.batch.summary import format_summary
from service.inference.spec import ScorerSpec, knobs

logger = logging.getLogger("service.batch")


def build_parser(prog: str = "radscreen-batch") -> argparse.ArgumentParser:
    """The argument parser (``score`` is the one subcommand); ``prog``: the command as the user typed it."""
    parser = argparse.ArgumentParser(prog=prog,
                                     description="Batch referral scoring of fundus images.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("score", help="score a folder or CSV manifest into CSV/JSONL/Parquet results",
                       description="Score every image once; rerunning the same command resumes.")
    p.add_argument("--input", required=True, type=Path, help="folder of images (recursive) or CSV manifest")
    p.add_argument("--output", required=True, type=Path, help="results file: .csv, .jsonl or .parquet")
    model = p.add_argument_group(
        "model and scoring",
        "the same settings as the HTTP service; each defaults to its RADSCREEN_* variable (service/settings.py), "
        "else the value in brackets")
    for spec in knobs():
        model.add_argument(flag_of(spec.name), type=spec.value_type, choices=spec.choices or None, default=None,
                           metavar=spec.knob.metavar,
                           help=f"{spec.knob.doc}{f' Range {spec.bounds_text}.' if spec.bounds_text else ''} "
                           f"[{env_of(spec.name)}, else {spec.default_text}]".replace("%", "%%"))
    p.add_argument("--batch-size", type=int, default=16, help="images per batched forward (default 16)")
    p.add_argument("--workers", type=int, default=2, help="parallel readers/decoders (default 2)")
    p.add_argument("--pool", choices=("thread", "process"), default="thread",
                   help="decode in threads (default; PIL releases the GIL) or processes")
    p.add_argument("--runner", "--engine", dest="runner", choices=("local", "ray"), default="local",
                   help="what runs the job: local (default; this machine's pools) or ray (Ray Data); "
                   "--engine is the former name, still accepted")
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: RAY_ADDRESS or local)")
    p.add_argument("--ray-actors", type=int, default=1, help="model actors for --runner ray (default 1)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--restart", action="store_true", help="discard this output's earlier results")
    mode.add_argument("--resume", action="store_true", help="continue an earlier run (the default; accepted)")
    p.add_argument("--summary", type=Path, default=None, help="write the summary JSON here")
    p.add_argument("--plot", type=Path, default=None, help="write probability/MI histograms (PNG) here")
    p.add_argument("--id-column", default=None, help="manifest column with unique ids (default: the path)")
    p.add_argument("--path-column", default=None, help="manifest column of image paths (default: image|path)")
    p.add_argument("--image-root", type=Path, default=None,
                   help="folder that manifest paths are relative to (default: the manifest's folder)")
    exams = p.add_argument_group(
        "exams", "also score each patient visit (both eyes) into one outcome, written to a second CSV")
    exams.add_argument("--group-by", choices=("patient", "filename", "study"), default=None,
                       help="patient: the manifest's patient and eye columns; filename: {patient}_{left|right} file "
                       "names (EyePACS, ODIR); study: DICOM StudyInstanceUID and laterality")
    exams.add_argument("--patient-column", default="patient", help="manifest column of patient ids (default patient)")
    exams.add_argument("--eye-column", default="eye", help="manifest column of the eye, left/right (default eye)")
    exams.add_argument("--exams-output", type=Path, default=None,
                       help="exam rows CSV (default: <output stem>.exams.csv beside --output)")
    p.add_argument("--chunk-size", type=int, default=64,
                   help="rows per committed part file (default 64; no batch spans two parts, so a smaller value "
                   "also caps --batch-size); whatever is scored is also committed every 10 s and on Ctrl-C")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def flag_of(name: str) -> str:
    """The command-line flag of a ScorerSpec field: ``mc_samples`` -> ``--mc-samples``."""
    return "--" + name.replace("_", "-")


def env_of(name: str) -> str:
    """The environment variable of a ScorerSpec field: ``mc_samples`` -> ``RADSCREEN_MC_SAMPLES``."""
    return f"RADSCREEN_{name.upper()}"


def scorer_spec(args: argparse.Namespace) -> ScorerSpec:
    """The job's :class:`ScorerSpec`: the flags given, else the ``RADSCREEN_*`` variables, else the defaults.

    Built through ``ScorerSettings`` (the service's own settings class), so a variable means the same here
    as for ``radscreen serve``. Raises ``ValueError`` naming the flag and the variable of a bad value.
    """
    from pydantic import ValidationError

    from service.settings import ScorerSettings

    given: dict[str, Any] = {k.name: getattr(args, k.name) for k in knobs() if getattr(args, k.name) is not None}
    try:
        return ScorerSettings(**given).scorer_spec()
    except ValidationError as exc:
        problems = "; ".join(
            f"{flag_of(str(err['loc'][0]))} (or {env_of(str(err['loc'][0]))}): {err['msg']}" for err in exc.errors()
        )
        raise ValueError(problems) from None


def main(argv: list[str] | None = None, *, prog: str = "radscreen-batch") -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the job, print the summary; returns the exit status.

    ``prog``: how the command was invoked (``radscreen batch`` from the main CLI), for usage and help.
    """
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _score(args)
    except KeyboardInterrupt:  # Ctrl-C: the job committed what it had scored (service.batch.job)
        print("interrupted: rerun the same command" + (" without --restart" if args.restart else "") + " to resume",
              file=sys.stderr)
        return 130


def _can_plot() -> bool:
    """Whether ``--plot`` can write its PNG (matplotlib, the ``batch`` extra, is importable)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _score(args: argparse.Namespace) -> int:
    """Run the ``score`` command; returns the exit status."""
    from models.artifact import ArtifactError
    from models.platform.compute import PrecisionUnavailableError
    from service.batch.job import BatchJobConfig, run_job

    for name in ("batch_size", "workers", "chunk_size", "ray_actors"):
        if getattr(args, name) < 1:
            print(f"radscreen-batch: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    try:
        spec = scorer_spec(args)
    except ValueError as exc:
        print(f"radscreen-batch: {exc}", file=sys.stderr)
        return 2
    if args.plot is not None and not _can_plot():  # said before scoring, not after it
        print("radscreen-batch: --plot needs matplotlib, which this environment lacks (`make serve` does not "
              "install it): .venv/bin/pip install 'matplotlib>=3.8' (or the batch extra: .venv/bin/pip install "
              "-e '.[batch]'), or leave out --plot", file=sys.stderr)
        return 2
    cfg = BatchJobConfig(
        input=args.input, output=args.output, spec=spec, batch_size=args.batch_size, workers=args.workers,
        pool=args.pool, runner=args.runner, restart=args.restart, summary=args.summary, plot=args.plot,
        id_column=args.id_column, path_column=args.path_column, image_root=args.image_root,
        chunk_size=args.chunk_size, progress=not args.no_progress, ray_address=args.ray_address,
        ray_actors=args.ray_actors, group_by=args.group_by, patient_column=args.patient_column,
        eye_column=args.eye_column, exams_output=args.exams_output,
    )
    try:
        result = run_job(cfg)
    except (InputError, OutputError, PartStoreError, ArtifactError, PrecisionUnavailableError) as exc:
        print(f"radscreen-batch: {exc}", file=sys.stderr)
        return 2
    print(format_summary(result.summary))
    print(f"wrote {result.rows} rows to {result.output}")
    if result.exams_output is not None:
        print(f"wrote {result.summary['exams']['count']} exam rows to {result.exams_output}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
