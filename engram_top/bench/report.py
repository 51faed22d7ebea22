"""report.md's per-level part: each level of each scenario as a row, a sweep's verdict (the
highest load within the SLOs, the crossover), the model beside the live levels, and the
charts."""

from __future__ import annotations

from typing import Any

from collectors.safetext import table_cell, visible
from engram_top.bench import sweep
from engram_top.bench.plan import Plan
from engram_top.compare.slo import LevelStats


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1000:,.0f}"


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}g}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def _interval(lv: LevelStats) -> str:
    if lv.goodput_rps is None:
        return "–"
    if lv.interval is None:
        return _num(lv.goodput_rps, 4)
    return f"{_num(lv.goodput_rps, 4)} [{_num(lv.interval[0], 3)}, {_num(lv.interval[1], 3)}]"


HEAD = ("| scenario | load | from | requests | out tok/s | TTFT p50 / p90 / p95 / p99 ms | "
        "TPOT p50 / p90 / p95 / p99 ms | E2E p99 s | goodput req/s [95%] | attainment | "
        "meets SLO | queue s | retracted | KV max / mean |")
# Goodput is requests within the SLOs: a plan without [slo] has no such column at all.
SLO_COLUMNS = " goodput req/s [95%] | attainment | meets SLO |"


def _head(with_slo: bool) -> str:
    return HEAD if with_slo else HEAD.replace(SLO_COLUMNS, "")


def _row(name: str, lv: LevelStats, with_slo: bool = True) -> str:
    t, p = lv.latency.get("ttft", {}), lv.latency.get("tpot", {})
    e2e = lv.latency.get("e2e", {}).get("p99")
    kv = "–" if lv.kv_usage_max is None else \
        f"{_pct(lv.kv_usage_max)} / {_pct(lv.kv_usage_mean)}"
    meets = "–" if lv.meets_slo is None else ("yes" if lv.meets_slo else "**no**")
    slo_cells = f"{_interval(lv)} | {_pct(lv.attainment)} | {meets} | " if with_slo else ""
    return (f"| {table_cell(name)} | {lv.load:g} | {'modelled' if lv.modelled else 'live'} | "
            f"{lv.requests + lv.failed} | {_num(lv.output_tok_s, 4)} | "
            f"{' / '.join(_ms(t.get(q)) for q in ('p50', 'p90', 'p95', 'p99'))} | "
            f"{' / '.join(_ms(p.get(q)) for q in ('p50', 'p90', 'p95', 'p99'))} | "
            f"{_num(e2e, 4)} | {slo_cells}"
            f"{_num(lv.queue_mean_s, 3)} | {'–' if lv.retractions is None else lv.retractions}"
            f" | {kv} |")


def levels_markdown(plan: Plan, levels: dict[str, list[LevelStats]],
                    summary: dict[str, Any] | None, charts: dict[str, list[str]],
                    why_no_charts: str) -> str:
    if not levels:
        return ""
    kinds = {lv.kind for lvs in levels.values() for lv in lvs}
    unit = "req/s" if kinds == {"rate"} else "concurrent requests"
    head = _head(bool(plan.slos))
    lines = ["", "## Per level", "",
             f"Load in {unit}" + (" (node time: Poisson arrivals)" if "rate" in kinds else "")
             + ". Latencies" + (" and goodput" if plan.slos else "") + " in node time"
             + ("; goodput's interval is Wilson's on the attainment (one trial) or a "
                "t-interval across trials" if plan.slos else
                "; no [slo] in the plan, so no goodput") + ". `modelled`: the "
             "simulator's scheduler in virtual time, not measured over HTTP.", "", head,
             "|" + "---|" * head.count(" | ") + "---|"]
    for name, lvs in levels.items():
        lines += [_row(name, lv, bool(plan.slos)) for lv in lvs]
    if summary is not None:
        lines += ["", "## The decision", ""]
        if summary["slo"]:
            lines.append(f"SLOs: {'; '.join(summary['slo'])}.")
            for name, load in summary["highest_within_slo"].items():
                lines.append(f"- {name}: highest load within the SLOs: "
                             + ("none (the lowest load already breaks them)" if load is None
                                else f"{load:g} {unit}"))
        for name, c in summary["crossover"].items():
            lines.append(f"- {sweep.crossover_sentence(name, c, unit)}")
        fidelity = [(name, lv) for name, lvs in levels.items() for lv in lvs if lv.model]
        if fidelity:
            lines += ["", "The model at the live loads, beside what was measured there:", "",
                      "| scenario | load | goodput live / model | TTFT p99 ms live / model | "
                      "TPOT p99 ms live / model |", "|---|---|---|---|---|"]
            for name, lv in fidelity:
                m = lv.model or {}
                lines.append(
                    f"| {table_cell(name)} | {lv.load:g} | {_num(lv.goodput_rps, 4)} / "
                    f"{_num(m.get('goodput_rps'), 4)} | {_ms(lv.latency['ttft']['p99'])} / "
                    f"{_ms(m.get('ttft_p99_s'))} | {_ms(lv.latency['tpot']['p99'])} / "
                    f"{_ms(m.get('tpot_p99_s'))} |")
    titles = {"goodput": "Goodput vs load", "latency": "TTFT and TPOT percentiles vs load",
              "kv_queue": "KV usage and queue vs load",
              "deltas": "Headline deltas against the baseline"}
    if charts:
        lines += ["", "## Charts", ""]
        for key, files in charts.items():
            png = next((f for f in files if f.endswith(".png")), None)
            if png:
                lines += [f"![{titles.get(key, key)}]({png})", ""]
    elif why_no_charts:
        lines += ["", why_no_charts]
    return "\n".join(map(visible, lines)) + "\n"
