"""Latency under overload: closed-loop clients against ``radscreen serve`` with admission by expected wait.

Starts ``python -m service serve`` (the embedded default model, or ``--model tiny``), warms it with one
image, then runs ``--clients`` closed-loop clients, each POSTing one fundus-like PNG after the other for
``--duration`` seconds; after a 503 a client waits the Retry-After it was given (``--impolite``: 50 ms,
the worst case). Prints, per status, the count and the p50/p99 latency, and the Retry-After values seen. Run it
twice to compare: with the default bound (``--max-queue-wait 10``) and with admission in effect off
(``--max-queue-wait 3600``: every request is queued, as before the bound existed).

Examples::

    .venv/bin/python benchmarks/overload.py                                  # full model, 32 clients, 60 s
    .venv/bin/python benchmarks/overload.py --max-queue-wait 3600            # the same without admission
    .venv/bin/python benchmarks/overload.py --model tiny --duration 10
"""

from __future__ import annotations

import argparse
import collections
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.artifacts import build_tiny_artifact
from support.hostile_service import hostile_service, post
from support.images import encode, fundus_like
from support.overload import drive, summary


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("full", "tiny"), default="full")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--max-queue-wait", type=float, default=10.0, help="RADSCREEN_MAX_QUEUE_WAIT_S")
    p.add_argument("--image-size", type=int, default=1024, help="side of the fundus-like PNG sent")
    p.add_argument("--impolite", action="store_true", help="retry 50 ms after a 503, ignoring Retry-After")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_artifact(Path(tmp) / "tiny") if args.model == "tiny" else None
        env = {"RADSCREEN_MAX_QUEUE_WAIT_S": str(args.max_queue_wait), "RADSCREEN_QUEUE_SIZE": "1024"}
        with hostile_service(model_dir, Path(tmp) / "service.log", env) as svc:
            image = encode(fundus_like(7, size=args.image_size))
            assert post(svc, "/v1/predict", image, "image/png", "overload-warm-0001").status_code == 200
            answers = drive(svc.base, image, clients=args.clients, duration=args.duration,
                            polite=not args.impolite)
    print(f"{platform.processor() or platform.machine()}; model {args.model}; {args.clients} clients for "
          f"{args.duration:g} s; RADSCREEN_MAX_QUEUE_WAIT_S={args.max_queue_wait:g}; image {args.image_size} px; "
          f"{'impolite' if args.impolite else 'polite'} clients")
    print(summary(answers))
    print("Retry-After seen:", dict(sorted(collections.Counter(a.retry_after for a in answers
                                                               if a.retry_after).items())))


if __name__ == "__main__":
    main()
