"""The bench's paired A/B: the order of each round, the paired estimates of every scenario
against the baseline from the bench's own rows, the stop rule, and report.md's section.

Rounds alternate (A B, B A, A B ...; with three scenarios A B C, C B A ...), so neither side
always runs first, after the same neighbour or at the same point of a drift. Each round
starts every scenario afresh and sends every scenario the same requests, drawn for that round
(the plan's seed, then the next); start-up, the switch and the warm-up requests are not
measured (the workload driver's warm-up is excluded). A new draw each round puts the
workload's own sampling into the rounds' spread: an interval then covers what another draw of
the same workload would give, not only the node's noise on one draw."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from collectors.safetext import table_cell, visible
from engram_top.compare import paired
from engram_top.compare import verdict as verdicts
from engram_top.compare.paired import Estimate
from engram_top.compare.run_result import RunResult
from engram_top.compare.verdict import Evidence, Verdict

# The compared figures: per request from requests.csv's rows, or per round (throughput).
FIGURES: dict[str, tuple[str, str, str]] = {  # key -> (label, unit, better)
    "ttft_ms": ("TTFT", "ms", "lower"),
    "tpot_ms": ("TPOT", "ms", "lower"),
    "e2e_ms": ("end-to-end latency", "ms", "lower"),
    "output_tok_s": ("output throughput", "tok/s", "higher"),
}
PER_ROUND = {"output_tok_s"}
# How a plan's [stop] names a figure.
STOP_FIGURES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms",
                "throughput": "output_tok_s"}


def order(scenarios: Sequence[str], round_index: int) -> tuple[str, ...]:
    """The scenarios' order in a round: as written in even rounds, reversed in odd ones."""
    return tuple(scenarios if round_index % 2 == 0 else reversed(scenarios))


def pattern(scenarios: Sequence[str], rounds: int) -> str:
    """"A B | B A" for the report: the order the rounds ran in."""
    return " | ".join(" ".join(order(scenarios, r)) for r in range(rounds))


@dataclass(frozen=True)
class StopRule:
    """Stop before the round limit once, for every scenario against the baseline, the
    interval of ``statistic`` of ``figure`` excludes zero or (with a margin) lies within
    ±margin of the baseline."""

    figure: str  # a FIGURES key
    statistic: str = "mean"  # mean, median or p99
    margin: float | None = None  # a fraction of the baseline's statistic
    min_rounds: int = 3

    def describe(self) -> str:
        label = FIGURES[self.figure][0]
        within = "" if self.margin is None else f" or lies within ±{self.margin * 100:g}%"
        return (f"stop once every interval of the {self.statistic} {label} difference "
                f"excludes zero{within} (after at least {self.min_rounds} rounds)")


def values(requests: Sequence[dict[str, Any]], results: Sequence[RunResult], scenario: str,
           figure: str) -> dict[int, list[float]]:
    """Round -> the figure's values: one per completed request, or the round's one."""
    out: dict[int, list[float]] = {}
    if figure in PER_ROUND:
        for r in results:
            v = getattr(r, figure)
            if r.scenario == scenario and v is not None:
                out.setdefault(r.trial, []).append(v)
        return out
    for row in requests:
        v = row.get(figure)
        if row["scenario"] == scenario and row["status"] == "ok" and v is not None:
            out.setdefault(row["trial"], []).append(v)
    return out


def analyse(scenarios: Sequence[str], baseline: str, requests: Sequence[dict[str, Any]],
            results: Sequence[RunResult], *, seed: int,
            resamples: int = paired.RESAMPLES,
            figures: Sequence[str] = tuple(FIGURES)) -> dict[str, dict[str, list[Estimate]]]:
    """Scenario -> figure -> its estimates against the baseline over the paired rounds."""
    out: dict[str, dict[str, list[Estimate]]] = {}
    for name in scenarios:
        if name == baseline:
            continue
        out[name] = {}
        for fig in figures:
            stats = ("mean",) if fig in PER_ROUND else ("mean", "median", "p99")
            out[name][fig] = paired.estimates(
                fig, values(requests, results, baseline, fig),
                values(requests, results, name, fig), statistics=stats,
                resamples=resamples, seed=seed)
    return out


def stop_reason(rule: StopRule, scenarios: Sequence[str], baseline: str,
                requests: Sequence[dict[str, Any]], results: Sequence[RunResult],
                rounds_done: int, seed: int) -> str | None:
    """Why the bench may stop now under ``rule``, or None to go on."""
    if rounds_done < rule.min_rounds:
        return None
    found = analyse(scenarios, baseline, requests, results, seed=seed, figures=(rule.figure,))
    said = []
    for name, figs in found.items():
        est = next((e for e in figs[rule.figure] if e.statistic == rule.statistic), None)
        if est is None or est.lo is None or est.hi is None:
            return None
        if not est.holds_zero:
            said.append(f"{name}: excludes zero")
        elif rule.margin is not None and est.baseline and \
                -rule.margin <= est.lo / est.baseline and est.hi / est.baseline <= rule.margin:
            said.append(f"{name}: within ±{rule.margin * 100:g}%")
        else:
            return None
    return f"stopped after {rounds_done} rounds ({'; '.join(said)})" if said else None


def to_json(found: dict[str, dict[str, list[Estimate]]]) -> dict[str, Any]:
    return {name: {fig: [e.to_dict() for e in ests] for fig, ests in figs.items()}
            for name, figs in found.items()}


def _num(v: float | None) -> str:
    return "–" if v is None else f"{v:,.4g}"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v * 100:+.1f}%"


def _span(lo: float | None, hi: float | None, pct: bool = False) -> str:
    if lo is None or hi is None:
        return "–"
    f = _pct if pct else (lambda v: f"{v:+,.4g}")
    return f"[{f(lo)}, {f(hi)}]"


def _by(method: str) -> str:
    """Which method gave a difference's interval, in a word for the table."""
    return (" (bootstrap)" if method.startswith("bootstrap") else
            " (t)" if method == paired.T_METHOD else "")


def markdown(found: dict[str, dict[str, list[Estimate]]], baseline: str,
             scenarios: Sequence[str], rounds: int, resamples: int, seed: int,
             stopped: str | None) -> str:
    """report.md's "Paired A/B" section: every estimate with its interval and method."""
    lines = ["", "## Paired A/B over rounds", "",
             f"{rounds} round(s) in the order {pattern(scenarios, rounds)}; each round its own "
             "seeded requests (the plan's seed, then the next), the same for every scenario "
             "of the round; start-up, the switch and warm-up not measured. Each "
             f"difference is the scenario's figure less `{baseline}`'s.",
             "- Differences of means, medians and p99s: 95% "
             f"{paired.bootstrap_method(resamples, seed)}; each resample pools the requests "
             f"of the rounds drawn. Under {paired.MIN_BOOTSTRAP_ROUNDS} rounds there are too "
             "few distinct resamples for one: medians and p99s then get no interval, and "
             "means their paired t interval.",
             f"- Means also: 95% {paired.T_METHOD}.",
             f"- Relative change of a mean: 95% {paired.FIELLER} (it carries the baseline's "
             f"own uncertainty); of a median or p99: {paired.BOOT_RATIO}.",
             "- MDE: the smallest difference of means this run's round-to-round noise lets a "
             "paired t test find (5% two-sided, 80% power).",
             "- `≈` marks an interval that holds zero: not distinguishable."]
    if stopped:
        lines.append(f"- Stop rule: {stopped}.")
    if rounds < 2:
        lines.append("- One round: no interval (a paired interval needs two rounds).")
    lines += ["", "| scenario | figure | statistic | baseline | scenario | difference "
              "[95%] | [95% paired t] | relative [95%] | MDE |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, figs in found.items():
        for fig, ests in figs.items():
            label, unit, _ = FIGURES[fig]
            for e in ests:
                mark = " ≈" if e.holds_zero else ""
                rel_how = {paired.FIELLER: " (Fieller)", paired.BOOT_RATIO: " (bootstrap)"}
                lines.append(
                    f"| {table_cell(name)} | {label} ({unit}) | {e.statistic} | "
                    f"{_num(e.baseline)} | {_num(e.value)} | {e.diff:+,.4g} "
                    f"{_span(e.lo, e.hi)}{mark}{_by(e.method)} | {_span(e.t_lo, e.t_hi)} | "
                    f"{_pct(e.rel)} "
                    f"{_span(e.rel_lo, e.rel_hi, pct=True)}{rel_how.get(e.rel_method, '')} | "
                    f"{'–' if e.mde is None else f'{e.mde:,.3g}'} |")
    # The order sentence and the stop rule quote scenario names: outside text, a line each.
    return "\n".join(map(visible, lines)) + "\n"


# The verdict's axes the paired rounds measure, each from its figure.
AXIS_OF = {"ttft_ms": "ttft", "tpot_ms": "tpot", "output_tok_s": "throughput"}


def evidence(found: dict[str, dict[str, list[Estimate]]], baseline: str) -> list[Evidence]:
    """compare.verdict's Evidence from the paired estimates: the relative change of each
    statistic with its interval and the method that gave it (a median or p99 only with
    its interval)."""
    out = []
    for fig, ax in AXIS_OF.items():
        for name, figs in found.items():
            for e in figs.get(fig, []):
                if e.statistic != "mean" and e.lo is None:
                    continue  # too few rounds for its bootstrap: the table shows its figure
                # Without an interval, the method is why (the verdict says it).
                method = {paired.FIELLER: "Fieller, paired rounds",
                          paired.BOOT_RATIO: "bootstrap over rounds"}.get(e.rel_method,
                                                                          e.rel_method)
                out.append(Evidence(ax, name, baseline, e.rel, True, e.rel_lo, e.rel_hi,
                                    method, statistic=e.statistic, n=e.rounds))
    return out


def verdict(plan: Any, comparison: Any, found: dict[str, dict[str, list[Estimate]]],
            summary: dict[str, Any] | None) -> Verdict:
    """The bench's verdict: KV capacity and host RAM from the comparison's cells (goodput too
    when the plan has an SLO), TTFT, TPOT and throughput from the paired rounds, and a
    sweep's crossovers."""
    axes = [verdicts.axis("kv_capacity"), verdicts.axis("host_ram")]
    if plan.slos:
        axes.append(verdicts.axis("goodput"))
    cells = verdicts.from_comparison(comparison, axes=axes)
    order = [a.key for a in verdicts.AXES]
    every = sorted([*cells, *evidence(found, plan.baseline)], key=lambda e: order.index(e.axis))
    unit = "req/s" if plan.sweep is not None and plan.sweep.kind == "rate" else \
        "concurrent requests"
    return verdicts.decide(every, baseline=plan.baseline,
                           crossovers=(summary or {}).get("crossover") or None, load_unit=unit)
