"""scripts/install-system-deps.sh: installs what is missing, says how many packages that pulled in, and deletes
the .debs it downloaded (not the ones already cached).

Runs the real script with a PATH of stand-ins: ``apt-get`` "installs" by adding packages to a list that
``dpkg-query`` prints and by dropping .debs into a scratch archive folder; the coreutils it needs are the
real ones. No package is installed and no network is used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("bash", "ls", "sort", "comm", "mktemp", "du", "grep", "wc", "cut", "rm", "tail", "cat", "id", "echo")
FAKE_APT = """#!/bin/bash
[ "$1" = update ] && exit 0
for p in prometheus chromium libfoo libbar; do echo "$p" >> "{root}/installed"; done
for d in prometheus_1_amd64.deb chromium_1_amd64.deb libfoo_1_amd64.deb; do
    head -c 1048576 /dev/zero > "{root}/archives/$d"
done
"""


def test_reports_the_packages_and_deletes_only_the_debs_it_fetched(tmp_path: Path) -> None:
    bin_dir, archives = tmp_path / "bin", tmp_path / "archives"
    bin_dir.mkdir()
    archives.mkdir()
    (archives / "kept_0_all.deb").write_bytes(b"cached before")
    (tmp_path / "installed").write_text("bash\ncoreutils\n")
    for tool in (*TOOLS, "head"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    for name, body in (("apt-get", FAKE_APT.format(root=tmp_path)),
                       ("dpkg-query", f"#!/bin/bash\ncat '{tmp_path}/installed'\n")):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {"PATH": str(bin_dir), "RADSCREEN_SKIP_DOCKER": "1", "RADSCREEN_APT_ARCHIVES": str(archives),
           "HOME": str(tmp_path)}
    if os.geteuid() != 0:  # the script wants root or sudo; a stand-in sudo that just runs the command
        (bin_dir / "sudo").write_text('#!/bin/bash\n[ "$1" = -n ] && shift\nexec "$@"\n')
        (bin_dir / "sudo").chmod(0o755)
    done = subprocess.run(["bash", str(ROOT / "scripts" / "install-system-deps.sh")], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "installing prometheus chromium chromium-driver curl" in done.stdout
    assert ": 4 packages in all (they stay installed" in done.stdout
    assert f"deleted the 3 downloaded .debs (3 MB) from {archives}" in done.stdout
    assert sorted(p.name for p in archives.iterdir()) == ["kept_0_all.deb"]
