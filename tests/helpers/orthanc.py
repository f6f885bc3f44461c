"""A real Orthanc PACS on loopback for the DICOM integration tests (Debian's ``orthanc`` + ``orthanc-dicomweb``).

``running_orthanc(folder, forward_to=...)`` writes a configuration into its own folder (storage, index, free HTTP
and DICOM ports, loopback only, no authentication), starts ``Orthanc``, waits for its REST API and yields an
:class:`Orthanc`. With ``forward_to=(ae_title, port)`` a Lua ``OnStoredInstance`` script forwards every new
Ophthalmic Photography instance to that DICOM node, as a hospital's routing rule would; the SR Radial Screen sends
back (modality SR) is stored and not forwarded. The REST helpers read back what Orthanc holds.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from support.processes import ROOT, free_port, running_process, wait_until_ready

ORTHANC = "Orthanc"
DICOMWEB_PLUGIN = Path("/usr/share/orthanc/plugins/libOrthancDicomWeb.so")
AE_TITLE = "ORTHANC"
FORWARD_LUA = """
function OnStoredInstance(instanceId, tags, metadata, origin)
  if tags['Modality'] == 'OP' then
    SendToModality(instanceId, 'radscreen')
  end
end
"""


def missing() -> str | None:
    """Why the Orthanc tests cannot run here (None when they can)."""
    if shutil.which(ORTHANC) is None:
        return "Orthanc not installed (Debian package orthanc; scripts/install-system-deps.sh)"
    if not DICOMWEB_PLUGIN.is_file():
        return f"Orthanc DICOMweb plugin not found at {DICOMWEB_PLUGIN} (Debian package orthanc-dicomweb)"
    return None


@dataclass(frozen=True)
class Orthanc:
    url: str  # REST base, e.g. http://127.0.0.1:8042
    dicom_port: int
    ae_title: str = AE_TITLE

    @property
    def dicomweb(self) -> str:
        return f"{self.url}/dicom-web"

    def stow(self, instances: list[bytes]) -> httpx.Response:
        """Store instances through Orthanc's own DICOMweb STOW-RS (as a modality or gateway would)."""
        boundary = uuid.uuid4().hex
        body = b"".join(f"--{boundary}\r\nContent-Type: application/dicom\r\n\r\n".encode() + d + b"\r\n"
                        for d in instances) + f"--{boundary}--\r\n".encode()
        return httpx.post(f"{self.dicomweb}/studies", content=body, timeout=60, headers={
            "Content-Type": f'multipart/related; type="application/dicom"; boundary={boundary}',
            "Accept": "application/dicom+json"})

    def find(self, level: str = "Instance", **query: str) -> list[str]:
        """Orthanc ids of the resources matching ``query`` (DICOM keywords)."""
        response = httpx.post(f"{self.url}/tools/find", json={"Level": level, "Query": query}, timeout=30)
        response.raise_for_status()
        return list(response.json())

    def instance_file(self, orthanc_id: str) -> bytes:
        response = httpx.get(f"{self.url}/instances/{orthanc_id}/file", timeout=30)
        response.raise_for_status()
        return response.content

    def wait_for(self, deadline_s: float, level: str = "Instance", count: int = 1, **query: str) -> list[str]:
        """Poll until at least ``count`` resources match; the ids (possibly fewer after ``deadline_s``)."""
        end = time.monotonic() + deadline_s
        while True:
            found = self.find(level, **query)
            if len(found) >= count or time.monotonic() > end:
                return found
            time.sleep(0.5)

    def wait_for_jobs(self, deadline_s: float) -> bool:
        """Poll until none of Orthanc's jobs is still to run (its Lua forwards are jobs: once they are done, every
        instance it forwards has been answered by the receiver); False if some still are after ``deadline_s``."""
        end = time.monotonic() + deadline_s
        while True:
            response = httpx.get(f"{self.url}/jobs", params={"expand": ""}, timeout=30)
            response.raise_for_status()
            if all(job["State"] in ("Success", "Failure") for job in response.json()):
                return True
            if time.monotonic() > end:
                return False
            time.sleep(0.2)

    def modality_ok(self, name: str = "radscreen") -> bool:
        """C-ECHO from Orthanc to a configured modality."""
        return httpx.post(f"{self.url}/modalities/{name}/echo", content=b"{}", timeout=30).status_code == 200


def write_config(folder: Path, http_port: int, dicom_port: int, forward_to: tuple[str, int] | None) -> Path:
    """Orthanc's JSON configuration (and the Lua forward) in ``folder``; returns the configuration's path."""
    config: dict[str, Any] = {
        "Name": "radscreen-test", "StorageDirectory": str(folder / "storage"), "IndexDirectory": str(folder / "index"),
        "HttpPort": http_port, "DicomPort": dicom_port, "DicomAet": AE_TITLE, "RemoteAccessAllowed": False,
        "AuthenticationEnabled": False, "HttpServerEnabled": True, "DicomServerEnabled": True,
        "Plugins": [str(DICOMWEB_PLUGIN)], "DicomWeb": {"Enable": True, "Root": "/dicom-web/"},
        "DicomModalities": {}, "ConcurrentJobs": 1, "SaveJobs": False, "StableAge": 1, "DicomScpTimeout": 30,
        "DicomAlwaysAllowStore": True, "DicomAlwaysAllowFind": True, "DicomCheckCalledAet": False,
        "OverwriteInstances": False,
    }
    if forward_to is not None:
        ae_title, port = forward_to
        config["DicomModalities"] = {"radscreen": [ae_title, "127.0.0.1", port]}
        lua = folder / "forward.lua"
        lua.write_text(FORWARD_LUA, encoding="utf-8")
        config["LuaScripts"] = [str(lua)]
    path = folder / "orthanc.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


@contextlib.contextmanager
def running_orthanc(folder: Path, *, forward_to: tuple[str, int] | None = None,
                    ready_timeout_s: float = 60.0) -> Iterator[Orthanc]:
    """Start Orthanc with a generated configuration in ``folder``; stop it on exit (module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    http_port, dicom_port = free_port(), free_port()
    config = write_config(folder, http_port, dicom_port, forward_to)
    log = folder / "orthanc.log"
    with running_process([ORTHANC, str(config)], log, cwd=ROOT) as proc:
        wait_until_ready(proc, f"http://127.0.0.1:{http_port}/system", deadline_s=ready_timeout_s, log_path=log)
        yield Orthanc(f"http://127.0.0.1:{http_port}", dicom_port)
