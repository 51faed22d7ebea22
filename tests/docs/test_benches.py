"""The README's benchmark commands as written, shortened by the option it documents for that
(`--quick`: the simulated node faster, fewer requests, figures still in node time): the demo
plan a presenter quotes from, then the dashboard comparing against its report; the decision
sweep; and every plan file under scenarios/ run to its report, or refused with the reason
where it needs a real node."""

from __future__ import annotations

import json
import re

import pytest
from conftest import Docs
from readme import ROOT, assert_quoted, block_at, covers

pytestmark = [pytest.mark.docs, pytest.mark.slow]

BENCH = "engram-top bench scenarios/demo-bench.toml --out B"
COMPARE_WITH = "engram-top demo --compare-with B/report.json"
SWEEP = "engram-top bench scenarios/demo-sweep.toml --out sweep"
QUICK = " --quick"  # the README's own way to shorten a bench (its time scales and rounds)
HEADLINE = ("ttft_ms", "tpot_ms", "output_tok_s")


def _headline(report: dict, scenario: str) -> dict[str, dict]:  # type: ignore[type-arg]
    """host-prefetch's three latency deltas against device, as report.json gives them."""
    out = {}
    for figure in HEADLINE:
        (entry,) = [e for e in report["paired"]["scenarios"][scenario][figure]
                    if e["statistic"] == "mean"]
        out[figure] = entry
    return out


@pytest.mark.timeout(420)
@covers(BENCH, COMPARE_WITH)
def test_the_quotable_bench_then_the_dashboard_against_it(docs: Docs) -> None:
    done = docs.sh(BENCH + QUICK, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    out = docs.cwd / "B"
    for name in ("report.md", "report.json", "requests.csv"):
        assert (out / name).stat().st_size > 0, name
    report = json.loads((out / "report.json").read_text())
    assert report["paired"]["quick"] is True and report["paired"]["rounds"] == 2
    # The three latency deltas of the seed, each with its 95% interval or the reason it has
    # none (Fieller's set is unbounded over two noisy rounds), and its method.
    for figure, entry in _headline(report, "host-prefetch").items():
        assert entry["rel"] is not None, figure
        bounded = entry["rel_lo"] is not None and entry["rel_hi"] is not None
        assert (bounded and entry["rel_lo"] <= entry["rel"] <= entry["rel_hi"]) or \
            "unbounded" in (entry["rel_method"] or ""), (figure, entry)
    md = (out / "report.md").read_text()
    assert "a first look, not a measurement to quote" in md
    assert "## Verdict" in md and "## Paired A/B over rounds" in md

    # The dashboard beside it: `c` puts the file's runs in columns of their own.
    term = docs.screen(COMPARE_WITH, size=(40, 160))
    term.wait_for(lambda t: re.search(r"ready (in|after)", t, re.I) is not None, 120,
                  "the demo's server ready")
    term.press("c")
    text = term.wait_for(lambda t: "B/report.json" in t, 30,
                         "the report's runs on the compare screen")
    assert "host-prefetch (B/report.json)" in text or "host-prefetch" in text, text
    term.press("escape")
    term.press("q")
    assert term.wait(60) == 0, term.output[-3000:]


@pytest.mark.timeout(300)
@covers(SWEEP, "- Crossover (modelled): host-prefetch's goodput overtakes device's above "
        "0.0614 req/s (between the levels at 0.06 and 0.07); it falls behind again above "
        "0.11 req/s (between 0.1 and 0.12).")
def test_the_decision_sweep_writes_its_crossover(docs: Docs) -> None:
    done = docs.sh(SWEEP + QUICK, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    out = docs.cwd / "sweep"
    report = json.loads((out / "report.json").read_text())
    # Two live loads over HTTP, seven more from the model, for both placements.
    for name in ("device", "host-prefetch"):
        levels = report["levels"][name]
        assert [lv["modelled"] for lv in levels] == [False] * 2 + [True] * 7
        assert all(lv["failed"] == 0 for lv in levels[:2])
    md = (out / "report.md").read_text()
    assert_quoted(block_at("- Crossover (modelled)").lines, md, where="sweep/report.md")
    assert "its live levels answer in 48 tokens" in md or "live levels' 48 tokens" in md
    for chart in ("goodput.png", "goodput.svg"):
        assert (out / chart).stat().st_size > 10_000, chart


def _plans() -> list[str]:
    return sorted(p.name for p in (ROOT / "scenarios").glob("*.toml")
                  if "[bench]" in p.read_text())


# The plans of real servers run where their servers are: the CPU ones in the real-server
# tests (tests/test_real_sglang.py, tests/test_real_vllm.py run these very files), the
# GPU node's only on a node, and refused here with the line to edit.
ELSEWHERE = {"tiny-cpu-bench.toml": "test_real_sglang.py",
             "tiny-cpu-vllm-bench.toml": "test_real_vllm.py"}
NEEDS_A_NODE = {"dsv41-flash-4xb200-bench.toml"}
RUN_HERE = ("demo-mixed-bench.toml",)  # demo-bench and demo-sweep: the tests above


def test_every_plan_is_run_by_some_test() -> None:
    assert set(_plans()) == {"demo-bench.toml", "demo-sweep.toml", *RUN_HERE, *ELSEWHERE,
                             *NEEDS_A_NODE}
    for plan, module in ELSEWHERE.items():
        assert plan in (ROOT / "tests" / module).read_text(), (plan, module)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("plan", RUN_HERE)
def test_a_plan_runs_to_its_report(docs: Docs, plan: str) -> None:
    done = docs.sh(f"engram-top bench scenarios/{plan} --out out-{plan}{QUICK}", timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    report = json.loads((docs.cwd / f"out-{plan}" / "report.json").read_text())
    assert report["results"] and all(r["completed"] for r in report["results"])


@pytest.mark.parametrize("plan", sorted(NEEDS_A_NODE))
def test_a_real_nodes_plan_says_what_to_edit(docs: Docs, plan: str) -> None:
    done = docs.sh(f"engram-top bench scenarios/{plan} --out out", timeout=60)
    assert done.returncode != 0
    assert re.search(r"\.toml:\d+: python '.*' does not exist: set it to your SGLang "
                     r"environment's interpreter", done.stderr), done.stderr
    assert "Traceback" not in done.stderr
    assert not (docs.cwd / "out" / "report.json").exists()
