"""A comparison as Markdown: the table (a column per scenario, a row per figure, the seed's
figures beside them), then its footnotes (how the intervals were made, what is assumed,
which runs warmed up, ran throttled or came from a quick bench, and what each column of
another workload is compared with)."""

from __future__ import annotations

from pathlib import PurePath

from collectors.safetext import table_cell, visible
from collectors.units import pct_change
from engram_top.compare.comparison import (
    MIXED_TPOT,
    PROBE_ROW,
    SEED_BASE,
    Cell,
    Comparison,
    Row,
    probe_cell,
    probe_note,
)
from engram_top.compare.measures import Metric
from engram_top.compare.run_result import QUICK_CAVEAT, THROTTLED


def to_markdown(c: Comparison) -> str:
    """The comparison as a Markdown table in the seed's terms."""
    has_ref = any(row.reference for row in c.rows) or c.reference_path is not None
    head = ["metric", "unit", "better"]
    head += [f"{s} (baseline)" if s == c.baseline else
             f"{s} (its file's baseline)" if c.against.get(s) == s else s
             for s in c.scenarios]
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
    if c.windows:  # what a live column's latencies were measured over
        lines.append(_md_row(["measured over", "", ""]
                             + [c.windows.get(s, "–") for s in c.scenarios]
                             + ([""] if has_ref else [])
                             + ([""] if c.probe is not None else [])))
    noisy = assumed = False
    for row in c.rows:
        label = row.metric.label + (" ‡" if c.mixed_engines and row.metric.engine_note else "")
        cells = [label, row.metric.unit, row.metric.better]
        for s in c.scenarios:
            cell = row.cells[s]
            cells.append("warming up" if cell.mean is None and s in c.warming
                         else _fmt_cell(row.metric, cell, c.trials[s]))
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
            value = f"{pct_change(f.value)} vs {SEED_BASE}"
        else:
            value = row.metric.fmt(f.value)
            if row.metric.ratio_of is not None:
                value += f" vs {SEED_BASE}"
        parts.append(f"{f.placement} {value}{'†' if f.assumed else ''}")
    return " · ".join(parts) if parts else ""


def _footnotes(c: Comparison, noisy: bool, assumed: bool) -> list[str]:
    notes = ["Intervals (95%): paired by trial index (t on each pair's change, n-1 df) when "
             "both scenarios ran the same trials; else Welch's t on the difference, and for a "
             "relative change Fieller's interval of the ratio of the means, which counts the "
             "baseline mean's own noise (none where that noise leaves the ratio unbounded)."]
    notes += [row.metric.note for row in c.rows if row.metric.note]
    if c.mixed_engines:
        notes += [f"‡ not the same figure on both engines: {row.metric.engine_note}."
                  for row in c.rows if row.metric.engine_note]
        notes.append(MIXED_TPOT)
    notes += [f"⚠ {s} {THROTTLED}: {'; '.join(t)}." for s, t in c.throttled.items()]
    if c.quick:
        notes.append(f"⚠ {', '.join(c.quick)}: {QUICK_CAVEAT}.")
    notes += [f"{s}: against {b}, of the same file (another workload than {c.baseline}'s: "
              "never compared across workloads)." for s, b in c.against.items() if b != s]
    notes += [f"{s}: no change shown: {why}." for s, why in c.unpaired.items()]
    notes += [f"{s}: warming up ({why}): its latency and throughput are left out until its "
              "run has served a whole window since ready with enough requests in it."
              for s, why in c.warming.items()]
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
