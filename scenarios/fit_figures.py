"""What a scenario's server will hold, as far as anything here knows: the seed's figures for
DeepSeek-V4.1-Flash (seeds/), which the simulated node follows too. A model the seed does not
describe has no figures: its fit is not predicted rather than guessed.

Read once per process (a small TOML file); the fit check itself (scenarios.fit) is pure.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from typing import Any

from collectors.units import GIB
from seeds import SEED_FILE

# A checkpoint the seed's figures describe: DeepSeek-V4.1-Flash, by path or hub id.
_SEED_MODEL = re.compile(r"deepseek[-_ ]?v4(\.1)?[-_ ]?flash", re.IGNORECASE)


@dataclass(frozen=True)
class ModelFigures:
    """Per placement, what one server holds, at the seed's tensor-parallel size."""

    tp: int  # the tensor-parallel size the per-GPU figures were taken at
    gpu_total_bytes: int  # the GPU the automatic mem fraction was chosen on
    gpu_reserved_bytes: int
    context_bytes: int  # CUDA context and NCCL, per GPU
    graphs_bytes: int  # captured CUDA graphs, per GPU
    weights_bytes: dict[str, int]  # per GPU, by placement
    kv_bytes: dict[str, int]  # the KV pools per GPU, by placement
    table_bytes: int  # one copy of both Engram tables, whole node
    process_bytes: int  # the server processes' own host memory (anonymous), whole node
    staging_bytes: dict[str, int]  # pinned host staging beyond the tables, by placement
    source: str  # said beside every figure taken from here


def _value(raw: dict[str, Any], *path: str) -> float:
    node: Any = raw
    for key in path:
        node = node[key]
    return float(node["value"] if isinstance(node, dict) else node)


@functools.cache
def seed_figures() -> ModelFigures | None:
    """The seed's figures, or None where its file cannot be read (then nothing is predicted)."""
    try:
        raw = tomllib.loads(SEED_FILE.read_text())
        placements = raw["placements"]
        per_token = _value(raw, "derived", "kv_bytes_per_token")
        pools = raw["kv_pools"]
        # The fixed pools (sliding window) come out of the same budget as the full pool.
        swa = _value(placements, "device", "swa_tokens") * float(pools["swa_bytes_per_token"])
        device_delta = _value(placements, "device", "host_delta_gib") * GIB
        tables = _value(raw, "derived", "engram_tables_gib") * GIB
        weights = {p: int(_value(placements, p, "weights_gb_per_gpu") * GIB) for p in placements}
        kv = {p: int(_value(placements, p, "kv_tokens") * per_token + swa) for p in placements}
        # What a host placement's host delta holds beyond the processes and the tables.
        staging = {p: 0 if p == "device" else max(0, int(
            _value(placements, p, "host_delta_gib") * GIB - device_delta - tables))
            for p in placements}
        return ModelFigures(
            tp=int(_value(raw, "node", "tp_size")),
            gpu_total_bytes=int(_value(raw, "node", "gpu_total_bytes")),
            gpu_reserved_bytes=int(_value(raw, "node", "gpu_reserved_bytes")),
            context_bytes=int(float(raw["hbm"]["context_gib"]) * GIB),
            graphs_bytes=int(float(raw["hbm"]["graphs_gib"]) * GIB),
            weights_bytes=weights, kv_bytes=kv, table_bytes=int(tables),
            process_bytes=int(device_delta), staging_bytes=staging,
            source="the seed's DeepSeek-V4.1-Flash figures")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def describes(model_path: str | None, follows_reference: bool) -> bool:
    """Whether the seed's figures describe this server: the simulated node's always do; a
    real engine's when its checkpoint is DeepSeek-V4.1-Flash."""
    return follows_reference or bool(model_path and _SEED_MODEL.search(model_path))
