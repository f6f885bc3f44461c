"""scripts/docker-daemon.sh: it stops only the dockerd it started, never an engine it found running.

Runs the script against a stand-in ``dockerd`` (a shell script of that name, so the kernel names the process
``dockerd``) that marks the engine up while it lives, and a stand-in ``docker`` client whose ``info``
answers while that mark exists: the start/stop bookkeeping is tested without Docker.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "docker-daemon.sh"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the script starts dockerd only as root")

DOCKERD = """#!/bin/bash
trap 'rm -f "{up}"; exit 0' TERM
touch "{up}"
while true; do sleep 0.1; done
"""
DOCKER = """#!/bin/sh
[ "$1" = info ] && [ -e "{up}" ]
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    up = tmp_path / "engine-up"
    for name, text in (("dockerd", DOCKERD), ("docker", DOCKER)):
        (bin_dir / name).write_text(text.format(up=up))
        (bin_dir / name).chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", DOCKERD_LOG=str(tmp_path / "dockerd.log"),
                RADSCREEN_DOCKERD_PIDFILE=str(tmp_path / "dockerd.pid"), DOCKERD_WAIT_S="10", DOCKERD_STOP_S="5")


def daemon(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_stops_the_daemon_it_started(env: dict[str, str], tmp_path: Path) -> None:
    assert daemon(env).returncode == 0
    pid = int(Path(env["RADSCREEN_DOCKERD_PIDFILE"]).read_text())
    assert (tmp_path / "engine-up").exists() and alive(pid)
    assert daemon(env).returncode == 0  # already answering: nothing new is started
    assert int(Path(env["RADSCREEN_DOCKERD_PIDFILE"]).read_text()) == pid
    stop = daemon(env, "stop")
    assert stop.returncode == 0 and f"pid {pid}" in stop.stderr
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid) and not (tmp_path / "engine-up").exists()
    assert not Path(env["RADSCREEN_DOCKERD_PIDFILE"]).exists()


def test_an_engine_found_running_is_used_and_left_running(env: dict[str, str], tmp_path: Path) -> None:
    running = subprocess.Popen([str(tmp_path / "bin" / "dockerd")])  # someone else's engine
    try:
        for _ in range(100):
            if (tmp_path / "engine-up").exists():
                break
            time.sleep(0.05)
        assert daemon(env).returncode == 0
        assert not Path(env["RADSCREEN_DOCKERD_PIDFILE"]).exists()
        assert daemon(env, "stop").returncode == 0
        assert running.poll() is None and (tmp_path / "engine-up").exists()
    finally:
        running.terminate()
        running.wait(timeout=10)


def test_a_stale_pidfile_never_stops_another_process(env: dict[str, str]) -> None:
    other = subprocess.Popen(["sleep", "30"])  # the recorded pid now belongs to a process that is not dockerd
    try:
        Path(env["RADSCREEN_DOCKERD_PIDFILE"]).write_text(f"{other.pid}\n")
        assert daemon(env, "stop").returncode == 0
        assert other.poll() is None
        assert not Path(env["RADSCREEN_DOCKERD_PIDFILE"]).exists()
    finally:
        other.terminate()
        other.wait(timeout=10)


def test_unknown_command_is_refused(env: dict[str, str]) -> None:
    proc = daemon(env, "restart")
    assert proc.returncode == 2 and "usage:" in proc.stderr
