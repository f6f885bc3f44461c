"""scripts/docker-leftovers.sh and scripts/docker-clean.sh (`make clean-docker`) against a stand-in ``docker``.

The stand-in client answers ``info`` (an engine running), lists images from a file per reference
(``image ls --format ... REF``) and records ``image rm``: what is listed, and that clean-docker removes exactly
the container test's caches and nothing else, is tested without Docker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

DOCKER = """#!/bin/bash
state="{state}"
case "$1 $2" in
    "info "*) exit 0 ;;
    "image ls") for ref in "$@"; do :; done  # the last argument: the reference
                size=""; [[ "$*" == *Size* ]] && size=" 1.5GB"
                grep -E "^${{ref%%:*}}(:|$)" "$state/images" | grep -F "$ref" | sed "s/ .*//;s/$/$size/"; exit 0 ;;
    "image rm") echo "${{@: -1}}" >> "$state/removed"; grep -vF "${{@: -1}} " "$state/images" > "$state/kept"
                mv "$state/kept" "$state/images"; exit 0 ;;
esac
exit 1
"""
IMAGES = ["radscreen-build-cache:cpu-deps", "radscreen-base:bookworm-py311", "radscreen-test:cpu-123",
          "radscreen:prod", "postgres:16"]


@pytest.fixture
def machine(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A scratch repository with the scripts, a stand-in docker, a cache tarball and a Docker state folder."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("docker-leftovers.sh", "docker-clean.sh", "docker-daemon.sh"):
        shutil.copy(ROOT / "scripts" / name, repo / "scripts" / name)
    state = tmp_path / "state"
    state.mkdir()
    (state / "images").write_text("".join(f"{i} \n" for i in IMAGES))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(DOCKER.format(state=state))
    (bin_dir / "docker").chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "debootstrap-bookworm-minbase-py311.tar").write_bytes(b"x" * 4096)
    (tmp_path / "docker-root").mkdir()
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", RADSCREEN_CACHE=str(cache),
               DOCKER_DATA_ROOT=str(tmp_path / "docker-root"), RADSCREEN_DOCKERD_PIDFILE=str(tmp_path / "pid"))
    return repo, env


def script(repo: Path, name: str, env: dict[str, str]) -> str:
    proc = subprocess.run(["bash", str(repo / "scripts" / name)], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    return proc.stdout


def test_leftovers_lists_the_test_images_the_tarball_and_how_to_remove_them(
        machine: tuple[Path, dict[str, str]]) -> None:
    repo, env = machine
    out = script(repo, "docker-leftovers.sh", env)
    for image in IMAGES[:3]:
        assert f"image {image} (1.5GB)" in out
    assert "radscreen:prod" not in out and "postgres" not in out  # not ours
    assert "debootstrap-bookworm-minbase-py311.tar" in out and "make clean-docker" in out
    assert f"Docker's state directory {env['DOCKER_DATA_ROOT']}" in out


def test_clean_docker_removes_only_the_test_caches(machine: tuple[Path, dict[str, str]]) -> None:
    repo, env = machine
    out = script(repo, "docker-clean.sh", env)
    removed = (Path(env["PATH"].split(":")[0]).parent / "state" / "removed").read_text().split()
    assert sorted(removed) == sorted(IMAGES[:3])
    assert not list(Path(env["RADSCREEN_CACHE"]).iterdir())
    assert "clean-docker: removed image radscreen-base:bookworm-py311" in out
    assert "no container-test images or caches" in out  # the listing after the clean
    assert "radscreen:prod" in (Path(env["PATH"].split(":")[0]).parent / "state" / "images").read_text()
