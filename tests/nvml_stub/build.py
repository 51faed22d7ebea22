"""Compile the stand-in libnvidia-ml.so.1 (fake_nvml.c) with gcc.

Each variant goes in its own directory, because the loader finds the library by its
file name through LD_LIBRARY_PATH. Usable from tests (``build_variants``) and by hand:
``python tests/nvml_stub/build.py OUT_DIR`` prints one directory per variant.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIBRARY_NAME = "libnvidia-ml.so.1"

# variant -> extra gcc flags
VARIANTS: dict[str, tuple[str, ...]] = {
    "current": (),
    # A driver that predates nvmlDeviceGetMemoryInfo_v2, ..._ComputeRunningProcesses_v3,
    # ..._CurrentClocksEventReasons and ..._TemperatureV.
    "old": ("-DNO_MEMORY_V2", "-DNO_PROCESSES_V3", "-DNO_CLOCKS_EVENT_REASONS",
            "-DNO_TEMPERATURE_V"),
}


def gcc_available() -> bool:
    return shutil.which("gcc") is not None


def build(out_dir: Path, flags: tuple[str, ...] = ()) -> Path:
    """Build one variant into ``out_dir``; returns the directory holding the library."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY_NAME
    cmd = ["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", *flags,
           "-o", str(target), str(SOURCE)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out_dir


def build_variants(root: Path) -> dict[str, Path]:
    return {name: build(root / name, flags) for name, flags in VARIANTS.items()}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR")
    for name, path in build_variants(Path(sys.argv[1])).items():
        print(f"{name}\t{path}")
