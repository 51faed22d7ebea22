"""A fleet row in words and JSON: what `fleet --once` prints, what a snapshot's
snapshot.json holds per node, and what a node's screen says of its engram-top agent."""

from __future__ import annotations

from typing import Any

from collectors.agent_series import AgentFigures
from collectors.router_series import ROUTER_KIND, StackFigures
from collectors.units import gib
from engram_top.fleet.session import FleetRow

FIT_WORDS = ("fits", "in part", "does not fit")  # by the agent's fit_level


def node_json(r: FleetRow) -> dict[str, Any]:
    return {"node": r.node, "placement": r.placement, "placement_inferred": r.placement_inferred,
            "state": r.state, "gpus": r.gpus,
            "hbm_used_per_gpu_bytes": {"min": r.hbm_min, "max": r.hbm_max},
            "hbm_total_per_gpu_bytes": r.hbm_total,
            "kv": {"usage": r.kv_usage, "full": r.kv_full, "swa": r.kv_swa,
                   "capacity_tokens": r.kv_tokens},
            "weights_per_gpu_gb": r.weights_gb,
            "host": {"used_bytes": r.host_used, "available_bytes": r.host_available,
                     "total_bytes": r.host_total},
            "latency_s": {"ttft_p50": r.ttft_p50, "ttft_p99": r.ttft_p99,
                          "tpot_p50": r.tpot_p50, "tpot_p99": r.tpot_p99},
            "output_tok_s": r.output_tok_s, "gpu_power_w": r.power_w,
            "joules_per_token": r.joules_per_token, "alerts": list(r.alerts),
            "missing": list(r.missing), "age_s": round(r.age_s, 1),
            "agent": None if r.agent is None else agent_json(r.agent),
            "stack": None if r.stack is None else stack_json(r.stack)}


def stack_json(s: StackFigures) -> dict[str, Any]:
    return {"kind": s.kind, "workers": s.workers, "running": s.running,
            "requests_per_s": s.requests_per_s, "hit_rate": s.hit_rate}


def stack_line(s: StackFigures) -> str:
    """A router's or LMCache's figures in one line, for a node's screen."""
    if s.kind == ROUTER_KIND:
        parts = ["SGLang router"]
        if s.workers is not None:
            parts.append(f"{s.workers:,.0f} workers")
        if s.running is not None:
            parts.append(f"{s.running:,.0f} running")
        if s.requests_per_s is not None:
            parts.append(f"{s.requests_per_s:,.1f} req/s")
        if s.hit_rate is not None:
            parts.append(f"cache-aware routing hit {s.hit_rate:.1%} since start")
    else:
        parts = ["LMCache"] + ([] if s.hit_rate is None else
                               [f"hit {s.hit_rate:.1%} of the tokens asked since start"])
    return " · ".join(parts) + "; the GPU memory and KV pools are its workers'"


def agent_json(a: AgentFigures) -> dict[str, Any]:
    return {"placement": a.placement or None, "scenario": a.scenario or None,
            "state": a.state or None,
            "numa_free_bytes": {n: b for n, b in a.numa_free},
            "hbm_unexplained_bytes": {g: b for g, b in a.hbm_unexplained},
            "fits": [{"scenario": f.scenario, "placement": f.placement,
                      "level": None if f.level is None else FIT_WORDS[f.level],
                      "room_bytes": f.room_bytes} for f in a.fits],
            "alerts": [{"id": i, "severity": sev} for i, sev in a.alerts]}


def agent_lines(a: AgentFigures) -> list[str]:
    """The agent's figures of a node, a line each: the fit of each scenario (with the host
    memory it would leave), free memory per NUMA node, the HBM nobody explains."""
    out = []
    if a.fits:
        out.append("fits: " + " · ".join(
            f"{f.scenario} {'?' if f.level is None else FIT_WORDS[f.level]}"
            + ("" if f.room_bytes is None else
               f" (host {'room' if f.room_bytes >= 0 else 'short'} "
               f"{gib(abs(f.room_bytes))} GiB)")
            for f in a.fits))
    if a.numa_free:
        out.append("free per NUMA node: " + ", ".join(f"{n}: {gib(b)} GiB"
                                                     for n, b in a.numa_free))
    if a.hbm_unexplained:
        out.append("HBM unexplained: " + ", ".join(f"GPU {g} {gib(b)} GiB"
                                                   for g, b in a.hbm_unexplained))
    return out
