"""The ``radscreen`` console script.

Examples::

    radscreen serve --host 127.0.0.1 --port 8000                 # embedded default model
    radscreen serve --model-dir models/my-run --port 9000        # or RADSCREEN_MODEL_DIR=...
    radscreen batch score --input images/ --output results.csv   # the batch job (service.batch)
    radscreen dicom-listen --spool-dir /var/lib/radscreen/spool --port 11112   # the DICOM C-STORE receiver
    radscreen pacs-quarantine --spool-dir /var/lib/radscreen/spool             # studies set aside, and why
    radscreen pacs-quarantine --spool-dir /var/lib/radscreen/spool --release KEY   # grade one again
    radscreen dicom-from-jpeg photo.jpg right.dcm --eye R      # a JPEG as an OP instance, to try the PACS path
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
    listen = sub.add_parser(
        "dicom-listen", help="run the DICOM C-STORE receiver: grade studies, send SRs to the archive (service.pacs)")
    listen.add_argument("--host", default=None, help="bind address (RADSCREEN_PACS_LISTEN_HOST, default 127.0.0.1)")
    listen.add_argument("--port", type=int, default=None, help="port (RADSCREEN_PACS_LISTEN_PORT, default 11112)")
    listen.add_argument("--ae-title", default=None, help="our AE title (RADSCREEN_PACS_AE_TITLE, default RADSCREEN)")
    listen.add_argument("--spool-dir", type=Path, default=None, help="spool folder (RADSCREEN_PACS_SPOOL_DIR)")
    listen.add_argument("--model-dir", type=Path, default=None, help="artifact directory (default: embedded)")
    quarantine = sub.add_parser(
        "pacs-quarantine", help="list the PACS studies set aside instead of graded, or release one (service.pacs)")
    quarantine.add_argument("--spool-dir", type=Path, default=None, help="spool folder (RADSCREEN_PACS_SPOOL_DIR)")
    quarantine.add_argument("--release", metavar="KEY", default=None,
                            help="the study key (first column of the list) to grade again at the next pass")
    quarantine.add_argument("--study-uid", default=None,
                            help="show only the study with this StudyInstanceUID (its key is derived, never stored)")
    wrap = sub.add_parser(
        "dicom-from-jpeg", help="wrap a baseline JPEG as an Ophthalmic Photography instance (try the PACS path)")
    wrap.add_argument("jpeg", type=Path, help="the photograph (baseline 8-bit colour JPEG)")
    wrap.add_argument("output", type=Path, help="the DICOM file to write")
    wrap.add_argument("--eye", required=True, choices=("R", "L"), help="which eye: ImageLaterality R or L")
    wrap.add_argument("--study-uid", default=None, help="Study Instance UID (the other eye's, for one visit)")
    wrap.add_argument("--patient-id", default="", help="PatientID (default: empty)")
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

    from service.http.header_timeout import HEADER_TIMEOUT_ENV, HeaderTimeoutH11Protocol

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


def dicom_listen(args: argparse.Namespace) -> int:
    """The C-STORE receiver (service.pacs.listener); exits 2 without a spool folder or with a bad artifact."""
    import asyncio

    from pydantic import ValidationError

    from models.artifact import ArtifactError, load_artifact
    from service.logs import configure_logging
    from service.pacs.listener import serve_listener
    from service.pacs.settings import PacsSettings
    from service.settings import Settings

    flags = {"listen_host": args.host, "listen_port": args.port, "ae_title": args.ae_title, "spool_dir": args.spool_dir}
    try:
        settings = Settings(**({"model_dir": args.model_dir} if args.model_dir is not None else {}))
        pacs = PacsSettings(**{k: v for k, v in flags.items() if v is not None})
    except ValidationError as exc:
        print(f"radscreen dicom-listen: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    if pacs.spool_dir is None:
        logger.error("cannot listen: set --spool-dir or RADSCREEN_PACS_SPOOL_DIR")
        return 2
    try:
        load_artifact(settings.model_dir)
    except ArtifactError as exc:
        logger.error("cannot listen: %s", exc)
        return 2
    try:
        asyncio.run(serve_listener(settings, pacs))
    except OSError as exc:  # the port is taken or the address cannot be bound
        logger.error("cannot listen on %s:%d: %s", pacs.listen_host, pacs.listen_port, exc.strerror or exc)
        return 2
    return 0


def pacs_quarantine(args: argparse.Namespace) -> int:
    """List the quarantined studies of a spool (key, reason, photographs, since when, why), or release one.

    Nothing here names a patient or a UID: the key is a digest of the StudyInstanceUID (``--study-uid`` finds a
    study's key from a UID the operator already has)."""
    import time

    from service.pacs.settings import PacsSettings
    from service.pacs.store import Spool, key_of

    spool_dir = args.spool_dir or PacsSettings().spool_dir
    if spool_dir is None or not Path(spool_dir).is_dir():
        print("radscreen pacs-quarantine: set --spool-dir (or RADSCREEN_PACS_SPOOL_DIR) to an existing spool",
              file=sys.stderr)
        return 2
    spool = Spool(spool_dir)
    if args.release is not None:
        if not spool.release(args.release):
            print(f"radscreen pacs-quarantine: no quarantined study with key {args.release[:40]!r}", file=sys.stderr)
            return 1
        print(f"released {args.release}: it is graded again at the worker's next pass")
        return 0
    wanted = key_of(args.study_uid.strip()) if args.study_uid else None
    rows = [(s, q) for s, q in spool.quarantine_list() if wanted is None or s.key == wanted]
    print("key\treason\tphotographs\tsince\tdetail")
    for study, record in rows:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(record.get("since", 0))))
        print(f"{study.key}\t{record.get('reason')}\t{len(study.instances)}\t{since}\t{record.get('detail')}")
    print(f"{len(rows)} quarantined", file=sys.stderr)
    return 0


def dicom_from_jpeg(args: argparse.Namespace) -> int:
    """Write the OP instance of a JPEG; prints the Study Instance UID for the other eye. Exits 2 on a file that
    cannot be wrapped, saying why."""
    from service.pacs.op_from_jpeg import JpegNotWrappableError, op_from_jpeg

    try:
        instance = op_from_jpeg(args.jpeg.read_bytes(), eye=args.eye, study_uid=args.study_uid,
                                patient_id=args.patient_id)
    except OSError as exc:
        print(f"radscreen dicom-from-jpeg: cannot read {args.jpeg}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except (JpegNotWrappableError, ValueError) as exc:
        print(f"radscreen dicom-from-jpeg: {args.jpeg.name}: {exc}", file=sys.stderr)
        return 2
    args.output.write_bytes(instance.data)
    print(f"wrote {args.output} (Ophthalmic Photography 8 Bit, eye {args.eye}); the other eye of this visit: "
          f"--study-uid {instance.study_uid}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["batch"]:
        from service.batch.cli import main as batch_main

        return int(batch_main(args_list[1:], prog="radscreen batch") or 0)
    args = _parser().parse_args(args_list)
    if args.command == "serve":
        return serve(args.host, args.port, args.model_dir, args.workers)
    if args.command == "dicom-listen":
        return dicom_listen(args)
    if args.command == "pacs-quarantine":
        return pacs_quarantine(args)
    if args.command == "dicom-from-jpeg":
        return dicom_from_jpeg(args)
    return 2  # argparse already rejected anything else


if __name__ == "__main__":
    sys.exit(main())
