"""The verdict: which placement wins on each measured axis, said wherever a comparison is
shown (the compare screen, the dashboard's strip, summary.md, the bench's report.md).

One pure function decides for every caller: ``decide`` takes Evidence (one measured
difference of a scenario against the baseline on one axis, with its interval and the method
that gave it) and returns a Verdict, whose findings each say the winner, "not
distinguishable" (the interval holds zero), "equivalent" (the interval lies within a stated
margin), or why there is no verdict (one run each, warming up, not measured).
``from_comparison`` reads the Evidence out of a Comparison's cells; the bench builds its own
(bootstrap over rounds, medians and p99s) and calls ``decide`` the same way.

Measured and modelled figures never share a finding: a modelled Evidence is its own line,
marked so. A winner is named only from an interval that excludes zero, except on an axis
that is not sampled (the KV pool's size, fixed by the allocator), where the sign decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from collectors.safetext import visible
from engram_top.compare.comparison import Cell, Comparison

# ----------------------------------------------------------------------------- the axes


@dataclass(frozen=True)
class Axis:
    key: str  # the verdict's own name for the axis ("ttft")
    label: str  # as the verdict says it ("TTFT")
    metric: str  # the compared metric's key (compare.measures) that measures it
    better: str  # "lower" or "higher"
    # Not sampled: the same every run (the allocator sizes the KV pool), so one run each
    # decides by the sign and no interval is needed.
    fixed: bool = False
    # Mostly fixed: a change at least this large (in the metric's unit) is an allocation
    # (the Engram tables' 187 GiB), not run-to-run noise (a server's processes vary by a
    # GiB or two), so one run each decides it by its sign, as a fixed axis.
    allocation: float | None = None
    # Read from a live run's latency window: warming up until that window means something.
    windowed: bool = False

    def settled(self, delta: float) -> bool:
        """Decided by its sign without an interval: fixed, or an allocation's size."""
        return self.fixed or (self.allocation is not None and abs(delta) >= self.allocation)


AXES: tuple[Axis, ...] = (
    Axis("kv_capacity", "KV capacity", "kv_tokens", "higher", fixed=True),
    Axis("host_ram", "host RAM", "host_delta_gib", "lower", allocation=10.0),
    Axis("ttft", "TTFT", "ttft_mean_ms", "lower", windowed=True),
    Axis("tpot", "TPOT", "tpot_mean_ms", "lower", windowed=True),
    Axis("throughput", "throughput", "output_tok_s", "higher", windowed=True),
    Axis("goodput", "goodput at the SLO", "goodput_rps", "higher", windowed=True),
)
_BY_KEY = {a.key: a for a in AXES}


def axis(key: str) -> Axis:
    return _BY_KEY[key]


# ----------------------------------------------------------------------------- evidence

@dataclass(frozen=True)
class Evidence:
    """One difference of ``scenario`` against ``baseline`` on one axis.

    ``delta`` is scenario - baseline: a fraction of the baseline when ``relative`` (0.156 is
    +15.6%), else in ``unit``. ``lo``/``hi`` bound its interval at ``level`` (None: no
    interval), given by ``method`` ("paired t", "Welch t", "bootstrap over rounds", ...).
    ``statistic`` is what was differenced (mean, median, p99); ``n`` the trials or rounds
    per side. ``modelled``: a figure from a model, never a measured one. ``warming``: why
    the figure does not mean anything yet (a live run still warming up), else "".
    """

    axis: str  # an Axis key
    scenario: str
    baseline: str
    delta: float | None
    relative: bool = True
    lo: float | None = None
    hi: float | None = None
    method: str = ""
    statistic: str = "mean"
    n: int | None = None
    unit: str = ""
    level: float = 0.95
    modelled: bool = False
    warming: str = ""

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None


# What a finding says, in these words everywhere.
BETTER = "better"  # the scenario wins
WORSE = "worse"  # the baseline wins
NOT_DISTINGUISHABLE = "not distinguishable"  # the interval holds zero
EQUIVALENT = "equivalent"  # the interval lies within the stated margin
EQUAL = "equal"  # a fixed axis, the same figure on both
NO_INTERVAL = "no interval"  # one run each on a sampled axis: no verdict
WARMING_UP = "warming up"
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Finding:
    evidence: Evidence
    outcome: str  # one of the words above
    winner: str | None  # the scenario that wins this axis; None when none does
    text: str  # the whole sentence
    short: str  # a few words for the dashboard's strip ("TTFT: device")

    @property
    def mark(self) -> str:
        """One sign for a narrow strip: ▲ the scenario beats the baseline, ▼ it loses, ≈ no
        difference to tell, ? one run each, … warming up, – not measured."""
        return {BETTER: "▲", WORSE: "▼", NO_INTERVAL: "?", WARMING_UP: "…",
                NOT_MEASURED: "–"}.get(self.outcome, "≈")

    @property
    def brief(self) -> str:
        """The scenario's figure and outcome in a few words: "+15.4% [+10.1%, +21.0%] ▼"."""
        e = self.evidence
        if self.outcome in (WARMING_UP, NOT_MEASURED):
            return self.outcome
        return f"{_delta(e)} {self.mark}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self.evidence), "outcome": self.outcome, "winner": self.winner,
                "text": self.text}


@dataclass(frozen=True)
class Verdict:
    baseline: str
    findings: tuple[Finding, ...]
    crossovers: tuple[str, ...] = ()  # a sentence per scenario where a sweep found one

    def lines(self) -> list[str]:
        """A sentence per finding, then per crossover."""
        return [f.text for f in self.findings] + list(self.crossovers)

    def markdown(self, level: int = 2) -> str:
        """A "## Verdict" section (``level`` #s): a bullet per finding and crossover, and
        how to read it."""
        out = [f"{'#' * level} Verdict", ""]
        out += [f"- {line}" for line in self.lines()] or ["- nothing measured to compare yet"]
        out += ["", VERDICT_NOTE, ""]
        # Each sentence names scenarios (from servers and files): made visible here, so that
        # every writer and `compare`'s stdout get no control from it.
        return "\n".join(map(visible, out))

    def by_axis(self) -> list[tuple[str, list[Finding]]]:
        """The findings grouped by axis (its label), in the axes' order of the evidence."""
        groups: dict[str, list[Finding]] = {}
        for f in self.findings:
            groups.setdefault(f.evidence.axis, []).append(f)
        return [(axis(key).label, found) for key, found in groups.items()]

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.baseline,
                "findings": [f.to_json() for f in self.findings],
                "crossovers": list(self.crossovers)}


VERDICT_NOTE = ("A placement wins an axis only where the interval of its difference "
                "excludes zero; \"not distinguishable\" where it holds zero. KV capacity is "
                "fixed by the allocator (not sampled): its sign decides. Modelled figures "
                "are said apart from measured ones.")


def decide(evidence: Sequence[Evidence], *, baseline: str,
           crossovers: Mapping[str, Mapping[str, Any]] | None = None, load_unit: str = "",
           margins: Mapping[str, float] | None = None) -> Verdict:
    """The verdict on ``evidence``, in its order. ``crossovers``: a sweep's crossover per
    scenario (bench.sweep.summary's "crossover"), in loads of ``load_unit``. ``margins``:
    by axis key, the difference (a fraction for a relative delta, else in its unit) within
    which the two count as equivalent when the whole interval lies inside it."""
    margins = margins or {}
    findings = tuple(_finding(e, margins.get(e.axis)) for e in evidence)
    sentences = tuple(crossover_sentence(name, c, load_unit)
                      for name, c in (crossovers or {}).items())
    return Verdict(baseline, findings, sentences)


def _finding(e: Evidence, margin: float | None) -> Finding:
    ax = axis(e.axis)
    what = ax.label + ("" if e.statistic == "mean" else f" ({e.statistic})") \
        + (" (modelled)" if e.modelled else "")
    if e.warming:
        return Finding(e, WARMING_UP, None, f"{what}: no verdict yet, warming up ({e.warming}).",
                       f"{ax.label}: warming up")
    if e.delta is None:
        return Finding(e, NOT_MEASURED, None,
                       f"{what}: not measured on both {e.scenario} and {e.baseline}.",
                       f"{ax.label}: n/a")
    figure = f"{e.scenario} {_delta(e)} vs {e.baseline}"
    how = _how(e, ax)
    up = e.delta > 0
    if not e.has_interval:
        if ax.settled(e.delta):
            if e.delta == 0:
                return Finding(e, EQUAL, None, f"{what}: equal ({figure}{how}).",
                               f"{ax.label}: equal")
            win = e.scenario if up == (ax.better == "higher") else e.baseline
            return Finding(e, BETTER if win == e.scenario else WORSE, win,
                           f"{what}: {win} wins ({figure}{how}).", f"{ax.label}: {win}")
        if (e.n or 1) > 1 and e.method:  # repeated, yet no interval: the method says why
            return Finding(e, NO_INTERVAL, None,
                           f"{what}: no verdict: {figure}, {e.method} (n={e.n}): "
                           "more rounds narrow it.", f"{ax.label}: ? n={e.n}")
        return Finding(e, NO_INTERVAL, None,
                       f"{what}: no verdict: {figure}, no interval ({e.n or 1} run each): "
                       "repeat each scenario for one.", f"{ax.label}: ? n={e.n or 1}")
    lo, hi = e.lo, e.hi
    assert lo is not None and hi is not None
    if lo == hi and not ax.settled(e.delta) and not e.modelled and (e.n or 1) > 1:
        # Sampled figures that agree to the last digit round after round have no spread
        # to measure the noise from (copied rounds, a file edited by hand): a zero-width
        # interval is no evidence of a win. An allocation's size (the host tables' +195
        # GiB, the same each round) is not sampled: its sign decides, as with one run.
        return Finding(e, NO_INTERVAL, None,
                       f"{what}: no verdict: {figure}, its {e.n} rounds identical to the last "
                       "digit: no noise to measure an interval from.", f"{ax.label}: ? n={e.n}")
    if margin is not None and -margin <= lo and hi <= margin:
        return Finding(e, EQUIVALENT, None,
                       f"{what}: equivalent within ±{_amount(e, margin)} ({figure}{how}).",
                       f"{ax.label}: equivalent")
    if lo <= 0.0 <= hi:
        return Finding(e, NOT_DISTINGUISHABLE, None,
                       f"{what}: not distinguishable ({figure}{how}).",
                       f"{ax.label}: not distinguishable")
    win = e.scenario if (lo > 0) == (ax.better == "higher") else e.baseline
    return Finding(e, BETTER if win == e.scenario else WORSE, win,
                   f"{what}: {win} wins ({figure}{how}).", f"{ax.label}: {win}")


def _amount(e: Evidence, value: float) -> str:
    return f"{value * 100:.1f}%" if e.relative else f"{value:.3g} {e.unit}".rstrip()


def _signed(e: Evidence, value: float) -> str:
    return f"{value * 100:+.1f}%" if e.relative else f"{value:+.3g}"


def _delta(e: Evidence) -> str:
    assert e.delta is not None
    text = _signed(e, e.delta) + ("" if e.relative or not e.unit else f" {e.unit}")
    if e.has_interval:
        assert e.lo is not None and e.hi is not None
        text += f" [{_signed(e, e.lo)}, {_signed(e, e.hi)}]"
    return text


def _how(e: Evidence, ax: Axis) -> str:
    parts = []
    if e.has_interval:
        parts.append(f"{e.level * 100:g}% {e.method}".rstrip())
    elif ax.fixed:
        parts.append("fixed by the allocator")
    elif e.delta is not None and ax.settled(e.delta):
        parts.append(f"an allocation: {ax.allocation:g} {e.unit} or more is not noise".rstrip())
    if e.n is not None:
        parts.append(f"n={e.n}")
    return f"; {', '.join(parts)}" if parts else ""


# ----------------------------------------------------------------------------- comparisons

_METHODS = {"paired": "paired t", "welch": "Welch t"}


def from_comparison(c: Comparison, *, axes: Sequence[Axis] = AXES,
                    warming: Mapping[str, str] | None = None) -> list[Evidence]:
    """Every non-baseline scenario's Evidence on each axis the comparison measured (a row
    it has, with a figure on either side), axis by axis. ``warming``: by scenario, why its
    figures do not mean anything yet (a live run warming up): its sampled axes say so."""
    warming = warming or {}
    rows = {row.metric.key: row for row in c.rows}
    out = []
    for ax in axes:
        row = rows.get(ax.metric)
        if row is None:
            continue
        for s in c.scenarios:
            # Against its own workload's baseline (a file's runs: their file's); a column
            # that is a baseline, or has none of its workload, has no line.
            b = c.baseline_of(s)
            if b is None:
                continue
            base = row.cells.get(b)
            cell = row.cells.get(s)
            cold = [f"{name}: {warming[name]}" for name in (s, b)
                    if ax.windowed and name in warming]
            if cell is None or (cell.mean is None and (base is None or base.mean is None)):
                if cold:  # nothing yet on either side, as both warm up: said, not left out
                    out.append(Evidence(ax.key, s, b, None, warming="; ".join(cold)))
                continue  # neither side measured it: no line
            out.append(_evidence(ax, row.metric.delta == "relative", row.metric.unit,
                                 s, b, cell, min(c.trials[s], c.trials[b]), "; ".join(cold)))
    return out


def _evidence(ax: Axis, relative: bool, unit: str, scenario: str, baseline: str, cell: Cell,
              n: int, warming: str) -> Evidence:
    iv = cell.interval
    return Evidence(ax.key, scenario, baseline, cell.delta, relative,
                    None if iv is None else iv.lo, None if iv is None else iv.hi,
                    "" if iv is None else _METHODS.get(iv.method, iv.method),
                    n=n, unit=unit, warming=warming)


Shown = Mapping[tuple[str, str, str], "Finding"]  # (baseline, scenario, axis) -> finding


def hold(found: Verdict, shown: Shown) -> Verdict:
    """The verdict as a live strip shows it from one window to the next: a win either way
    stands until the new evidence moves out of the interval it was decided on, so a symbol
    does not flicker as each window's interval grazes zero (▼, then ≈ five seconds later,
    then ▼). A reversal, a finding warming up or not measured, and any other change are
    shown as they come. ``shown``: what the strip showed last (held_findings)."""
    out = []
    for f in found.findings:
        e = f.evidence
        prev = shown.get((e.baseline, e.scenario, e.axis))
        keep = (prev is not None and prev.outcome in (BETTER, WORSE)
                and f.outcome in (NOT_DISTINGUISHABLE, EQUIVALENT, NO_INTERVAL)
                and prev.evidence.lo is not None and prev.evidence.hi is not None
                and e.delta is not None and prev.evidence.lo <= e.delta <= prev.evidence.hi)
        out.append(prev if keep and prev is not None else f)
    return replace(found, findings=tuple(out))


def held_findings(found: Verdict) -> dict[tuple[str, str, str], Finding]:
    """What a strip showing ``found`` holds for the next window (hold's ``shown``)."""
    return {(f.evidence.baseline, f.evidence.scenario, f.evidence.axis): f
            for f in found.findings}


def verdict(c: Comparison, *, warming: Mapping[str, str] | None = None,
            crossovers: Mapping[str, Mapping[str, Any]] | None = None,
            load_unit: str = "", margins: Mapping[str, float] | None = None) -> Verdict:
    """The verdict on a comparison: decide(from_comparison(c)) against its baseline."""
    return decide(from_comparison(c, warming=warming), baseline=c.baseline,
                  crossovers=crossovers, load_unit=load_unit, margins=margins)


# ----------------------------------------------------------------------------- crossovers

def crossover_sentence(name: str, c: Mapping[str, Any], unit: str) -> str:
    """A sweep's crossover (compare.slo.crossover's dict, with "over": the baseline) as a
    sentence; "(modelled)" where the load lies in the modelled range."""
    over = c["over"]
    if c.get("at") is None:
        return f"Crossover: {name}'s goodput does not overtake {over}'s within the sweep."
    how = " (modelled)" if c.get("modelled") else ""
    if c.get("where") == "below":
        text = (f"Crossover{how}: {name}'s goodput is above {over}'s from the lowest load "
                f"swept ({c['at']:g} {unit})").rstrip()
    else:
        lo, hi = c["between"]
        text = (f"Crossover{how}: {name}'s goodput overtakes {over}'s above {c['at']:.3g} "
                f"{unit} (between the levels at {lo:g} and {hi:g})")
    if c.get("until") is None:
        return text + "."
    lo, hi = c["until_between"]
    again = "is level again (not told apart)" if c.get("until_how") == "level" else \
        "falls behind again"
    return text + f"; it {again} above {c['until']:.3g} {unit} (between {lo:g} and {hi:g})."
