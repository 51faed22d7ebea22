"""The fit check's node for in-process tests: a simulated node folder (its GPU and host
backends read as on a real node), another tenant's HBM held by this test's process, the
demo's scenarios, and a verdict's line by where it is."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from helpers import DEMO, GIB

from collectors.host import sample as host_sample
from engram_top.seed import reference
from engram_top.sim import state
from engram_top.sim.backends import SimGpuBackend, SimHostBackend
from scenarios import fit, scenario_file
from scenarios.fit import node_free
from scenarios.proc_start import start_of


def make_node(tmp_path: Path, **spec: int) -> Path:
    node_dir = tmp_path / "node"
    base = state.NodeSpec.from_reference(reference.default())
    state.write_spec(node_dir, dataclasses.replace(base, **spec))
    return node_dir


def tenant(node_dir: Path, gib: float, gpus: tuple[int, ...] = (0, 1, 2, 3),
           name: str = "noisy-neighbour") -> int:
    """This process as another tenant holding ``gib`` of HBM on ``gpus``."""
    me = os.getpid()
    state.write_proc(node_dir, state.ProcState(
        pid=me, started=start_of(me) or 0.0, name=name,
        gpu_bytes={g: int(gib * GIB) for g in gpus}))
    return me


def free_of(node_dir: Path, server_pids: tuple[int, ...] = ()) -> fit.NodeFree:
    return node_free(SimGpuBackend(node_dir).sample(),
                     host_sample(SimHostBackend(node_dir), None), server_pids=server_pids)


def demo(name: str, *args: str) -> scenario_file.Scenario:
    sc = scenario_file.load(DEMO).get(name)
    return dataclasses.replace(sc, args=tuple(args)) if args else sc


def line(verdict: fit.FitVerdict, where: str) -> fit.FitLine:
    return next(ln for ln in verdict.lines if ln.where == where)
