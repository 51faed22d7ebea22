"""The README's benchmark commands as written, shortened by the option it documents for that
(`--quick`: the simulated node faster, fewer requests, figures still in node time): the demo
plan a presenter quotes from, then the dashboard comparing against its report; the decision
sweep; and every plan file under scenarios/ run to its report, or refused with the reason
where it needs a real node."""

from __future__ import annotations

import json
import re

import pytest
from docskit import Docs
from readme import ROOT, assert_quoted, block_at, covers

from engram_top.compare import paired

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
    # Progress per round, scenario and level; the rounds alternate their order.
    assert "round 1/2: device host host-prefetch" in done.stdout
    assert "round 2/2: host-prefetch host device" in done.stdout
    assert "  device: level 1/3 (concurrency 1, 4 requests)" in done.stdout
    assert "  host-prefetch: level 3/3 done in " in done.stdout
    out = docs.cwd / "B"
    for name in ("report.md", "report.json", "requests.csv"):
        assert (out / name).stat().st_size > 0, name
    report = json.loads((out / "report.json").read_text())
    ab = report["paired"]
    assert ab["quick"] is True and ab["rounds"] == 2
    assert ab["order"] == "device host host-prefetch | host-prefetch host device"
    # The seed's memory figures, in both rounds, and start-up in node time in its order.
    by = {(r["scenario"], r["trial"]): r for r in report["results"]}
    for trial in (0, 1):
        dev, host, pre = (by[(s, trial)] for s in ("device", "host", "host-prefetch"))
        assert dev["weights_gb"] == 119.043 and pre["weights_gb"] == 72.201
        assert dev["kv_tokens"] == 11_840_000 and pre["kv_tokens"] == 42_700_288
        assert dev["host_delta_gib"] == pytest.approx(6.5, abs=0.01)
        assert host["host_delta_gib"] == pytest.approx(195.4, abs=0.01)
        assert pre["host_delta_gib"] == pytest.approx(201.6, abs=0.01)
        assert dev["ready_s"] < host["ready_s"] < pre["ready_s"]
    # The three latency deltas of the seed, each with its 95% interval or the reason it has
    # none (Fieller's set is unbounded over two noisy rounds), and its method.
    for figure, entry in _headline(report, "host-prefetch").items():
        assert entry["rel"] is not None, figure
        bounded = entry["rel_lo"] is not None and entry["rel_hi"] is not None
        assert (bounded and entry["rel_lo"] <= entry["rel"] <= entry["rel_hi"]) or \
            "unbounded" in (entry["rel_method"] or ""), (figure, entry)
    ttft = {e["statistic"]: e for e in ab["scenarios"]["host-prefetch"]["ttft_ms"]}
    assert ttft["mean"]["method"] == paired.T_METHOD and ttft["mean"]["mde"] > 0
    assert ttft["median"]["lo"] is None and "needs 5 rounds" in ttft["median"]["method"]
    findings = {(f["axis"], f["scenario"]): f for f in report["verdict"]["findings"]
                if f["statistic"] == "mean"}
    assert findings[("kv_capacity", "host-prefetch")]["winner"] == "host-prefetch"
    md = (out / "report.md").read_text()
    assert "a first look, not a measurement to quote" in md
    assert "## Verdict" in md and "## Paired A/B over rounds" in md
    assert "- KV capacity: host-prefetch wins" in md
    # No [slo]: no goodput anywhere, rather than n/a and an empty chart.
    assert "no [slo] in the plan, so no goodput" in md and "attainment" not in md
    assert not (out / "goodput.png").exists() and (out / "latency.png").exists()
    # compare without --baseline: the first scenario, and it says so.
    compared = docs.sh("engram-top compare B/report.json", timeout=60)
    assert compared.returncode == 0, compared.stderr
    assert "baseline: device (the first scenario; --baseline NAME picks another)" in \
        compared.stderr

    # The dashboard beside it, at a projector's 100x30: `c` puts the file's runs in columns
    # of their own, compared with the file's own device runs (the same workload), never
    # with the live device run; the quick bench's caveat where the verdict is read.
    term = docs.screen(COMPARE_WITH, size=(30, 100))
    term.wait_for(lambda t: re.search(r"ready (in|after)", t, re.I) is not None, 120,
                  "the demo's server ready")
    term.press("c")
    # Waited for whole: a screen read while a frame is still being written (a loaded
    # machine's) can hold the box's first rows and not yet its runs row.
    text = term.wait_for(lambda t: "B/report.json" in t and "⚠" in t
                         and "│ Verdict against" in t and "n=2 · vs device" in _modal_text(t),
                         30,
                         "the report's runs and the quick caveat on the compare screen")
    verdict = _modal_text(text)
    assert "a first look, its intervals too wide to quote" in verdict, text
    # Each axis compares the file's host and host-prefetch runs (with the file's own device
    # as baseline: `its file's baseline`), never the live device run; the latency figures
    # with their two rounds' interval, host RAM (the same allocation each round) by its sign.
    # The runs row (its cells wrap: "n=2 · its | file's baseline", "n=2 · vs device |
    # (B/report.json)"): two rounds each, the file's device its own baseline.
    assert "n=2 · its" in verdict and "n=2 · vs device" in verdict, text
    for axis in ("KV capacity", "host RAM", "TTFT", "TPOT", "throughput"):
        found = re.search(rf"{axis}: host \(B/report\.json\) [-+][\d.]+(%| GiB) \[[^]]+\] "
                          rf"[▲▼≈] · host-prefetch \(B/report\.json\) [-+][\d.]+(%| GiB) "
                          rf"\[[^]]+\] [▲▼≈]", verdict)
        assert found, (axis, verdict)
    assert re.search(r"host RAM: host \(B/report\.json\) \+\d+ GiB \[[^]]+\] ▼", verdict)
    # `c` closes it as it opened it (an escape with the next key close behind reads as
    # alt+key); the next key once the panels it covered show again.
    term.press("c")
    term.wait_for(lambda t: "Host RAM" in t and "esc: close" not in t, 30,
                  "the compare screen closed")
    term.press("q")
    assert term.wait(60) == 0, term.output[-3000:]


def _modal_text(screen: str) -> str:
    """The text of the screen's framed box that starts with "Verdict against", its wrapped
    lines joined, without what shows beside it or its scroll bar's thumb (block elements,
    which sit at a line's end wherever the content's length puts them)."""
    lines = screen.splitlines()
    top = next(i for i, ln in enumerate(lines) if "│ Verdict against" in ln)
    left = lines[top].index("│ Verdict against")
    right = lines[top].rindex("│")
    inner = (ln[left + 1:right] for ln in lines[top:] if len(ln) > right)
    return " ".join(re.sub("[\u2580-\u259f]", " ", " ".join(inner)).split())


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
# tests (tests/scenarios/test_real_sglang.py, tests/scenarios/test_real_vllm.py run these
# very files), the GPU node's only on a node, and refused here with the line to edit.
ELSEWHERE = {"tiny-cpu-bench.toml": "scenarios/test_real_sglang.py",
             "tiny-cpu-vllm-bench.toml": "scenarios/test_real_vllm.py"}
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
    out = docs.cwd / f"out-{plan}"
    report = json.loads((out / "report.json").read_text())
    assert report["results"] and all(r["completed"] for r in report["results"])
    # SGLang's and vLLM's simulated servers side by side: the same model behind both, so
    # capacity and host memory alike, weights as each prints them (vLLM to two places).
    by = {r["scenario"]: r for r in report["results"] if r["trial"] == 0}
    assert {n: r["engine"] for n, r in by.items()} == {
        "sglang-device": "SGLang (simulated)", "sglang-host-prefetch": "SGLang (simulated)",
        "vllm-host-prefetch": "vLLM (simulated)"}
    sg, vl = by["sglang-host-prefetch"], by["vllm-host-prefetch"]
    assert vl["kv_tokens"] == sg["kv_tokens"] == 42_700_288
    assert vl["weights_gb"] == pytest.approx(sg["weights_gb"], abs=0.005)
    assert vl["host_delta_gib"] == pytest.approx(sg["host_delta_gib"], abs=0.05)
    md = (out / "report.md").read_text()
    assert "| engine · placement |" in md and "vLLM (simulated) · host-prefetch" in md


@pytest.mark.parametrize("plan", sorted(NEEDS_A_NODE))
def test_a_real_nodes_plan_says_what_to_edit(docs: Docs, plan: str) -> None:
    done = docs.sh(f"engram-top bench scenarios/{plan} --out out", timeout=60)
    assert done.returncode != 0
    assert re.search(r"\.toml:\d+: python '.*' does not exist: set it to your SGLang "
                     r"environment's interpreter", done.stderr), done.stderr
    assert "Traceback" not in done.stderr
    assert not (docs.cwd / "out" / "report.json").exists()
