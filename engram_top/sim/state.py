"""The simulated node's shared state on disk: one small JSON file per process that holds
virtual GPU or host memory. A file counts only while its process lives (same pid and start
time), so memory vanishes when its owner exits or is killed, as it does on a real GPU."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engram_top.seed.reference import Reference
from scenarios.proc_start import started_as


@dataclass
class ProcState:
    pid: int
    started: float  # scenarios.proc_start's start_of: tells it from a later process of its pid
    name: str
    gpu_bytes: dict[int, int] = field(default_factory=dict)  # GPU index -> bytes held
    gpu_util_pct: dict[int, float] = field(default_factory=dict)
    pcie_rx_bytes_per_s: dict[int, float] = field(default_factory=dict)
    pcie_tx_bytes_per_s: dict[int, float] = field(default_factory=dict)
    host_anon_bytes: int = 0
    host_shmem_bytes: int = 0  # shared/pinned host memory (RssShmem on a real node)
    host_hugepage_bytes: int = 0
    # The NUMA node its host memory sits on, where not its GPU's (another tenant's hog).
    numa_node: int | None = None


@dataclass(frozen=True)
class NodeSpec:
    gpus: int
    gpu_name: str
    gpu_total_bytes: int
    gpu_reserved_bytes: int
    host_total_bytes: int
    host_baseline_used_bytes: int

    @classmethod
    def from_reference(cls, ref: Reference) -> NodeSpec:
        return cls(ref.gpus, ref.gpu_name, ref.gpu_total_bytes, ref.gpu_reserved_bytes,
                   ref.host_total_bytes, ref.host_baseline_used_bytes)


def procs_dir(node_dir: Path) -> Path:
    return node_dir / "procs"


def write_spec(node_dir: Path, spec: NodeSpec) -> None:
    procs_dir(node_dir).mkdir(parents=True, exist_ok=True)
    _atomic_write(node_dir / "node.json", json.dumps(asdict(spec)))


def read_spec(node_dir: Path) -> NodeSpec:
    return NodeSpec(**json.loads((node_dir / "node.json").read_text()))


def ensure_node(node_dir: Path, ref: Reference) -> NodeSpec:
    """Create the node's folder and spec on first use; keep an existing spec."""
    if not (node_dir / "node.json").exists():
        write_spec(node_dir, NodeSpec.from_reference(ref))
    procs_dir(node_dir).mkdir(parents=True, exist_ok=True)
    return read_spec(node_dir)


def write_proc(node_dir: Path, state: ProcState) -> None:
    _atomic_write(procs_dir(node_dir) / f"{state.pid}.json", json.dumps(asdict(state)))


def remove_proc(node_dir: Path, pid: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        (procs_dir(node_dir) / f"{pid}.json").unlink()


def live_procs(node_dir: Path) -> list[ProcState]:
    """States of processes still alive; files of dead owners are removed on sight."""
    out: list[ProcState] = []
    try:
        entries = list(os.scandir(procs_dir(node_dir)))
    except FileNotFoundError:
        return out
    for entry in entries:
        if not entry.name.endswith(".json"):
            continue
        state = _read(Path(entry.path))
        if state is None:
            continue  # being replaced right now, or removed: the next poll sees it
        if alive(state.pid, state.started):
            out.append(state)
        else:
            remove_proc(node_dir, state.pid)
    return out


def read_proc(node_dir: Path, pid: int) -> ProcState | None:
    """The state file of ``pid`` as it stands, alive or not; None where there is none (not
    written yet, removed) or it is being replaced right now."""
    return _read(procs_dir(node_dir) / f"{pid}.json")


def _read(path: Path) -> ProcState | None:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return ProcState(**{**raw,
                        "gpu_bytes": {int(k): v for k, v in raw["gpu_bytes"].items()},
                        "gpu_util_pct": {int(k): v for k, v in raw["gpu_util_pct"].items()},
                        "pcie_rx_bytes_per_s": {int(k): v for k, v in
                                                raw["pcie_rx_bytes_per_s"].items()},
                        "pcie_tx_bytes_per_s": {int(k): v for k, v in
                                                raw["pcie_tx_bytes_per_s"].items()}})


def alive(pid: int, started: float) -> bool:
    # A reused pid has another start; a zombie has released its memory.
    return started_as(pid, started, running=True)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
