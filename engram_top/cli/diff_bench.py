"""`engram-top diff A B` of two bench reports (report.json, or the folder that holds it):
what each ran as first (the plan, its rounds and workload, each scenario's fingerprint), then
for every scenario in both its memory, start-up, latency and throughput, each as A's mean,
B's mean and the change with a 95% interval. Two reports of the same workload drew the same
requests in round k (seed + k), so their rounds pair: Fieller's interval for a ratio of
paired means, as the bench's own A/B. Otherwise (another workload, a report from before
reports kept theirs) the two are independent sets of rounds: Fieller's on unpaired means."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_top.cli.diff_side import DiffError
from engram_top.compare import paired, stats
from engram_top.compare.run_result import RunResult
from engram_top.model.fingerprint import Change, Fingerprint, changes
from engram_top.record.file_format import decode_typed
from engram_top.record.importers import BenchFileError, load_runs

REPORT = "report.json"
# (row, RunResult field, scale): what a report measured per round, in the order shown.
ROWS = (("weights per GPU (GB)", "weights_gb", 1.0), ("KV capacity (tokens)", "kv_tokens", 1.0),
        ("host RAM used since launch (GiB)", "host_delta_gib", 1.0),
        ("ready (s, node time)", "ready_s", 1.0), ("TTFT mean (ms)", "ttft_mean_s", 1000.0),
        ("TTFT p99 (ms)", "ttft_p99_s", 1000.0), ("TPOT mean (ms)", "tpot_mean_s", 1000.0),
        ("end-to-end mean (ms)", "e2e_mean_s", 1000.0), ("output tokens/s", "output_tok_s", 1.0))
PAIRED = "paired by round (the same workload: the same requests each round); " + paired.FIELLER
UNPAIRED = "unpaired (the two reports' workloads differ, or one does not say); Fieller's " \
           "interval on the two reports' per-round means"


@dataclass(frozen=True)
class Bench:
    path: Path
    plan: str
    rounds: int
    quick: bool
    workload: dict[str, Any] | None  # as report.json keeps it; None in an older report
    fingerprints: dict[str, Fingerprint]
    results: tuple[RunResult, ...]

    def scenarios(self) -> list[str]:
        return list(dict.fromkeys(r.scenario for r in self.results))

    def values(self, scenario: str, key: str) -> dict[int, float]:
        """Round -> the figure, where the round measured it."""
        out = {}
        for r in self.results:
            v = getattr(r, key)
            if r.scenario == scenario and v is not None:
                out[r.trial] = float(v)
        return out


@dataclass(frozen=True)
class Row:
    label: str
    a: float | None  # the mean over A's rounds
    b: float | None
    change: float | None  # B / A - 1
    lo: float | None
    hi: float | None


def report_file(path: Path) -> Path | None:
    """PATH's report.json where PATH is a bench report (its folder, or the file), else None."""
    if path.is_dir():
        return path / REPORT if (path / REPORT).is_file() else None
    if path.name == REPORT:
        return path
    try:
        with path.open("rb") as f:
            head = f.read(64)
    except OSError:
        return None
    return path if path.suffix == ".json" and head.lstrip().startswith(b'{\n  "plan"') else None


def read_bench(path: Path) -> Bench:
    try:
        results = load_runs(path)
        data = json.loads(path.read_text(encoding="utf-8"))
    except BenchFileError as exc:
        raise DiffError(str(exc)) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DiffError(f"{path}: not a bench report's JSON ({exc})") from None
    found = data.get("paired")
    ab = found if isinstance(found, dict) else {}
    rounds = ab.get("rounds")
    workload = data.get("workload")
    if workload is not None and not isinstance(workload, dict):
        raise DiffError(f"{path}: workload: expected an object, got {type(workload).__name__}")
    prints = data.get("fingerprints") or {}
    if not isinstance(prints, dict):
        raise DiffError(f"{path}: fingerprints: expected an object, got "
                        f"{type(prints).__name__}")
    try:
        fingerprints = {str(name): decode_typed(fp, Fingerprint, f"{path}: fingerprints.{name}")
                        for name, fp in prints.items()}
    except ValueError as exc:
        raise DiffError(str(exc)) from None
    plan = data.get("plan")
    return Bench(path, Path(plan).name if isinstance(plan, str) else "n/a",
                 rounds if isinstance(rounds, int) and not isinstance(rounds, bool)
                 else 1 + max((r.trial for r in results), default=-1),
                 ab.get("quick") is True, workload, fingerprints, tuple(results))


def paired_rounds(a: Bench, b: Bench) -> bool:
    """Whether round k of A and of B drew the same requests: the same workload, kept."""
    return a.workload is not None and a.workload == b.workload


def ran_as(a: Bench, b: Bench) -> list[Change]:
    """The plans' differences, then each scenario's fingerprint's (named by scenario)."""
    out = [Change(what, str(x), str(y)) for what, x, y in (
        ("plan", a.plan, b.plan), ("rounds", a.rounds, b.rounds),
        ("quick", a.quick, b.quick)) if x != y]
    wa, wb = a.workload or {}, b.workload or {}
    if (a.workload is None) != (b.workload is None):
        out.append(Change("workload", "kept" if wa else "n/a (an older report)",
                          "kept" if wb else "n/a (an older report)"))
    else:
        out += [Change(f"workload.{k}", _shown(wa.get(k)), _shown(wb.get(k)))
                for k in sorted(set(wa) | set(wb)) if wa.get(k) != wb.get(k)]
    sa, sb = a.scenarios(), b.scenarios()
    out += [Change(f"scenario {name}", "ran" if name in sa else "n/a",
                   "ran" if name in sb else "n/a")
            for name in [*sa, *(n for n in sb if n not in sa)] if (name in sa) != (name in sb)]
    for name in (n for n in sa if n in sb):
        fa, fb = a.fingerprints.get(name), b.fingerprints.get(name)
        if fa is not None and fb is not None:
            out += [dataclasses.replace(c, what=f"{name} · {c.what}") for c in changes(fa, fb)]
    return out


def _shown(value: Any) -> str:
    return "n/a" if value is None else json.dumps(value, sort_keys=True)


def rows(a: Bench, b: Bench, scenario: str, pair: bool) -> list[Row]:
    out = []
    for label, key, scale in ROWS:
        va, vb = a.values(scenario, key), b.values(scenario, key)
        if not va and not vb:
            continue
        ma = sum(va.values()) / len(va) * scale if va else None
        mb = sum(vb.values()) / len(vb) * scale if vb else None
        change = mb / ma - 1 if ma and mb is not None else None
        lo = hi = None
        if pair and len(va) >= 2 and set(va) == set(vb):
            ratio = paired.fieller([va[t] for t in sorted(va)], [vb[t] for t in sorted(va)])
            if ratio is not None:
                lo, hi = ratio[0] - 1, ratio[1] - 1
        elif not pair and len(va) >= 2 and len(vb) >= 2:
            interval = stats.welch(list(vb.values()), list(va.values()))
            if interval is not None:
                lo, hi = interval.lo, interval.hi
        out.append(Row(label, ma, mb, change, lo, hi))
    return out


def _num(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"  # 11,840,000 tokens, 26.32 ms


def _change(r: Row) -> str:
    if r.change is None:
        return "n/a"
    if r.lo is None or r.hi is None:
        return f"{r.change * 100:+.2f}% (no interval)"
    same = " ≈" if r.lo <= 0 <= r.hi else ""
    return f"{r.change * 100:+.2f}% [{r.lo * 100:+.2f}, {r.hi * 100:+.2f}]{same}"


def markdown(a: Bench, b: Bench) -> str:
    pair = paired_rounds(a, b)
    lines = ["# engram-top diff", "",
             f"- A: {a.path} (bench report: {a.plan}, {a.rounds} rounds)",
             f"- B: {b.path} (bench report: {b.plan}, {b.rounds} rounds)", "",
             "## What it ran as", ""]
    found = ran_as(a, b)
    if found:
        lines += ["| what | A | B |", "|---|---|---|",
                  *(f"| {c.what} | {c.before} | {c.after} |" for c in found)]
    else:
        lines.append("The same: plan, rounds, workload and every scenario's fingerprint.")
    both = [n for n in a.scenarios() if n in b.scenarios()]
    for name in both:
        lines += ["", f"## {name}", "", "| | A | B | change [95%] |", "|---|---|---|---|"]
        lines += [f"| {r.label} | {_num(r.a)} | {_num(r.b)} | {_change(r)} |"
                  for r in rows(a, b, name, pair)]
    if not both:
        lines += ["", "No scenario ran in both: nothing to set side by side."]
    lines += ["", f"Intervals: {PAIRED if pair else UNPAIRED}; `≈` marks one that holds "
              "no change."]
    return "\n".join(lines) + "\n"


def to_json(a: Bench, b: Bench) -> dict[str, Any]:
    pair = paired_rounds(a, b)
    return {"a": {"path": str(a.path), "plan": a.plan, "rounds": a.rounds},
            "b": {"path": str(b.path), "plan": b.plan, "rounds": b.rounds},
            "ran_as_changes": [[c.what, c.before, c.after] for c in ran_as(a, b)],
            "intervals": PAIRED if pair else UNPAIRED,
            "scenarios": {name: {r.label: dataclasses.asdict(r) for r in rows(a, b, name, pair)}
                          for name in a.scenarios() if name in b.scenarios()}}
