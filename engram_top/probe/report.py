"""probe.json: what `engram-top probe` writes, and the one loader that reads it back (for
`engram-top compare` and the compare screen), plus probe.md.

No torch, no Textual, no I/O beyond the file asked for: engram_top.probe.gpu measures, this
module only describes. A figure the probe could not give is null, never 0.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = "engram-top-probe/1"
MODES = ("device", "host", "host-prefetch")  # the seed's placement names
HOST_MODES = MODES[1:]
NOT_MEANINGFUL = ("measured on the CPU with tiny sizes: the code path of the probe, not a "
                  "placement's cost; not meaningful for placement")


class ProbeFileError(ValueError):
    """A probe.json that cannot be read; says the file and the field."""


@dataclass(frozen=True)
class ProbeBatch:
    batch: int
    device_step_ms: float
    # Per host placement: its extra time per decode step over the device step (ms) and that
    # over the device step, the predicted relative change of TPOT.
    extra_ms: dict[str, float]
    predicted_tpot_change: dict[str, float]
    overlap_fraction: float | None  # None where the synchronous mode cost nothing extra


@dataclass(frozen=True)
class ProbeReport:
    """What a comparison shows of a probe: its predictions, and how far to trust them."""

    path: str
    created: str
    meaningful_for_placement: bool
    device_kind: str  # "cuda" or "cpu"
    device_name: str
    compute: str  # which GEMM stood for the decode step's compute
    batches: tuple[ProbeBatch, ...]

    def label(self) -> str:
        """"predicted by probe (NVIDIA H200)"; a CPU probe says it is not meaningful."""
        if not self.meaningful_for_placement:
            return "predicted by probe (CPU: not meaningful for placement)"
        return f"predicted by probe ({self.device_name})"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "created": self.created,
            "meaningful_for_placement": self.meaningful_for_placement,
            "device_kind": self.device_kind, "device_name": self.device_name,
            "compute": self.compute,
            "batches": [{"batch": b.batch, "device_step_ms": b.device_step_ms,
                         "extra_ms": dict(b.extra_ms),
                         "predicted_tpot_change": dict(b.predicted_tpot_change),
                         "overlap_fraction": b.overlap_fraction} for b in self.batches],
        }


# ----------------------------------------------------------------------------- reading

def load_probe(path: Path) -> ProbeReport:
    """probe.json as a ProbeReport; ProbeFileError names the file and the field at fault."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProbeFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ProbeFileError(f"{path}: not UTF-8 text: {exc.reason}") from exc
    except json.JSONDecodeError as exc:
        raise ProbeFileError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    except RecursionError:
        raise ProbeFileError(f"{path}: not a probe.json (nested too deeply)") from None
    return from_json(data, str(path))


def from_json(data: Any, where: str) -> ProbeReport:
    r = _Reader(where)
    if not isinstance(data, dict):
        raise ProbeFileError(f"{where}: not a probe.json: expected a JSON object")
    schema = data.get("schema")
    if schema != SCHEMA:
        raise ProbeFileError(f"{where}: field 'schema': expected {SCHEMA!r}, got {schema!r} "
                             "(not a probe.json of this engram-top)")
    device = r.obj(data, "device")
    compute = r.obj(data, "compute")
    batches = r.field(data, "batches", list)
    if not batches:
        raise ProbeFileError(f"{where}: field 'batches': no batch was measured")
    return ProbeReport(
        path=where,
        created=r.field(data, "created", str),
        meaningful_for_placement=r.field(data, "meaningful_for_placement", bool),
        device_kind=r.field(device, "kind", str, "device."),
        device_name=r.field(device, "name", str, "device."),
        compute=r.field(compute, "what", str, "compute."),
        batches=tuple(r.batch(b, f"batches[{i}].") for i, b in enumerate(batches)),
    )


class _Reader:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, name: str, why: str) -> ProbeFileError:
        return ProbeFileError(f"{self.where}: field '{name}': {why}")

    def field(self, data: dict[str, Any], key: str, kind: type, prefix: str = "") -> Any:
        if key not in data:
            raise self.fail(prefix + key, "missing")
        value = data[key]
        ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        if not ok:
            raise self.fail(prefix + key, f"expected {kind.__name__}, got {value!r}")
        return value

    def obj(self, data: dict[str, Any], key: str, prefix: str = "") -> dict[str, Any]:
        return self.field(data, key, dict, prefix)

    def optional_number(self, data: dict[str, Any], key: str, prefix: str) -> float | None:
        """A finite number, or null; never missing."""
        if key in data and data[key] is None:
            return None
        return self.number(data, key, prefix)

    def number(self, data: dict[str, Any], key: str, prefix: str) -> float:
        value = data.get(key)
        if key not in data:
            raise self.fail(prefix + key, "missing")
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise self.fail(prefix + key, f"expected a finite number, got {value!r}")
        return float(value)

    def batch(self, b: Any, prefix: str) -> ProbeBatch:
        if not isinstance(b, dict):
            raise self.fail(prefix.rstrip("."), "expected an object")
        batch = self.field(b, "batch", int, prefix)
        modes = self.obj(b, "modes", prefix)
        device = self.obj(modes, "device", prefix + "modes.")
        step = self.number(device, "step_ms", prefix + "modes.device.")
        predicted = self.obj(b, "predicted_tpot_change", prefix)
        extra: dict[str, float] = {}
        change: dict[str, float] = {}
        for mode in HOST_MODES:
            m = self.obj(modes, mode, prefix + "modes.")
            extra[mode] = self.number(m, "exposed_ms", f"{prefix}modes.{mode}.")
            change[mode] = self.number(predicted, mode, prefix + "predicted_tpot_change.")
        overlap = self.optional_number(b, "overlap_fraction", prefix)
        return ProbeBatch(batch, step, extra, change, overlap)


# ----------------------------------------------------------------------------- probe.md

def table_size(gib: float) -> str:
    """"8 GiB"; under a GiB in MiB ("4 MiB"), as the CPU path's tables are."""
    return f"{gib:g} GiB" if gib >= 1 else f"{gib * 1024:g} MiB"


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:+.2f}%"


def to_markdown(data: dict[str, Any]) -> str:
    """probe.md from what probe.json holds."""
    dev, sizes, comp = data["device"], data["sizes"], data["compute"]
    pcie = "PCIe GB/s" if dev["kind"] == "cuda" else "copy GB/s (a CPU memcpy, no PCIe)"
    lines = [f"# engram-top probe: {dev['name']} ({data['created']})", ""]
    if not data["meaningful_for_placement"]:
        lines += [f"**Not meaningful for placement**: {NOT_MEANINGFUL}.", ""]
    lines += [
        f"- torch {dev['torch']}" + (f", CUDA {dev['cuda']}" if dev.get("cuda") else ""),
        f"- table: {table_size(sizes['table_gib'])} of {sizes['row_bytes']}-byte rows "
        f"({sizes['rows']:,} rows), in HBM for device, in "
        f"{'pinned ' if dev['kind'] == 'cuda' else ''}host memory for host and host-prefetch",
        f"- per decode step: {sizes['rows_per_token']} rows per token per Engram layer, "
        f"{sizes['layers']} Engram layer(s), random rows (torch.randint)",
        f"- compute: {comp['what']}",
        f"- {data['seconds_per_mode']:g} s per batch and mode, after "
        f"{data['warmup_steps']} warm-up steps",
        "",
        f"| batch | mode | steps | step ms (mean) | step ms (p50) | exposed ms | host gather ms "
        f"| copy ms | {pcie} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for b in data["batches"]:
        for mode in MODES:
            m = b["modes"][mode]
            gbs = "n/a" if m.get("copy_gb_s") is None else f"{m['copy_gb_s']:.2f}"
            lines.append(f"| {b['batch']} | {mode} | {m['steps']} | {_ms(m['step_ms'])} | "
                         f"{_ms(m['step_ms_p50'])} | {_ms(m.get('exposed_ms'))} | "
                         f"{_ms(m.get('gather_ms'))} | {_ms(m.get('copy_ms'))} | {gbs} |")
    lines += ["", "## Predicted TPOT change against device", "",
              "| batch | bytes per step | host | host-prefetch | prefetch overlap |",
              "|---|---|---|---|---|"]
    for b in data["batches"]:
        p = b["predicted_tpot_change"]
        ov = "n/a" if b["overlap_fraction"] is None else f"{b['overlap_fraction']:.0%}"
        lines.append(f"| {b['batch']} | {b['bytes_per_step']:,} | {_pct(p['host'])} | "
                     f"{_pct(p['host-prefetch'])} | {ov} |")
    lines += ["", "Exposed: a mode's mean step minus the device step's. Predicted change: "
              "exposed / device step. Overlap: 1 - prefetch exposed / synchronous exposed "
              "(n/a where the synchronous mode cost nothing extra). The step is a synthetic "
              "one; a bench's measured TPOT deltas are what a placement really costs."]
    return "\n".join(lines) + "\n"
