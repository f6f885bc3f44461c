"""The ``radscreen`` console script.

Examples::

    radscreen serve --host 127.0.0.1 --port 8000                 # embedded default model
    radscreen serve --model-dir models/my-run --port 9000        # or RADSCREEN_MODEL_DIR=...
    radscreen batch score --input images/ --output results.csv   # the batch job (service.batch)
    python -m service serve

Every other setting comes from ``RADSCREEN_*`` environment variables (see service/settings.py).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger("service.cli")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="radscreen", description="Radial Screen inference service.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP service (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--model-dir", type=Path, default=None, help="artifact directory (default: embedded)")
    serve.add_argument(
        "--workers", type=int, default=1, help="uvicorn worker processes (each loads the model)"
    )
    sub.add_parser("batch", help="batch referral scoring; see `radscreen batch --help`", add_help=False)
    return parser


def serve(host: str, port: int, model_dir: Path | None, workers: int = 1) -> int:
    """Verify the artifact up front (a bad artifact exits 2 with the reason), then run uvicorn."""
    import uvicorn

    from models.artifact import ArtifactError, load_artifact
    from service.logs import configure_logging
    from service.settings import Settings

    overrides = {"model_dir": model_dir} if model_dir is not None else {}
    settings = Settings(**overrides)  # type: ignore[arg-type]
    configure_logging(settings.log_level)
    try:
        artifact = load_artifact(settings.model_dir)
    except ArtifactError as exc:
        logger.error("cannot serve: %s", exc)
        return 2
    logger.info("serving", extra={"model": artifact.config.name, "sha256": artifact.sha256, "port": port})
    import os

    from service.header_timeout import HEADER_TIMEOUT_ENV, HeaderTimeoutH11Protocol

    os.environ[HEADER_TIMEOUT_ENV] = str(settings.header_timeout_s)  # read by each connection, any worker
    if workers > 1:
        os.environ["RADSCREEN_MODEL_DIR"] = str(settings.model_dir)
        uvicorn.run(
            "service.app:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_config=None,
            access_log=False,
            http=HeaderTimeoutH11Protocol,
        )
    else:
        from service.app import create_app

        uvicorn.run(create_app(settings), host=host, port=port, log_config=None, access_log=False,
                    http=HeaderTimeoutH11Protocol)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["batch"]:
        from service.batch.cli import main as batch_main

        return int(batch_main(args_list[1:], prog="radscreen batch") or 0)
    args = _parser().parse_args(args_list)
    if args.command == "serve":
        return serve(args.host, args.port, args.model_dir, args.workers)
    return 2  # argparse already rejected anything else


if __name__ == "__main__":
    sys.exit(main())
