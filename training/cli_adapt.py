"""``radscreen-train adapt``: a programme's own graded photographs adapt an artifact (``training.adapt``)."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import MISSING, fields
from pathlib import Path
from types import SimpleNamespace

from training.adapt import AdaptRequest, TuneOptions, adapt
from training.options import add_flags, values_of

# the flags' defaults: the request's own, the embedded model as the parent, the run folder beside the artifact
CLI_DEFAULTS = SimpleNamespace(
    **{f.name: f.default for f in fields(AdaptRequest) if f.default is not MISSING},
    parent=Path("models/default"), labels=None, image_root=None, mode=None, out=None, run_dir=None)


def add_adapt_command(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                      formatter: type[argparse.HelpFormatter]) -> None:
    a = sub.add_parser(
        "adapt", help="adapt an artifact to a screening programme from its own graded photographs",
        description="From a parent artifact and a programme's labelled photographs, write a site artifact that the "
                    "service, the batch job and the PACS path load unchanged. recalibrate: the weights kept, both "
                    "thresholds fitted on the site's eyes; posterior-prior: fine-tuned with the parent's radial "
                    "posterior as the prior, then recalibrated on eyes the fine-tuning never saw; finetune: the "
                    "same without the prior. The card states the site's operating point and its cross-fitted "
                    "promise (docs/adapting.md). Stopped, the same command resumes from --run.",
        formatter_class=formatter)
    add_flags(a, AdaptRequest, defaults=CLI_DEFAULTS, grouped=False)
    add_flags(a, TuneOptions, defaults=TuneOptions(), grouped=False)
    a.add_argument("--no-progress", action="store_true", help="no progress bars")


def _adapt(args: argparse.Namespace) -> int:
    values = values_of(args, AdaptRequest, defaults=CLI_DEFAULTS)
    out = values["out"]
    if values["run_dir"] is None:
        values["run_dir"] = out.with_name(out.name + ".run")
    tune = TuneOptions(**values_of(args, TuneOptions, defaults=TuneOptions()), seed=values["seed"])
    req = AdaptRequest(**values, tune=tune)
    result = adapt(req, command="radscreen-train " + shlex.join(args.argv), progress=not args.no_progress)
    print(f"wrote {out} (sha256 {result.sha256})")
    print(f"site operating point: {result.promise.sentence()}")
    return 0


HANDLERS = {"adapt": _adapt}
