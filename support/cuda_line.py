"""The CUDA line of the installed onnxruntime-gpu, read from the package itself (no GPU needed).

Two independent sources: the build information the wheel ships (``onnxruntime.capi.build_and_package_info``)
and the ``DT_NEEDED`` entries of its CUDA provider library (``libcudart.so.13`` -> CUDA 13), read here with
a minimal ELF64 parser so that no binutils are required. The deploy tests compare them with the GPU image's
base image, and the GPU check prints them.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

DT_NEEDED, DT_STRTAB = 1, 5
SHT_DYNAMIC = 6


def needed_libraries(path: Path) -> list[str]:
    """The ``DT_NEEDED`` sonames of a little-endian ELF64 shared library."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if sh_type != SHT_DYNAMIC:
            continue
        strtab_offset = sections[link][4]  # the dynamic section's string table (.dynstr)
        names = []
        for pos in range(offset, offset + size, entsize or 16):
            tag, value = struct.unpack_from("<qQ", data, pos)
            if tag == 0:
                break
            if tag == DT_NEEDED:
                end = data.index(b"\0", strtab_offset + value)
                names.append(data[strtab_offset + value:end].decode())
        return names
    raise ValueError(f"{path}: no dynamic section")


@dataclass(frozen=True)
class OrtCudaLine:
    """What the installed onnxruntime-gpu was built against."""

    version: str  # onnxruntime.__version__
    package: str  # onnxruntime-gpu, or onnxruntime for a CPU-only build
    build_cuda: str | None  # build_and_package_info.cuda_version, e.g. "13.0"
    needed: tuple[str, ...]  # CUDA sonames its CUDA provider links, e.g. ("libcublasLt.so.13", ...)

    @property
    def needed_cuda_majors(self) -> set[int]:
        """Majors of the CUDA runtime and cuBLAS the provider links (libcudart.so.N, libcublas*.so.N)."""
        pattern = re.compile(r"lib(?:cudart|cublas|cublasLt)\.so\.(\d+)")
        return {int(m.group(1)) for n in self.needed if (m := pattern.fullmatch(n))}


def installed_onnxruntime_cuda_line() -> OrtCudaLine:
    import onnxruntime
    from onnxruntime.capi import build_and_package_info as info

    provider = Path(onnxruntime.__file__).parent / "capi" / "libonnxruntime_providers_cuda.so"
    needed = tuple(n for n in needed_libraries(provider) if re.match(r"lib(cu|nv)", n)) if provider.is_file() else ()
    return OrtCudaLine(version=onnxruntime.__version__, package=getattr(info, "package_name", "onnxruntime"),
                       build_cuda=getattr(info, "cuda_version", None), needed=needed)
