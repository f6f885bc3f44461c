"""models.io.atomic: the target holds the old content or the whole new one, never a torn or missing file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from models.io import atomic
from models.io.atomic import atomic_write, atomic_write_bytes

REPO = Path(__file__).resolve().parents[2]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_new_file_appears_whole(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    atomic_write_bytes(target, b"abc" * 1000)
    assert target.read_bytes() == b"abc" * 1000
    assert _leftovers(tmp_path) == []


def test_replaces_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_bytes(b"old")
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_exception_mid_write_keeps_old_file_and_removes_temp(tmp_path: Path) -> None:
    target = tmp_path / "checkpoint.pt"
    target.write_bytes(b"previous checkpoint")
    with pytest.raises(RuntimeError, match="disk went away"), atomic_write(target) as tmp:
        with tmp.open("wb") as fh:
            fh.write(b"half of the new")
        assert tmp.read_bytes() == b"half of the new"  # written beside the target, not into it
        assert target.read_bytes() == b"previous checkpoint"
        raise RuntimeError("disk went away")
    assert target.read_bytes() == b"previous checkpoint"
    assert _leftovers(tmp_path) == []


def test_exception_before_first_byte_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "results.csv"
    with pytest.raises(KeyboardInterrupt), atomic_write(target):
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_block_that_writes_nothing_is_an_error_not_an_empty_file(tmp_path: Path) -> None:
    target = tmp_path / "results.csv"
    target.write_bytes(b"kept")
    with pytest.raises(FileNotFoundError, match="did not write"), atomic_write(target):
        pass
    assert target.read_bytes() == b"kept"


def test_temp_file_lives_in_the_target_folder_with_a_unique_name(tmp_path: Path) -> None:
    target = tmp_path / "part-000001.jsonl"
    seen: list[Path] = []
    for _ in range(2):
        with atomic_write(target) as tmp:
            seen.append(tmp)
            tmp.write_bytes(b"x")
    assert all(t.parent == tmp_path for t in seen)
    assert seen[0] != seen[1]
    assert all(t.name.startswith(".part-000001.jsonl.") and t.name.endswith(".tmp") for t in seen)


def test_fsyncs_file_before_rename_and_folder_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The order that makes the rename durable: data synced, renamed, then the folder entry synced."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def recording_fsync(fd: int) -> None:
        events.append("fsync-dir" if os.path.isdir(os.readlink(f"/proc/self/fd/{fd}")) else "fsync-file")
        real_fsync(fd)

    def recording_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "fsync", recording_fsync)
    monkeypatch.setattr(atomic.os, "replace", recording_replace)
    atomic_write_bytes(tmp_path / "a", b"1")
    assert events == ["fsync-file", "replace", "fsync-dir"]
    events.clear()
    atomic_write_bytes(tmp_path / "a", b"2", fsync=False)
    assert events == ["replace"]
    assert (tmp_path / "a").read_bytes() == b"2"


def test_concurrent_writers_leave_one_whole_version(tmp_path: Path) -> None:
    target = tmp_path / "shared.bin"
    payloads = [bytes([i]) * 200_000 for i in range(8)]
    threads = [threading.Thread(target=atomic_write_bytes, args=(target, p)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert target.read_bytes() in payloads
    assert _leftovers(tmp_path) == []


def test_killed_writer_leaves_old_file_intact(tmp_path: Path) -> None:
    """SIGKILL mid-write (no cleanup can run): the target still holds the old content, whole."""
    target = tmp_path / "checkpoint.pt"
    target.write_bytes(b"old" * 1000)
    script = textwrap.dedent(
        f"""
        import sys, time
        from models.io.atomic import atomic_write
        with atomic_write({str(target)!r}) as tmp:
            with open(tmp, "wb") as fh:
                fh.write(b"new" * 500)
                fh.flush()
                print("half", flush=True)
                time.sleep(60)
                fh.write(b"new" * 500)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "half"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert target.read_bytes() == b"old" * 1000
    # the torn temp file is left (nothing runs after SIGKILL) but under a name no reader looks for
    assert [p.stat().st_size for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == [1500]


def test_stale_temporaries_finds_only_the_helpers_leftovers(tmp_path: Path) -> None:
    names: list[Path] = []
    with pytest.raises(RuntimeError), atomic_write(tmp_path / "part-000003.jsonl", fsync=False) as tmp:
        names.append(tmp)
        raise RuntimeError
    names[0].write_bytes(b"torn")  # what a SIGKILLed writer leaves under that name
    for unrelated in ("part-000001.jsonl", ".hidden", "notes.tmp", ".x.tmp", "_job.json"):
        (tmp_path / unrelated).write_bytes(b"keep")
    assert atomic.stale_temporaries(tmp_path) == names
