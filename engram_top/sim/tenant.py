"""Another tenant on the simulated node: a process that is not the server's, holding HBM on
some GPUs (a noisy neighbour) or host RAM (a host-RAM hog), as a second job on a shared node
does. `sim serve --neighbour-hbm` and `--host-hog` start one each.

It is not in the server's process tree (it detaches: its parent exits at once, so a
collector that sums the server's tree leaves it out, as it would a real neighbour), yet it
cannot outlive the server: it reads its stdin, a pipe the server holds, and leaves when that
pipe closes (the server exited, however it died) or on SIGTERM (the server's process group
stopped). Its memory is a state file that counts only while it lives (engram_top.sim.state).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from collectors.units import GIB
from engram_top.sim.rank import PR_SET_NAME, _prctl
from engram_top.sim.state import ProcState, live_procs, remove_proc, write_proc
from scenarios.proc_start import start_of

NEIGHBOUR_NAME = "noisy-neighbour"  # what NVML's process list and ps show (15 bytes)
HOG_NAME = "host-hog"
READY_WAIT_S = 10.0  # how long the server waits for a tenant's memory to show on the node


@dataclass(frozen=True)
class TenantSpec:
    name: str
    gpu_bytes: dict[int, int]  # GPU index -> bytes held on it
    host_bytes: int = 0
    numa_node: int | None = None  # where its host memory sits (None: its GPU's, else 0)

    def argv(self, node_dir: Path) -> list[str]:
        return [sys.executable, "-m", "engram_top.sim.tenant", "--node-dir", str(node_dir),
                "--spec", json.dumps({"name": self.name, "gpu_bytes": self.gpu_bytes,
                                      "host_bytes": self.host_bytes,
                                      "numa_node": self.numa_node})]


def from_options(args: argparse.Namespace, gpus: int) -> list[TenantSpec]:
    """The tenants `sim serve`'s options ask for (none by default)."""
    out = []
    neighbour = getattr(args, "neighbour_hbm", 0.0) or 0.0
    if neighbour:
        on = args.neighbour_gpus if args.neighbour_gpus is not None else tuple(range(gpus))
        out.append(TenantSpec(NEIGHBOUR_NAME, {g: int(neighbour * GIB) for g in on}))
    hog = getattr(args, "host_hog", 0.0) or 0.0
    if hog:
        out.append(TenantSpec(HOG_NAME, {}, int(hog * GIB), args.host_hog_node))
    return out


class Tenants:
    """The tenants a server started: each stops when the server closes its pipe."""

    def __init__(self, node_dir: Path) -> None:
        self.node_dir = node_dir
        self.pipes: list[subprocess.Popen[str]] = []
        self.pids: list[int] = []

    def start(self, specs: list[TenantSpec]) -> None:
        for spec in specs:
            # The launcher forks the tenant and exits: reaped here at once, it leaves the
            # tenant detached but holding the read end of our pipe (its stdin).
            launcher = subprocess.Popen(spec.argv(self.node_dir), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
            self.pipes.append(launcher)
            pid = _read_pid(launcher, READY_WAIT_S)
            try:
                launcher.wait(READY_WAIT_S)
            except subprocess.TimeoutExpired:
                launcher.kill()
                pid = None
            if pid is None:
                raise TenantFailed(f"{spec.name} did not start within {READY_WAIT_S:.0f} s")
            self.pids.append(pid)

    def wait_shown(self, timeout: float = READY_WAIT_S) -> bool:
        """Until every tenant's memory is on the node (its state file written)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = {p.pid for p in live_procs(self.node_dir)}
            if all(pid in live for pid in self.pids):
                return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        for launcher in self.pipes:
            if launcher.stdin is not None:
                with contextlib.suppress(OSError):
                    launcher.stdin.close()  # EOF: the tenant removes its memory and exits
        for pid in self.pids:
            _wait_gone(pid, 5.0)
        self.pipes, self.pids = [], []


class TenantFailed(Exception):
    pass


def _read_pid(launcher: subprocess.Popen[str], timeout: float) -> int | None:
    """The tenant's pid, its one line on the launcher's stdout; None if none came in time
    (a tenant that died closes the pipe: an empty read)."""
    out = launcher.stdout
    if out is None:
        return None
    ready, _, _ = select.select([out], [], [], timeout)
    line = out.readline() if ready else ""
    out.close()
    return int(line) if line.strip().isdigit() else None


def _wait_gone(pid: int, timeout: float) -> None:
    try:
        proc = psutil.Process(pid)
        proc.wait(timeout)
    except psutil.TimeoutExpired:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    except psutil.Error:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="engram_top.sim.tenant")
    parser.add_argument("--node-dir", type=Path, required=True)
    parser.add_argument("--spec", required=True)
    args = parser.parse_args(argv)
    raw = json.loads(args.spec)
    if os.fork():
        return 0  # the launcher: the tenant, its child, goes on alone
    # It stays in the server's process group, so a stop of the group reaches it too.
    pid = os.getpid()
    _prctl(PR_SET_NAME, raw["name"].encode()[:15])
    held = ProcState(pid=pid, started=start_of(pid) or 0.0, name=raw["name"],
                     gpu_bytes={int(g): int(b) for g, b in raw["gpu_bytes"].items()},
                     host_anon_bytes=int(raw["host_bytes"]), numa_node=raw["numa_node"])

    def leave(*_: object) -> None:
        remove_proc(args.node_dir, pid)
        os._exit(0)

    signal.signal(signal.SIGTERM, leave)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when tenants stop
    signal.signal(signal.SIGHUP, leave)
    write_proc(args.node_dir, held)
    print(pid, flush=True)  # to the server, through the launcher's stdout it shares
    sys.stdout.close()
    for _ in sys.stdin:  # nothing is sent: the pipe's end is the signal
        pass
    leave()
    return 0


if __name__ == "__main__":
    sys.exit(main())
