"""CPU time, wall time and peak memory of each hostile input of round three, and the bounds they meet.

Each case runs in a fresh child process (``multiprocessing`` spawn), so its peak RSS (``ru_maxrss``) is its
own: the child builds the input, notes its RSS, runs the service's own code on it (``prepare_image``, with the
service's decode deadline, as a decode worker does; or the batch job's ``--group-by study`` grouping), and
reports CPU seconds, wall seconds, the peak RSS above what it held before, and the answer. ``--service`` also
starts ``radscreen serve`` (tiny model) and sends ``--exams`` concurrent exams of ``--parts`` uncompressed DICOM
photographs of ``--part-mib`` MiB each, printing the service's peak RSS above its warmed-up baseline.

The figures before the fixes are the red-team pass's (printed beside each case for comparison):
a 256 KB deflate stream parsed for 158 s (and 0.5 MB cost +1 GiB); a 10 MB header of a million elements took
4.8 s on /v1/predict and 7.5 s on /v1/exams (parsed twice); JPEG-baseline pixel data in DICOM of 256 KB cost
123 s wall / 73 CPU-s; ``--group-by study`` hung forever on a FIFO and took 5.5 GB for a 5 GiB sparse file; ten
concurrent 160 MB exams cost +1.3 GiB.

Examples::

    .venv/bin/python benchmarks/hostile_bounds.py
    .venv/bin/python benchmarks/hostile_bounds.py --service --exams 10 --parts 8 --part-mib 16
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MIB = 1024 * 1024
MAX_PIXELS = 40_000_000  # the service's defaults
MAX_BYTES = 20 * MIB
DECODE_TIMEOUT_S = 10.0

# name -> (what it is, the figure before the fix)
CASES: dict[str, tuple[str, str]] = {
    "deflate-256KB": ("deflate DICOM, 256 KB of deflated zeros", "158 s parse"),
    "deflate-2MB": ("deflate DICOM, 2 MB of deflated zeros", "+4 GiB"),
    "elements-1M": ("10 MB header of 1,000,000 elements", "4.8 s predict, 7.5 s exam"),
    "elements-at-bound": ("header of 1 MiB - 4 KiB of elements (accepted)", "-"),
    "jpeg-garbage-plain": ("JPEG, 3,000 scans behind one garbage byte", "422 after the 12 s deadline"),
    "jpeg-garbage-dicom": ("the same JPEG as DICOM JPEG Baseline pixel data", "123 s wall, 73 CPU-s"),
    "group-by-study": ("--group-by study: FIFO scan.dcm, 5 GiB sparse .dcm, the bombs above", "hangs; 5.5 GB"),
}


def _input(name: str) -> bytes:
    from support.hostile_dicom import deflate_bomb, jpeg_dicom, jpeg_with_garbage, many_elements

    builders: dict[str, Callable[[], bytes]] = {
        "deflate-256KB": lambda: deflate_bomb(256 * 1024),
        "deflate-2MB": lambda: deflate_bomb(2 * MIB),
        "elements-1M": lambda: many_elements(1_000_000),
        "elements-at-bound": lambda: many_elements((MIB - 4096) // 10),
        "jpeg-garbage-plain": lambda: jpeg_with_garbage(2000, 3000),
        "jpeg-garbage-dicom": lambda: jpeg_dicom(jpeg_with_garbage(2000, 3000), 2000, 2000),
    }
    return builders[name]()


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _group_by_study(folder: Path) -> str:
    from service.batch.exams import memberships
    from service.batch.inputs import discover

    source = discover(folder)
    groups = memberships(source, folder, "study", max_bytes=MAX_BYTES)
    return "; ".join(f"{item.id}: {groups[item.index].problem.split(';')[0][:64] or 'grouped'}"
                     for item in source.items)


def _study_folder(root: Path) -> Path:
    folder = root / "in"
    folder.mkdir()
    os.mkfifo(folder / "scan.dcm")
    with (folder / "huge.dcm").open("wb") as fh:
        fh.truncate(5 << 30)
    for name in ("deflate-256KB", "elements-1M", "jpeg-garbage-dicom"):
        (folder / f"{name}.dcm").write_bytes(_input(name))
    return folder


def _case(name: str, queue: Any) -> None:
    """Child process: build the input, run it, report (cpu_s, wall_s, peak_mib, answer)."""
    from models.image.preprocessing import FOV_LOCAL_MEAN
    from service.inference.decode_deadline import DecodeDeadline
    from service.inference.imaging import ImagePipeline, ImageRejected
    from service.inference.prepare import prepare_image

    with tempfile.TemporaryDirectory() as tmp:
        if name == "group-by-study":
            folder = _study_folder(Path(tmp))
            run: Callable[[], str] = lambda: _group_by_study(folder)  # noqa: E731
        else:
            data = _input(name)
            pipeline = ImagePipeline(size=512, mean=(0.5,) * 3, std=(0.25,) * 3, max_pixels=MAX_PIXELS,
                                     max_bytes=MAX_BYTES, preprocessing=FOV_LOCAL_MEAN)

            def run() -> str:
                try:
                    prepare_image(data, pipeline, DecodeDeadline(DECODE_TIMEOUT_S))
                except ImageRejected as exc:
                    return f"{exc.problem_type}: {exc.detail[:60]}"
                return "accepted"
        from service.inference.dicom import read_dicom_tags
        from support.hostile_dicom import many_elements

        read_dicom_tags(many_elements(10))  # pydicom imported before the baseline
        base_kib = _rss_kib()
        cpu, wall = time.process_time(), time.perf_counter()
        answer = run()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    queue.put((cpu, wall, max(0, peak_kib - base_kib) / 1024, answer))


def _measure(name: str, timeout: float) -> tuple[float, float, float, str]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_case, args=(name, queue))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        return float("nan"), timeout, float("nan"), f"did not finish in {timeout:g} s"
    return queue.get(timeout=5)


def _exam_body(parts: int, part_mib: float) -> tuple[bytes, str]:
    import numpy as np

    from support.hostile_dicom import EXPLICIT_VR_LE, element, file_meta, photo_header
    from support.hostile_service import multipart_body

    side = int((part_mib * MIB / 3) ** 0.5)
    rgb = np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)
    pixels = element(0x7FE0, 0x0010, "OB", rgb.tobytes())
    dicom = {eye: file_meta(EXPLICIT_VR_LE) + photo_header(side, side, laterality=eye[0].upper()) + pixels
             for eye in ("right", "left")}
    eyes = ["right", "left"] * (parts // 2) + ["right"] * (parts % 2)
    return multipart_body([(eye, f"{i}.dcm", dicom[eye]) for i, eye in enumerate(eyes)])


def _service(exams: int, parts: int, part_mib: float) -> None:
    from support.artifacts import build_tiny_artifact
    from support.hostile_service import hostile_service, post, watch_rss
    from support.images import encode, fundus_like

    body, ctype = _exam_body(parts, part_mib)
    env = {"RADSCREEN_MAX_EXAM_IMAGES": str(max(parts, 2)), "RADSCREEN_MAX_QUEUE_WAIT_S": "3600"}
    with tempfile.TemporaryDirectory() as tmp:
        artifact = build_tiny_artifact(Path(tmp) / "tiny")
        with hostile_service(artifact, Path(tmp) / "service.log", env) as svc:
            warm = post(svc, "/v1/predict", encode(fundus_like(1, size=128)), "image/png", "warm-0001")
            assert warm.status_code == 200, warm.text
            with watch_rss(svc.pid) as rss, ThreadPoolExecutor(exams) as pool:
                started = time.perf_counter()
                statuses = list(pool.map(lambda i: post(svc, "/v1/exams", body, ctype, f"exam-{i:04d}",
                                                         timeout=1800).status_code, range(exams)))
                wall = time.perf_counter() - started
            base, peak = rss.baseline, rss.peak()
    print(f"\nservice: {exams} concurrent exams of {parts} x {len(body) / parts / MIB:.1f} MiB DICOM "
          f"({len(body) / MIB:.0f} MiB each): statuses {sorted(set(statuses))}, {wall:.1f} s wall; "
          f"RSS baseline {base / 1024:.0f} MiB, peak +{(peak - base) / 1024:.0f} MiB (before the fix: ten 160 MB "
          "exams +1.3 GiB before admission)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=300.0, help="per case, seconds")
    parser.add_argument("--service", action="store_true", help="also measure concurrent exams on a live service")
    parser.add_argument("--exams", type=int, default=10)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--part-mib", type=float, default=16.0)
    args = parser.parse_args()
    print(f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"max_pixels {MAX_PIXELS}, max_bytes {MAX_BYTES // MIB} MiB, decode deadline {DECODE_TIMEOUT_S:g} s")
    print(f"{'case':<20} {'cpu_s':>7} {'wall_s':>7} {'peak+MiB':>8}  answer  [before the fix]")
    for name, (what, before) in CASES.items():
        cpu, wall, peak, answer = _measure(name, args.timeout)
        print(f"{name:<20} {cpu:7.2f} {wall:7.2f} {peak:8.0f}  {answer}  [{before}]  ({what})")
    from service.inference.dicom_header import MAX_HEADER_BYTES, MAX_META_BYTES

    print(f"\nbounds: deflate refused from the file meta (<= {MAX_META_BYTES // 1024} KiB read); at most "
          f"{MAX_HEADER_BYTES // 1024} KiB of DICOM header parsed per file; JPEG <= 64 scans and scans x pixels <= "
          f"16 x max_pixels, in DICOM too; every decode within {DECODE_TIMEOUT_S:g} s; batch grouping reads <= the "
          "header's bytes of regular files within the upload limit")
    if args.service:
        _service(args.exams, args.parts, args.part_mib)


if __name__ == "__main__":
    main()
