"""Compare placement runs the way the seed thread does: per-scenario means, relative deltas
against a baseline with 95% intervals, and the seed's own figures beside them.

Pure functions over RunResult records; no Textual, no I/O (engram_top.record.importers reads files).
The rows are the metrics registered in engram_top.compare.measures, each read from every trial.
A missing value stays None all the way to the table: a run that did not measure something
must never read as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import PurePath
from typing import Any

from collectors.units import pct_change
from engram_top.compare import stats
from engram_top.compare.measures import METRICS, TPOT, Metric, Registry
from engram_top.compare.run_result import QUICK, THROTTLED, WARMING, RunResult
from engram_top.compare.stats import Interval
from engram_top.probe.report import HOST_MODES, ProbeReport
from engram_top.seed.reference import Reference

# ----------------------------------------------------------------------------- run records

def _throttled(results: list[RunResult]) -> tuple[str, ...]:
    return tuple(f"trial {r.trial + 1}: {note[len(THROTTLED):].lstrip(': ')}"
                 for r in results for note in r.notes if note.startswith(THROTTLED))


def _warming(results: list[RunResult]) -> str | None:
    """Why a scenario's every trial has no latency yet (the last one's reason), else None."""
    why = [next((n[len(WARMING):].lstrip(": ") for n in r.notes if n.startswith(WARMING)),
                None) for r in results]
    return why[-1] if why and None not in why else None


# Said under any comparison of two engines: their TPOTs are the same figure here.
MIXED_TPOT = ("TPOT is the same figure on both engines: the client's (bench_serving's "
              "definition) in a bench, each server's inter-token latency histogram live; "
              "vLLM's per-request request_time_per_output_token is shown apart, never "
              "compared.")


# ----------------------------------------------------------------------------- the table

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
    # Live scenarios: what their latencies were measured over ("30 s window, 412
    # requests"), and why one whose every run is warming up has none yet (compare.runs).
    windows: dict[str, str] = field(default_factory=dict)
    warming: dict[str, str] = field(default_factory=dict)
    # Scenarios whose runs come from a `bench --quick` (QUICK): said wherever it is shown.
    quick: tuple[str, ...] = ()
    # Columns of another workload than the baseline's (a file's runs beside live ones): each
    # against its own workload's baseline (`against`: column -> that baseline; a workload's
    # baseline maps to itself), or against none, with the reason (`unpaired`). Never a
    # change across two workloads.
    against: dict[str, str] = field(default_factory=dict)
    unpaired: dict[str, str] = field(default_factory=dict)

    def baseline_of(self, scenario: str) -> str | None:
        """The column ``scenario``'s changes are against; None where it has none (its own
        workload's baseline, or a workload without one)."""
        if scenario in self.unpaired:
            return None
        base = self.against.get(scenario, self.baseline)
        return None if base == scenario else base

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
            probe: ProbeReport | None = None,
            workloads: Mapping[str, str] | None = None) -> Comparison:
    """Tabulate results per scenario against `baseline` (a scenario name): a row per metric
    of `metrics`, in its order; a priced one only when there is a price. ``workloads``: each
    scenario's workload where they differ (a file's runs: the file); a scenario of another
    workload than the baseline's is compared with its own workload's run of the baseline's
    placement (workload_baselines), never across workloads."""
    scenarios = _scenarios(results)
    if baseline not in scenarios:
        raise ValueError(f"baseline {baseline!r} is not among the scenarios {list(scenarios)}")
    if price_per_gpu_hour is not None and price_per_gpu_hour < 0:
        raise ValueError(f"price_per_gpu_hour must not be negative, got {price_per_gpu_hour}")
    by_scenario = {s: [r for r in results if r.scenario == s] for s in scenarios}
    placements = _placements(results, reference)
    # Each column's placement, where its runs name one (a bench_serving file does not).
    named = {s: p for s, rs in by_scenario.items()
             if (p := next((r.placement for r in rs if r.placement), None))}
    against, unpaired = workload_baselines(scenarios, named, baseline, workloads or {})
    bases = {s: against.get(s, baseline) for s in scenarios if s not in unpaired}

    rows: dict[str, Row] = {}
    for metric in metrics:
        if metric.ratio_of is not None:
            cells = _ratio_cells(rows[metric.ratio_of], bases)
        elif metric.priced is not None and price_per_gpu_hour is None:
            continue
        else:
            cells = _cells(by_scenario, bases, _extractor(metric, price_per_gpu_hour),
                           absolute=metric.delta == "absolute")
        rows[metric.key] = Row(metric, cells,
                               _seed_figures(metric, reference, placements, metrics))
    return Comparison(
        baseline=baseline, scenarios=scenarios,
        trials={s: len(rs) for s, rs in by_scenario.items()}, rows=tuple(rows.values()),
        price_per_gpu_hour=price_per_gpu_hour,
        reference_path=None if reference is None else str(reference.path),
        placements=named,
        throttled={s: t for s, rs in by_scenario.items() if (t := _throttled(rs))},
        warming={s: w for s, rs in by_scenario.items() if (w := _warming(rs))},
        quick=tuple(s for s, rs in by_scenario.items()
                    if any(n.startswith(QUICK) for r in rs for n in r.notes)),
        against=against, unpaired=unpaired,
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


def workload_baselines(scenarios: Sequence[str], placements: Mapping[str, str], baseline: str,
                       workloads: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Each column of another workload than ``baseline``'s: its own workload's column of the
    baseline's placement (else its device column), or, where it has none, why it is compared
    with nothing (as Comparison.against and .unpaired)."""
    home, want = workloads.get(baseline, ""), placements.get(baseline)
    against: dict[str, str] = {}
    unpaired: dict[str, str] = {}
    for s in scenarios:
        where = workloads.get(s, "")
        if where == home:
            continue
        members = [x for x in scenarios if workloads.get(x, "") == where]
        pick = next((x for x in members if want and placements.get(x) == want), None) or \
            next((x for x in members if placements.get(x) == "device"), None)
        if pick is not None:
            against[s] = pick
        else:
            unpaired[s] = (f"{where} has no {want or baseline} run to compare it with, and "
                           f"{baseline} ran another workload")
    return against, unpaired


def _cells(by_scenario: dict[str, list[RunResult]], bases: Mapping[str, str],
           extract: Callable[[RunResult], float | None], *,
           absolute: bool = False) -> dict[str, Cell]:
    """Each column's mean, and its change against its baseline (``bases``; none for a
    baseline itself, or a column that has none)."""
    samples = {s: _samples(rs, extract) for s, rs in by_scenario.items()}
    out = {}
    for scenario, sample in samples.items():
        base = bases.get(scenario, scenario)
        if base == scenario:
            out[scenario] = Cell(len(sample), stats.mean(_values(sample)))
        else:
            out[scenario] = _delta_cell(sample, samples[base], absolute)
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
    mean, base_mean = stats.mean(xs), stats.mean(bs)
    if mean is None or base_mean is None or (base_mean == 0 and not absolute):
        return Cell(len(xs), mean)
    delta = mean - base_mean if absolute else mean / base_mean - 1.0
    interval = None
    if len(xs) >= 2 and len(bs) >= 2:
        if isinstance(sample, dict) and isinstance(base, dict) and sample.keys() == base.keys():
            interval = stats.paired(sample, base, absolute)
        else:
            interval = stats.welch(xs, bs, absolute)
    spans = None if interval is None else interval.lo <= 0.0 <= interval.hi
    return Cell(len(xs), mean, delta, interval, spans)


def _ratio_cells(of: Row, bases: Mapping[str, str]) -> dict[str, Cell]:
    """A row's means over each column's baseline's, as the seed's KV capacity 3.606x. No
    interval: the KV pool's size is fixed by the allocator, not sampled."""
    out = {}
    for scenario, cell in of.cells.items():
        base = of.cells[bases[scenario]].mean if scenario in bases else None
        ratio = None if cell.mean is None or not base else cell.mean / base
        out[scenario] = Cell(cell.n, ratio)
    return out


# ----------------------------------------------------------------------------- seed column

# Each metric names its seed figure (Metric.seed_field, seed_delta).
SEED_BASE = "device"  # what the seed's deltas and KV ratio are relative to


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
    device = reference.placements.get(SEED_BASE)
    get = of.seed_value
    if device is None or get is None:
        return ()
    return tuple(
        SeedFigure(p, get(reference.placements[p]) / get(device), "derived", metric.seed_note)
        for p in placements if p != SEED_BASE
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
        "windows": dict(c.windows),
        "warming": dict(c.warming),
        "quick": list(c.quick),
        "against": dict(c.against),
        "unpaired": dict(c.unpaired),
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
