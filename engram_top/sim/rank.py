"""One simulated TP rank: a small process that holds its GPU's virtual memory.

The server process sends it JSON lines on stdin ({"gpu_bytes": ..., ...}); the rank writes
them to its state file. It exits when its parent dies (PR_SET_PDEATHSIG, and EOF on stdin),
taking its memory with it, like an SGLang scheduler process.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
from pathlib import Path

from engram_top.sim.state import ProcState, remove_proc, write_proc
from scenarios.proc_start import start_of

PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1


def _prctl(option: int, arg: int | bytes) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the stdin EOF still ends the rank


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="engram_top.sim.rank")
    parser.add_argument("--node-dir", type=Path, required=True)
    parser.add_argument("--gpu", type=int, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--name", default=None,
                        help="its process name (default SGLang's sglang::scheduler_TP<rank>)")
    args = parser.parse_args(argv)
    name = args.name or f"sglang::scheduler_TP{args.rank}"
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    # The kernel keeps 15 bytes of a name: a long one is cut to its engine and rank.
    short = name if len(name) <= 15 else f"{name.split('::')[0]}::TP{args.rank}"
    _prctl(PR_SET_NAME, short.encode())
    if os.getppid() == 1:
        return 0  # the parent died before we could ask to follow it
    pid = os.getpid()
    state = ProcState(pid=pid, started=start_of(pid) or 0.0, name=name)

    def leave(*_: object) -> None:
        remove_proc(args.node_dir, pid)
        os._exit(0)

    signal.signal(signal.SIGTERM, leave)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when ranks stop
    write_proc(args.node_dir, state)
    for line in sys.stdin:
        try:
            update = json.loads(line)
        except ValueError:
            continue
        g = args.gpu
        state.gpu_bytes = {g: int(update.get("gpu_bytes", 0))}
        state.gpu_util_pct = {g: float(update.get("util", 0.0))}
        state.pcie_rx_bytes_per_s = {g: float(update.get("pcie_rx", 0.0))}
        state.pcie_tx_bytes_per_s = {g: float(update.get("pcie_tx", 0.0))}
        state.host_anon_bytes = int(update.get("host_anon", 0))
        state.host_shmem_bytes = int(update.get("host_shmem", 0))
        state.host_hugepage_bytes = int(update.get("host_huge", 0))
        write_proc(args.node_dir, state)
    leave()
    return 0


if __name__ == "__main__":
    sys.exit(main())
