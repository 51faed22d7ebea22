"""The seed's figures and the simulated node's calibration, loaded from seeds/ and checked.

Every number keeps its provenance (seed, derived, assumption, fitted) so exports and the
reference column can say what was measured and what was assumed.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from seeds import SEED_FILE

PLACEMENTS = ("device", "host", "host-prefetch")
SOURCES = {"seed", "derived", "assumption", "fitted"}


class ReferenceError(ValueError):
    """A seeds file that is missing a field or holds a wrong one; names file and key."""


@dataclass(frozen=True)
class Figure:
    value: Any
    unit: str
    measured_as: str
    source: str
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = {"value": self.value, "unit": self.unit, "as": self.measured_as,
               "source": self.source}
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class StartupPlan:
    phases: tuple[tuple[str, float], ...]  # (phase, seconds) in order

    @property
    def total_s(self) -> float:
        return sum(s for _, s in self.phases)


@dataclass(frozen=True)
class ServiceModel:
    """Service-time model of one placement (unscaled seconds); see seeds [service]."""

    max_running_requests: int
    step_s: float
    per_seq_s: float
    prefill_s: float
    prefill_per_token_s: float
    extra_step_s: float = 0.0
    extra_per_seq_s: float = 0.0
    prefill_factor: float = 0.0

    def decode_s(self, batch: int) -> float:
        # The host extras are net of what overlap hides, so they may shrink with the batch;
        # a decode step is never faster than on the device.
        extra = max(0.0, self.extra_step_s + self.extra_per_seq_s * batch)
        return self.step_s + self.per_seq_s * batch + extra

    def prefill_time_s(self, tokens: int) -> float:
        return self.prefill_s + self.prefill_per_token_s * tokens * (1.0 + self.prefill_factor)


@dataclass(frozen=True)
class Workload:
    concurrency_levels: tuple[int, ...]
    requests_per_level: tuple[int, ...]
    input_len: int
    output_len: int
    range_ratio: float
    seed: int


@dataclass(frozen=True)
class KvPools:
    """DeepSeek-V4's KV pools per GPU, as SGLang's "DSV4 pool sizes" line names them."""

    full: int  # the seed's KV capacity
    swa: int
    c4: int
    c128: int
    c4_state: int
    c128_state: int


@dataclass(frozen=True)
class KvPoolModel:
    """How SGLang sizes the pools besides the full one; see seeds [kv_pools]."""

    swa_full_tokens_ratio: float
    sliding_window: int
    swa_prefix_tails: int
    swa_bytes_per_token: int
    c4_ring_size: int


@dataclass(frozen=True)
class Placement:
    name: str
    title: str
    weights_gib: float
    kv_tokens: int
    pools: KvPools
    host_delta_gib: float
    ready_s: float
    env: dict[str, str]
    startup: StartupPlan
    service: ServiceModel


@dataclass(frozen=True)
class Reference:
    path: Path
    raw: dict[str, Any]
    gpus: int
    gpu_name: str
    gpu_total_bytes: int
    gpu_reserved_bytes: int
    host_total_bytes: int
    host_baseline_used_bytes: int
    model: str
    context_gib: float
    graphs_gib: float
    kv_bytes_per_token: float
    kv_pools: KvPoolModel
    placements: dict[str, Placement]
    workload: Workload

    def figures(self) -> dict[str, Any]:
        """Every figure with its provenance, for exports and the reference column."""
        out: dict[str, Any] = {}
        for section in ("node", "placements", "deltas", "derived"):
            out[section] = _figures_of(self.raw.get(section, {}))
        return out

    def deltas(self, placement: str) -> dict[str, Figure]:
        table = self.raw.get("deltas", {}).get(placement, {})
        return {k: _figure(v, f"deltas.{placement}.{k}", self.path) for k, v in table.items()}


def _figures_of(table: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict) and "value" in value:
            out[key] = _figure(value, key, SEED_FILE).to_dict()
        elif isinstance(value, dict):
            inner = _figures_of(value)
            if inner:
                out[key] = inner
    return out


def _figure(entry: Any, where: str, path: Path) -> Figure:
    if not isinstance(entry, dict):
        raise ReferenceError(f"{path}: {where}: expected a table with value/unit/as/source")
    for key in ("value", "unit", "as", "source"):
        if key not in entry:
            raise ReferenceError(f"{path}: {where}: missing '{key}'")
    if entry["source"] not in SOURCES:
        raise ReferenceError(f"{path}: {where}.source: '{entry['source']}' is not one of "
                             f"{sorted(SOURCES)}")
    if entry["source"] == "assumption" and not entry.get("why"):
        raise ReferenceError(f"{path}: {where}: an assumption needs a one-line 'why'")
    note = entry.get("why") or entry.get("how") or ""
    return Figure(entry["value"], entry["unit"], entry["as"], entry["source"], note)


def _get(table: dict[str, Any], dotted: str, path: Path, kind: type | tuple = (int, float)) -> Any:
    node: Any = table
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ReferenceError(f"{path}: missing '{dotted}'")
        node = node[part]
    if isinstance(node, dict) and "value" in node:
        node = _figure(node, dotted, path).value
    if not isinstance(node, kind) or isinstance(node, bool):
        raise ReferenceError(f"{path}: '{dotted}' should be {kind}, got {node!r}")
    return node


def load(path: Path = SEED_FILE) -> Reference:
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ReferenceError(f"{path}: cannot read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ReferenceError(f"{path}: {exc}") from exc
    svc = raw.get("service", {})
    placements = {}
    for name in PLACEMENTS:
        p = f"placements.{name}"
        phases = raw.get("startup", {}).get(name)
        if not isinstance(phases, dict):
            raise ReferenceError(f"{path}: missing 'startup.{name}'")
        plan = StartupPlan(tuple((k, float(_get(phases, k, path))) for k in phases))
        extra = svc.get("extra", {}).get(name, {})
        service = ServiceModel(
            max_running_requests=_get(raw, "service.max_running_requests", path, int),
            step_s=_get(raw, "service.step_s", path),
            per_seq_s=_get(raw, "service.per_seq_s", path),
            prefill_s=_get(raw, "service.prefill_s", path),
            prefill_per_token_s=_get(raw, "service.prefill_per_token_s", path),
            extra_step_s=float(extra.get("step_s", 0.0)),
            extra_per_seq_s=float(extra.get("per_seq_s", 0.0)),
            prefill_factor=float(extra.get("prefill_factor", 0.0)),
        )
        kv_tokens = _get(raw, f"{p}.kv_tokens", path, int)
        pools = KvPools(full=kv_tokens, **{
            pool: _get(raw, f"{p}.{pool}_tokens", path, int)
            for pool in ("swa", "c4", "c128", "c4_state", "c128_state")})
        placements[name] = Placement(
            name=name,
            title=_get(raw, f"{p}.title", path, str),
            weights_gib=_get(raw, f"{p}.weights_gb_per_gpu", path),
            kv_tokens=kv_tokens,
            pools=pools,
            host_delta_gib=_get(raw, f"{p}.host_delta_gib", path),
            ready_s=_get(raw, f"{p}.ready_s", path),
            env=dict(raw["placements"][name].get("env", {})),
            startup=plan,
            service=service,
        )
        if abs(plan.total_s - placements[name].ready_s) > 0.01:
            raise ReferenceError(f"{path}: startup.{name} phases add up to {plan.total_s:.2f} s, "
                                 f"not ready_s {placements[name].ready_s} s")
    wl = raw.get("workload", {})
    workload = Workload(
        concurrency_levels=tuple(_get(raw, "workload.concurrency_levels", path, list)),
        requests_per_level=tuple(_get(raw, "workload.requests_per_level", path, list)),
        input_len=_get(raw, "workload.input_len", path, int),
        output_len=_get(raw, "workload.output_len", path, int),
        range_ratio=float(wl.get("range_ratio", 1.0)),
        seed=int(wl.get("seed", 1)),
    )
    if len(workload.concurrency_levels) != len(workload.requests_per_level):
        raise ReferenceError(f"{path}: workload.concurrency_levels and requests_per_level "
                             "must have the same length")
    return Reference(
        path=path, raw=raw,
        gpus=_get(raw, "node.gpus", path, int),
        gpu_name=_get(raw, "node.gpu_name", path, str),
        gpu_total_bytes=_get(raw, "node.gpu_total_bytes", path, int),
        gpu_reserved_bytes=_get(raw, "node.gpu_reserved_bytes", path, int),
        host_total_bytes=_get(raw, "node.host_total_bytes", path, int),
        host_baseline_used_bytes=_get(raw, "node.host_baseline_used_bytes", path, int),
        model=_get(raw, "node.model", path, str),
        context_gib=_get(raw, "hbm.context_gib", path),
        graphs_gib=_get(raw, "hbm.graphs_gib", path),
        kv_bytes_per_token=_get(raw, "derived.kv_bytes_per_token", path),
        kv_pools=KvPoolModel(
            swa_full_tokens_ratio=_get(raw, "kv_pools.swa_full_tokens_ratio", path),
            sliding_window=_get(raw, "kv_pools.sliding_window", path, int),
            swa_prefix_tails=_get(raw, "kv_pools.swa_prefix_tails", path, int),
            swa_bytes_per_token=_get(raw, "kv_pools.swa_bytes_per_token", path, int),
            c4_ring_size=_get(raw, "kv_pools.c4_ring_size", path, int),
        ),
        placements=placements,
        workload=workload,
    )


@cache
def default() -> Reference:
    return load()
