"""Compare placement runs the way the seed thread does: per-scenario means, relative deltas
against a baseline with 95% intervals, and the seed's own figures beside them.

Pure functions over RunResult records; no Textual, no I/O (engram_top.record.importers reads files).
The rows are the metrics registered in engram_top.compare.measures, each read from every trial.
A missing value stays None all the way to the table: a run that did not measure something
must never read as 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import PurePath
from typing import Any

from collectors.safetext import table_cell, visible
from collectors.units import pct_change
from engram_top.compare.measures import METRICS, TPOT, Metric, Registry
from engram_top.probe.report import HOST_MODES, ProbeReport
from engram_top.seed.reference import Reference

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
    # Measurements: None when the trial did not measure it (a bench_serving file has no
    # weights; a server that never became ready has nothing).
    gpus: int | None = None
    weights_gb: float | None = None
    kv_tokens: int | None = None
    host_delta_gib: float | None = None
    ready_s: float | None = None  # node time
    ttft_mean_s: float | None = None
    tpot_mean_s: float | None = None
    itl_mean_s: float | None = None
    e2e_mean_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    # Medians: where only quantiles exist (a fleet through Prometheus's histograms).
    ttft_p50_s: float | None = None
    tpot_p50_s: float | None = None
    output_tok_s: float | None = None
    joules_per_token: float | None = None  # the GPUs' energy per output token
    request_per_s: float | None = None
    # Requests per second within every SLO of the bench plan, and their share (0..1).
    goodput_rps: float | None = None
    slo_attainment: float | None = None
    completed: int = 0
    failed: int = 0
    duration_s: float | None = None
    notes: tuple[str, ...] = ()
    # The engine that served it ("SGLang", "vLLM", "vLLM (simulated)"); None where the
    # source does not say (reports written before engines were named).
    engine: str | None = None

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
_STR_FIELDS = {"scenario", "placement", "source", "engine"}
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


# A RunResult note that starts so says a GPU's clocks were held down while the run served
# ("throttled while serving: GPU 2 sw_power_cap"): the comparison flags that run.
THROTTLED = "throttled while serving"


def _throttled(results: list[RunResult]) -> tuple[str, ...]:
    return tuple(f"trial {r.trial + 1}: {note[len(THROTTLED):].lstrip(': ')}"
                 for r in results for note in r.notes if note.startswith(THROTTLED))


# Said under any comparison of two engines: their TPOTs are the same figure here.
MIXED_TPOT = ("TPOT is the same figure on both engines: the client's (bench_serving's "
              "definition) in a bench, each server's inter-token latency histogram live; "
              "vLLM's per-request request_time_per_output_token is shown apart, never "
              "compared.")


# ----------------------------------------------------------------------------- the table

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
    # Each scenario's placement, where its runs name one (a bench_serving file does not).
    placements: dict[str, str] = field(default_factory=dict)
    # Each scenario's trials that ran on a throttled GPU: "trial 2: GPU 1 sw_power_cap".
    throttled: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Each scenario's engine, where its runs name one.
    engines: dict[str, str] = field(default_factory=dict)
    # What an `engram-top probe` predicted (a column of its own, never a measured cell).
    probe: ProbeReport | None = None

    @property
    def mixed_engines(self) -> bool:
        """Runs of more than one engine: rows whose figure means something else on each
        are marked (Metric.engine_note)."""
        return len({e.split(" (")[0] for e in self.engines.values()}) > 1

    def engine_placement(self, scenario: str) -> str:
        """"vLLM · host-prefetch": which engine and placement a column is."""
        parts = [self.engines.get(scenario), self.placements.get(scenario)]
        return " · ".join(p for p in parts if p) or "–"

    def row(self, key: str) -> Row:
        for row in self.rows:
            if row.metric.key == key:
                return row
        raise KeyError(key)


def compare(results: list[RunResult], baseline: str, *,
            price_per_gpu_hour: float | None = None,
            reference: Reference | None = None, metrics: Registry = METRICS,
            probe: ProbeReport | None = None) -> Comparison:
    """Tabulate results per scenario against `baseline` (a scenario name): a row per metric
    of `metrics`, in its order; a priced one only when there is a price."""
    scenarios = _scenarios(results)
    if baseline not in scenarios:
        raise ValueError(f"baseline {baseline!r} is not among the scenarios {list(scenarios)}")
    if price_per_gpu_hour is not None and price_per_gpu_hour < 0:
        raise ValueError(f"price_per_gpu_hour must not be negative, got {price_per_gpu_hour}")
    by_scenario = {s: [r for r in results if r.scenario == s] for s in scenarios}
    placements = _placements(results, reference)

    rows: dict[str, Row] = {}
    for metric in metrics:
        if metric.ratio_of is not None:
            cells = _ratio_cells(rows[metric.ratio_of], baseline)
        elif metric.priced is not None and price_per_gpu_hour is None:
            continue
        else:
            cells = _cells(by_scenario, baseline, _extractor(metric, price_per_gpu_hour),
                           absolute=metric.delta == "absolute")
        rows[metric.key] = Row(metric, cells,
                               _seed_figures(metric, reference, placements, metrics))
    return Comparison(
        baseline=baseline, scenarios=scenarios,
        trials={s: len(rs) for s, rs in by_scenario.items()}, rows=tuple(rows.values()),
        price_per_gpu_hour=price_per_gpu_hour,
        reference_path=None if reference is None else str(reference.path),
        placements={s: p for s, rs in by_scenario.items()
                    if (p := next((r.placement for r in rs if r.placement), None))},
        throttled={s: t for s, rs in by_scenario.items() if (t := _throttled(rs))},
        engines={s: e for s, rs in by_scenario.items()
                 if (e := next((r.engine for r in rs if r.engine), None))},
        probe=probe,
    )


def _extractor(metric: Metric,
               price: float | None) -> Callable[[RunResult], float | None]:
    """How the metric reads one trial, the price bound in for a priced one."""
    priced = metric.priced
    if priced is not None and price is not None:
        return lambda r: priced(r, price)
    assert metric.extract is not None  # Metric refuses a metric with no way to read it
    return metric.extract


def _scenarios(results: Sequence[RunResult]) -> tuple[str, ...]:
    if not results:
        raise ValueError("no results to compare")
    return tuple(dict.fromkeys(r.scenario for r in results))


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


def _ratio_cells(of: Row, baseline: str) -> dict[str, Cell]:
    """A row's means over the baseline's, as the seed's KV capacity 3.606x. No interval: the
    KV pool's size is fixed by the allocator, not sampled."""
    base = of.cells[baseline].mean
    out = {}
    for scenario, cell in of.cells.items():
        ratio = None if cell.mean is None or not base else cell.mean / base
        out[scenario] = Cell(cell.n, ratio)
    return out


# ----------------------------------------------------------------------------- seed column

# Each metric names its seed figure (Metric.seed_field, seed_delta).
_SEED_BASE = "device"  # what the seed's deltas and KV ratio are relative to


def _placements(results: Sequence[RunResult], reference: Reference | None) -> tuple[str, ...]:
    """Placements the reference column covers: those the runs name, else all the seed has."""
    if reference is None:
        return ()
    named = [r.placement for r in results if r.placement in reference.placements]
    return tuple(dict.fromkeys(named)) or tuple(reference.placements)


def _seed_figures(metric: Metric, reference: Reference | None, placements: tuple[str, ...],
                  metrics: Registry) -> tuple[SeedFigure, ...]:
    if reference is None:
        return ()
    if metric.seed_field is not None:
        return _seed_values(metric, reference, placements)
    if metric.ratio_of is not None:
        return _seed_ratio(metric, metrics[metric.ratio_of], reference, placements)
    if metric.seed_delta is not None:
        return _seed_deltas(metric.seed_delta, reference, placements)
    return ()


def _seed_values(metric: Metric, reference: Reference,
                 placements: tuple[str, ...]) -> tuple[SeedFigure, ...]:
    get = metric.seed_value
    assert get is not None  # Metric has one with every seed_field
    provenance = reference.figures()["placements"]
    out = []
    for p in placements:
        fig = provenance.get(p, {}).get(metric.seed_field, {})
        out.append(SeedFigure(p, get(reference.placements[p]), fig.get("source", "seed"),
                              fig.get("note", "")))
    return tuple(out)


def _seed_ratio(metric: Metric, of: Metric, reference: Reference,
                placements: tuple[str, ...]) -> tuple[SeedFigure, ...]:
    device = reference.placements.get(_SEED_BASE)
    get = of.seed_value
    if device is None or get is None:
        return ()
    return tuple(
        SeedFigure(p, get(reference.placements[p]) / get(device), "derived", metric.seed_note)
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
        "throttled": {s: list(t) for s, t in c.throttled.items()},
        "engines": dict(c.engines),
        "placements": dict(c.placements),
        # Rows whose figure means something else on each engine, and what (mixed runs).
        "engine_notes": {row.metric.key: row.metric.engine_note for row in c.rows
                         if c.mixed_engines and row.metric.engine_note},
        # Predictions, apart from the measured cells; null without a probe.
        "probe": None if c.probe is None else {
            **c.probe.to_json(), "label": c.probe.label(), "row": PROBE_ROW},
    }


def _row_json(row: Row) -> dict[str, Any]:
    return {
        **row.metric.json(),
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
    if c.probe is not None:
        head.append(c.probe.label())
    lines = [_header_line(c), "", _md_row(head), _md_row(["---"] * len(head))]
    if c.engines:  # which engine and placement each column is
        lines.append(_md_row(["engine · placement", "", ""]
                             + [c.engine_placement(s) for s in c.scenarios]
                             + ([""] if has_ref else [])
                             + ([""] if c.probe is not None else [])))
    noisy = assumed = False
    for row in c.rows:
        label = row.metric.label + (" ‡" if c.mixed_engines and row.metric.engine_note else "")
        cells = [label, row.metric.unit, row.metric.better]
        for s in c.scenarios:
            cell = row.cells[s]
            cells.append(_fmt_cell(row.metric, cell, c.trials[s]))
            noisy = noisy or bool(cell.spans_zero)
        if has_ref:
            cells.append(_fmt_reference(row))
            assumed = assumed or any(f.assumed for f in row.reference)
        if c.probe is not None:
            cells.append(probe_cell(c.probe) if row.metric.key == PROBE_ROW else "")
        lines.append(_md_row(cells))
    lines += ["", *_footnotes(c, noisy, assumed)]
    # Scenario names and notes come from files: each line stays one line, with no control.
    return "\n".join(map(visible, lines)) + "\n"


def _header_line(c: Comparison) -> str:
    counts = set(c.trials.values())
    if len(counts) == 1:
        trials = f"{counts.pop()} trial(s) per scenario"
    else:
        trials = "trials " + ", ".join(f"{s} {n}" for s, n in c.trials.items())
    deltas = [f"Δ relative change of the mean vs {c.baseline} [95% interval]"]
    deltas += [f"{row.metric.label}: Δ in {row.metric.unit}" for row in c.rows
               if row.metric.delta == "absolute"]
    return f"Baseline: {c.baseline}; {trials}. Cells: mean over trials ({'; '.join(deltas)})."


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(map(table_cell, cells)) + " |"


def _fmt_cell(metric: Metric, cell: Cell, trials: int) -> str:
    if cell.mean is None:
        return "n/a"
    text = metric.fmt(cell.mean)
    if cell.delta is not None:
        show = (lambda v: f"{v:+.1f} {metric.unit}") if metric.delta == "absolute" \
            else pct_change
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


def _fmt_reference(row: Row) -> str:
    parts = []
    for f in row.reference:
        if f.is_delta:
            value = f"{pct_change(f.value)} vs {_SEED_BASE}"
        else:
            value = row.metric.fmt(f.value)
            if row.metric.ratio_of is not None:
                value += f" vs {_SEED_BASE}"
        parts.append(f"{f.placement} {value}{'†' if f.assumed else ''}")
    return " · ".join(parts) if parts else ""


def _footnotes(c: Comparison, noisy: bool, assumed: bool) -> list[str]:
    notes = ["Intervals: paired by trial index (t, n-1 df) when both scenarios ran the same "
             "trials, else Welch on the difference of means over the baseline mean."]
    notes += [row.metric.note for row in c.rows if row.metric.note]
    if c.mixed_engines:
        notes += [f"‡ not the same figure on both engines: {row.metric.engine_note}."
                  for row in c.rows if row.metric.engine_note]
        notes.append(MIXED_TPOT)
    notes += [f"⚠ {s} {THROTTLED}: {'; '.join(t)}." for s, t in c.throttled.items()]
    if noisy:
        notes.append("~ the 95% interval spans zero: the difference is smaller than the "
                     "trial-to-trial noise.")
    if assumed:
        where = PurePath(c.reference_path).name if c.reference_path else "seeds/"
        notes.append(f"† assumption: the seed does not give this figure ({where} says why).")
    if c.probe is not None:
        notes.append(probe_note(c.probe))
    if c.price_per_gpu_hour is not None:
        notes.append(f"Cost at ${c.price_per_gpu_hour:g} per GPU-hour (US dollars, as GPU "
                     "hours are usually priced) x the run's GPUs.")
    return notes


# ----------------------------------------------------------------------------- probe column

PROBE_ROW = TPOT.key  # the one figure a probe predicts


def probe_cell(p: ProbeReport) -> str:
    """"batch 8: host +4.10%, host-prefetch +0.52% · batch 64: ..." (vs device)."""
    return " · ".join(
        f"batch {b.batch}: " + ", ".join(f"{m} {pct_change(b.predicted_tpot_change[m])}"
                                         for m in HOST_MODES)
        for b in p.batches) + " vs device"


def probe_note(p: ProbeReport) -> str:
    where = PurePath(p.path).name
    text = (f"Predicted by probe ({where}, {p.created}, {p.device_name}): each host "
            "placement's extra time per synthetic decode step over the device step, divided "
            f"by the device step; compute: {p.compute}. A prediction, not a measurement of "
            "these runs.")
    if not p.meaningful_for_placement:
        text += " ⚠ This probe ran on a CPU: its figures are not meaningful for placement."
    return text
