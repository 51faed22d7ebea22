"""Compare placement runs the way the seed thread does: per-scenario means, relative deltas
against a baseline with 95% intervals, and the seed's own figures beside them.

Pure functions over RunResult records; no Textual, no I/O (engram_top.importers reads files).
A missing value stays None all the way to the table: a run that did not measure something
must never read as 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import PurePath
from typing import Any

from engram_top.reference import Placement, Reference

# Two-sided 95% Student t critical values, t(0.975, df) for df 1..30 (checked against
# scipy.stats.t.ppf). Hard-coded so the product needs no scipy; beyond 30 df the normal 1.96.
_T95 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)
_Z95 = 1.96


# ----------------------------------------------------------------------------- run records

@dataclass(frozen=True)
class RunResult:
    """One trial of one scenario. Latencies in seconds; weights in SGLang's "GB" (GiB)."""

    scenario: str
    placement: str | None
    source: str  # "bench", "live", "bench_serving:<file>", ...
    trial: int
    gpus: int | None
    weights_gb: float | None
    kv_tokens: int | None
    host_delta_gib: float | None
    ready_s: float | None
    ttft_mean_s: float | None
    tpot_mean_s: float | None
    itl_mean_s: float | None
    e2e_mean_s: float | None
    ttft_p99_s: float | None
    tpot_p99_s: float | None
    output_tok_s: float | None
    request_per_s: float | None
    completed: int = 0
    failed: int = 0
    duration_s: float | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["notes"] = list(self.notes)  # JSON has no tuples
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        """Inverse of to_dict. Measurements left out read as None; unknown keys are refused
        so a misspelt field cannot silently become a missing measurement."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"RunResult: unknown keys {unknown}")
        missing = [k for k in ("scenario", "source", "trial") if k not in data]
        if missing:
            raise ValueError(f"RunResult: missing keys {missing}")
        values = {name: data.get(name) for name in known - {"completed", "failed", "notes"}}
        values["completed"] = data.get("completed", 0)
        values["failed"] = data.get("failed", 0)
        values["notes"] = tuple(data.get("notes", ()))
        for name, value in values.items():
            _check_type(name, value)
            if isinstance(value, float) and not math.isfinite(value):
                values[name] = None  # a NaN mean (no samples) is a figure not measured
        return cls(**values)


_INT_FIELDS = {"trial", "gpus", "kv_tokens", "completed", "failed"}
_STR_FIELDS = {"scenario", "placement", "source"}
_REQUIRED = {"scenario", "source", "trial", "completed", "failed"}


def _check_type(name: str, value: Any) -> None:
    if name == "notes":
        if not all(isinstance(n, str) for n in value):
            raise ValueError("RunResult.notes: expected a list of strings")
        return
    if value is None:
        if name in _REQUIRED:
            raise ValueError(f"RunResult.{name}: must not be null")
        return
    if name in _STR_FIELDS:
        ok = isinstance(value, str)
    elif name in _INT_FIELDS:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:  # float fields accept ints, as JSON writes 2.0 as 2 in some producers
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok:
        raise ValueError(f"RunResult.{name}: unexpected {type(value).__name__} {value!r}")


# ----------------------------------------------------------------------------- the table

@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    better: str  # "lower" or "higher"
    # "relative": Δ = mean / baseline - 1. "absolute": Δ = mean - baseline, in `unit`, for a
    # figure that is itself a difference (host memory since launch: the baseline's few GiB
    # would make any host placement thousands of percent).
    delta: str = "relative"


WEIGHTS = Metric("weights_gb", "weights per GPU", "GB", "lower")
KV = Metric("kv_tokens", "KV capacity", "tokens", "higher")
KV_RATIO = Metric("kv_ratio", "KV capacity vs baseline", "x", "higher")
HOST = Metric("host_delta_gib", "host memory delta", "GiB", "lower", delta="absolute")
READY = Metric("ready_s", "time to ready", "s", "lower")
TTFT = Metric("ttft_mean_ms", "mean TTFT", "ms", "lower")
TPOT = Metric("tpot_mean_ms", "mean TPOT", "ms", "lower")
THROUGHPUT = Metric("output_tok_s", "output throughput", "tok/s", "higher")
# The price's currency; "$" because that is how per-GPU-hour prices are usually quoted.
COST = Metric("cost_per_mtok", "cost per million output tokens", "$/Mtok", "lower")


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


# How each row reads one trial. The table shows latencies in ms, as the seed and
# bench_serving do; RunResult keeps seconds.
_EXTRACT: dict[str, Callable[[RunResult], float | None]] = {
    WEIGHTS.key: lambda r: r.weights_gb,
    KV.key: lambda r: None if r.kv_tokens is None else float(r.kv_tokens),
    HOST.key: lambda r: r.host_delta_gib,
    READY.key: lambda r: r.ready_s,
    TTFT.key: lambda r: _ms(r.ttft_mean_s),
    TPOT.key: lambda r: _ms(r.tpot_mean_s),
    THROUGHPUT.key: lambda r: r.output_tok_s,
}


@dataclass(frozen=True)
class Interval:
    """95% interval of the delta, in the delta's terms (a fraction, or the metric's unit)."""

    lo: float
    hi: float
    method: str  # "paired" (by trial index) or "welch"
    df: float | None  # degrees of freedom; None when the spread is zero on both sides


@dataclass(frozen=True)
class Cell:
    n: int  # trials that measured this metric
    mean: float | None
    delta: float | None = None  # see Metric.delta; None in the baseline column
    interval: Interval | None = None
    spans_zero: bool | None = None  # the interval holds 0: smaller than the noise


@dataclass(frozen=True)
class SeedFigure:
    """One figure from seeds/ for the reference column."""

    placement: str
    value: float
    source: str  # seed, derived, assumption, fitted
    note: str = ""
    is_delta: bool = False  # a relative change against the seed's device placement

    @property
    def assumed(self) -> bool:
        return self.source == "assumption"


@dataclass(frozen=True)
class Row:
    metric: Metric
    cells: dict[str, Cell]  # by scenario
    reference: tuple[SeedFigure, ...] = ()


@dataclass(frozen=True)
class Comparison:
    baseline: str
    scenarios: tuple[str, ...]  # first-seen order, baseline included
    trials: dict[str, int]  # RunResults per scenario
    rows: tuple[Row, ...]
    price_per_gpu_hour: float | None = None
    reference_path: str | None = None  # the seeds file behind the reference column

    def row(self, key: str) -> Row:
        for row in self.rows:
            if row.metric.key == key:
                return row
        raise KeyError(key)


def compare(results: list[RunResult], baseline: str, *,
            price_per_gpu_hour: float | None = None,
            reference: Reference | None = None) -> Comparison:
    """Tabulate results per scenario against `baseline` (a scenario name)."""
    scenarios = _scenarios(results)
    if baseline not in scenarios:
        raise ValueError(f"baseline {baseline!r} is not among the scenarios {list(scenarios)}")
    if price_per_gpu_hour is not None and price_per_gpu_hour < 0:
        raise ValueError(f"price_per_gpu_hour must not be negative, got {price_per_gpu_hour}")
    by_scenario = {s: [r for r in results if r.scenario == s] for s in scenarios}
    placements = _placements(results, reference)

    rows: list[Row] = []
    for metric in (WEIGHTS, KV, KV_RATIO, HOST, READY, TTFT, TPOT, THROUGHPUT):
        if metric is KV_RATIO:
            cells = _ratio_cells(rows[-1], baseline)
        else:
            cells = _cells(by_scenario, baseline, _EXTRACT[metric.key],
                           absolute=metric.delta == "absolute")
        rows.append(Row(metric, cells, _seed_figures(metric, reference, placements)))
    if price_per_gpu_hour is not None:
        price = price_per_gpu_hour
        cells = _cells(by_scenario, baseline, lambda r: _cost(r, price))
        rows.append(Row(COST, cells))
    return Comparison(
        baseline=baseline, scenarios=scenarios,
        trials={s: len(rs) for s, rs in by_scenario.items()}, rows=tuple(rows),
        price_per_gpu_hour=price_per_gpu_hour,
        reference_path=None if reference is None else str(reference.path),
    )


def _scenarios(results: Sequence[RunResult]) -> tuple[str, ...]:
    if not results:
        raise ValueError("no results to compare")
    return tuple(dict.fromkeys(r.scenario for r in results))


def _cost(r: RunResult, price_per_gpu_hour: float) -> float | None:
    # Per trial, so the cost row gets the same interval treatment as the throughput it comes from.
    if r.gpus is None or not r.output_tok_s:
        return None
    return price_per_gpu_hour * r.gpus / 3600.0 / r.output_tok_s * 1e6


def _cells(by_scenario: dict[str, list[RunResult]], baseline: str,
           extract: Callable[[RunResult], float | None], *,
           absolute: bool = False) -> dict[str, Cell]:
    samples = {s: _samples(rs, extract) for s, rs in by_scenario.items()}
    base = samples[baseline]
    out = {}
    for scenario, sample in samples.items():
        if scenario == baseline:
            out[scenario] = Cell(len(sample), _mean(_values(sample)))
        else:
            out[scenario] = _delta_cell(sample, base, absolute)
    return out


def _samples(results: list[RunResult],
             extract: Callable[[RunResult], float | None]) -> dict[int, float] | list[float]:
    """Values by trial index; a plain list when trial indices repeat (then no pairing)."""
    pairs = [(r.trial, v) for r in results if (v := extract(r)) is not None]
    trials = [t for t, _ in pairs]
    if len(set(trials)) == len(trials):
        return dict(pairs)
    return [v for _, v in pairs]


def _values(sample: dict[int, float] | list[float]) -> list[float]:
    return list(sample.values()) if isinstance(sample, dict) else list(sample)


def _delta_cell(sample: dict[int, float] | list[float],
                base: dict[int, float] | list[float], absolute: bool = False) -> Cell:
    xs, bs = _values(sample), _values(base)
    mean, base_mean = _mean(xs), _mean(bs)
    if mean is None or base_mean is None or (base_mean == 0 and not absolute):
        return Cell(len(xs), mean)
    delta = mean - base_mean if absolute else mean / base_mean - 1.0
    interval = None
    if len(xs) >= 2 and len(bs) >= 2:
        if isinstance(sample, dict) and isinstance(base, dict) and sample.keys() == base.keys():
            interval = _paired(sample, base, absolute)
        else:
            interval = _welch(xs, bs, absolute)
    spans = None if interval is None else interval.lo <= 0.0 <= interval.hi
    return Cell(len(xs), mean, delta, interval, spans)


def _paired(sample: dict[int, float], base: dict[int, float],
            absolute: bool = False) -> Interval | None:
    """Same trials on both sides: the delta of each pair, then a t-interval. Pairing
    removes what the two runs of one trial share (the node's state, the prompts)."""
    if absolute:
        rel = [sample[t] - base[t] for t in sorted(base)]
    elif any(base[t] == 0 for t in base):
        return None
    else:
        rel = [sample[t] / base[t] - 1.0 for t in sorted(base)]
    n = len(rel)
    m = sum(rel) / n
    half = t95(n - 1) * math.sqrt(_var(rel) / n)
    return Interval(m - half, m + half, "paired", float(n - 1))


def _welch(xs: list[float], bs: list[float], absolute: bool = False) -> Interval:
    """Unequal trial sets: Welch's interval on the difference of means, divided by the
    baseline mean so it reads as a relative delta like the point estimate (not divided for
    an absolute delta)."""
    mx, mb = sum(xs) / len(xs), sum(bs) / len(bs)
    scale = 1.0 if absolute else mb
    vx, vb = _var(xs) / len(xs), _var(bs) / len(bs)
    se = math.sqrt(vx + vb)
    diff = mx - mb
    if se == 0:
        return Interval(diff / scale, diff / scale, "welch", None)
    # Welch-Satterthwaite; the t table is by whole df, so round down (the wider interval).
    df = (vx + vb) ** 2 / (vx**2 / (len(xs) - 1) + vb**2 / (len(bs) - 1))
    half = t95(max(1, math.floor(df))) * se
    lo, hi = (diff - half) / scale, (diff + half) / scale
    return Interval(min(lo, hi), max(lo, hi), "welch", df)


def t95(df: int) -> float:
    """Two-sided 95% Student t critical value for df degrees of freedom (1.96 beyond 30)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T95[df - 1] if df <= len(_T95) else _Z95


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _var(values: list[float]) -> float:
    """Sample variance (n - 1)."""
    m = sum(values) / len(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1)


def _ratio_cells(kv_row: Row, baseline: str) -> dict[str, Cell]:
    """KV capacity over the baseline's, as the seed's 3.606x. No interval: the pool size is
    fixed by the allocator, not sampled."""
    base = kv_row.cells[baseline].mean
    out = {}
    for scenario, cell in kv_row.cells.items():
        ratio = None if cell.mean is None or not base else cell.mean / base
        out[scenario] = Cell(cell.n, ratio)
    return out


# ----------------------------------------------------------------------------- seed column

# Placement fields behind each memory/start-up row, named as in seeds/ (for provenance).
_SEED_FIELDS: dict[str, tuple[str, Callable[[Placement], float]]] = {
    WEIGHTS.key: ("weights_gb_per_gpu", lambda p: p.weights_gib),
    KV.key: ("kv_tokens", lambda p: float(p.kv_tokens)),
    HOST.key: ("host_delta_gib", lambda p: p.host_delta_gib),
    READY.key: ("ready_s", lambda p: p.ready_s),
}
# The seed's deltas (against device) by the row they belong to.
_SEED_DELTAS = {TTFT.key: "ttft_mean", TPOT.key: "tpot_mean", THROUGHPUT.key: "output_throughput"}
_SEED_BASE = "device"  # what the seed's deltas and KV ratio are relative to


def _placements(results: Sequence[RunResult], reference: Reference | None) -> tuple[str, ...]:
    """Placements the reference column covers: those the runs name, else all the seed has."""
    if reference is None:
        return ()
    named = [r.placement for r in results if r.placement in reference.placements]
    return tuple(dict.fromkeys(named)) or tuple(reference.placements)


def _seed_figures(metric: Metric, reference: Reference | None,
                  placements: tuple[str, ...]) -> tuple[SeedFigure, ...]:
    if reference is None:
        return ()
    if metric.key in _SEED_FIELDS:
        return _seed_values(metric.key, reference, placements)
    if metric is KV_RATIO:
        return _seed_kv_ratio(reference, placements)
    if metric.key in _SEED_DELTAS:
        return _seed_deltas(_SEED_DELTAS[metric.key], reference, placements)
    return ()


def _seed_values(key: str, reference: Reference,
                 placements: tuple[str, ...]) -> tuple[SeedFigure, ...]:
    name, get = _SEED_FIELDS[key]
    provenance = reference.figures()["placements"]
    out = []
    for p in placements:
        fig = provenance.get(p, {}).get(name, {})
        out.append(SeedFigure(p, get(reference.placements[p]), fig.get("source", "seed"),
                              fig.get("note", "")))
    return tuple(out)


def _seed_kv_ratio(reference: Reference,
                   placements: tuple[str, ...]) -> tuple[SeedFigure, ...]:
    device = reference.placements.get(_SEED_BASE)
    if device is None:
        return ()
    how = "placement KV tokens / device KV tokens (seeds [derived].kv_ratio for host)"
    return tuple(
        SeedFigure(p, reference.placements[p].kv_tokens / device.kv_tokens, "derived", how)
        for p in placements if p != _SEED_BASE
    )


def _seed_deltas(key: str, reference: Reference,
                 placements: tuple[str, ...]) -> tuple[SeedFigure, ...]:
    out = []
    for p in placements:
        fig = reference.deltas(p).get(key)
        if fig is not None:
            out.append(SeedFigure(p, float(fig.value), fig.source, fig.note, is_delta=True))
    return tuple(out)


# ----------------------------------------------------------------------------- output

def to_json(c: Comparison) -> dict[str, Any]:
    """Plain JSON types only (None for anything not measured)."""
    return {
        "baseline": c.baseline,
        "scenarios": list(c.scenarios),
        "trials": dict(c.trials),
        "price_per_gpu_hour": c.price_per_gpu_hour,
        "reference_path": c.reference_path,
        "rows": [_row_json(row) for row in c.rows],
    }


def _row_json(row: Row) -> dict[str, Any]:
    return {
        **asdict(row.metric),
        "cells": {s: asdict(cell) for s, cell in row.cells.items()},
        "reference": [{**asdict(f), "assumed": f.assumed} for f in row.reference],
    }


def to_markdown(c: Comparison) -> str:
    """The comparison as a Markdown table in the seed's terms."""
    has_ref = any(row.reference for row in c.rows) or c.reference_path is not None
    head = ["metric", "unit", "better"]
    head += [f"{s} (baseline)" if s == c.baseline else s for s in c.scenarios]
    if has_ref:
        head.append("seed reference")
    lines = [_header_line(c), "", _md_row(head), _md_row(["---"] * len(head))]
    noisy = assumed = False
    for row in c.rows:
        cells = [row.metric.label, row.metric.unit, row.metric.better]
        for s in c.scenarios:
            cell = row.cells[s]
            cells.append(_fmt_cell(row.metric, cell, c.trials[s]))
            noisy = noisy or bool(cell.spans_zero)
        if has_ref:
            cells.append(_fmt_reference(row))
            assumed = assumed or any(f.assumed for f in row.reference)
        lines.append(_md_row(cells))
    lines += ["", *_footnotes(c, noisy, assumed)]
    return "\n".join(lines) + "\n"


def _header_line(c: Comparison) -> str:
    counts = set(c.trials.values())
    if len(counts) == 1:
        trials = f"{counts.pop()} trial(s) per scenario"
    else:
        trials = "trials " + ", ".join(f"{s} {n}" for s, n in c.trials.items())
    return (f"Baseline: {c.baseline}; {trials}. Cells: mean over trials "
            f"(Δ relative change of the mean vs {c.baseline} [95% interval]; host memory "
            f"delta: Δ in GiB).")


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _fmt_cell(metric: Metric, cell: Cell, trials: int) -> str:
    if cell.mean is None:
        return "n/a"
    text = _fmt_value(metric, cell.mean)
    if cell.delta is not None:
        show = (lambda v: f"{v:+.1f} {metric.unit}") if metric.delta == "absolute" else _pct
        delta = f"Δ {show(cell.delta)}"
        if cell.interval is not None:
            delta += f" [{show(cell.interval.lo)}, {show(cell.interval.hi)}]"
        text += f" ({delta})"
        if cell.spans_zero:
            # A trailing " ~" with spaces round it never opens Markdown strikethrough.
            text += " ~"
    if cell.n != trials:
        text += f" (n={cell.n})"
    return text


def _fmt_value(metric: Metric, value: float) -> str:
    if metric is KV:
        return f"{value / 1e6:.2f}M"  # the seed writes 11.84M, 42.70M
    if metric is KV_RATIO:
        return f"{value:.3f}x"
    if metric is WEIGHTS:
        return f"{value:.3f}"  # SGLang prints weights to 3 decimals
    if metric is HOST or metric is THROUGHPUT:
        return f"{value:.1f}"
    if metric is COST:
        return f"{value:.4f}"
    return f"{value:.2f}"


def _pct(fraction: float) -> str:
    return f"{fraction * 100:+.2f}%"


def _fmt_reference(row: Row) -> str:
    parts = []
    for f in row.reference:
        if f.is_delta:
            value = f"{_pct(f.value)} vs {_SEED_BASE}"
        else:
            value = _fmt_value(row.metric, f.value)
            if row.metric is KV_RATIO:
                value += f" vs {_SEED_BASE}"
        parts.append(f"{f.placement} {value}{'†' if f.assumed else ''}")
    return " · ".join(parts) if parts else ""


def _footnotes(c: Comparison, noisy: bool, assumed: bool) -> list[str]:
    notes = ["Intervals: paired by trial index (t, n-1 df) when both scenarios ran the same "
             "trials, else Welch on the difference of means over the baseline mean.",
             "GB is SGLang's label for weights; it computes GiB."]
    if noisy:
        notes.append("~ the 95% interval spans zero: the difference is smaller than the "
                     "trial-to-trial noise.")
    if assumed:
        where = PurePath(c.reference_path).name if c.reference_path else "seeds/"
        notes.append(f"† assumption: the seed does not give this figure ({where} says why).")
    if c.price_per_gpu_hour is not None:
        notes.append(f"Cost at {c.price_per_gpu_hour:g} per GPU-hour x the run's GPUs.")
    return notes
