"""`engram-top bench` on the simulated node, and plan files that cannot run."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import installed_script

from engram_top.bench.plan import PlanError, load_plan

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

ROOT = Path(__file__).resolve().parents[2]
ENGRAM_TOP = installed_script()

PLAN = """
[bench]
scenarios_file = "{demo}"
scenarios = ["device", "host", "host-prefetch"]
baseline = "device"
trials = 2
gpus = 4
price_per_gpu_hour = 6.0
time_scale = 0.02

[workload]
levels = [{{ concurrency = 2, requests = 4 }}, {{ rate = 20.0, requests = 4 }}]
input_len = 128
output_len = 24
range_ratio = 0.5
warmup_requests = 1
"""


@pytest.mark.timeout(240)
def test_bench_on_the_simulated_node_reproduces_the_seeds_memory_figures(tmp_path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(demo=ROOT / "scenarios" / "demo.toml"))
    out = tmp_path / "out"
    # The user's alert thresholds apply to a bench as to a dashboard: at 50%, every GPU's
    # HBM (weights, then the KV pool that fills the rest) is an alert.
    config = tmp_path / "config.toml"
    config.write_text("[alerts]\nhbm_used_pct = 50\n")
    res = subprocess.run([str(ENGRAM_TOP), "bench", str(plan), "--out", str(out)],
                         capture_output=True, text=True, timeout=230,
                         env={**os.environ, "ENGRAM_TOP_CONFIG": str(config)})
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads((out / "report.json").read_text())
    results = report["results"]
    assert len(results) == 6 and all(r["completed"] == 8 and r["failed"] == 0 for r in results)
    by = {(r["scenario"], r["trial"]): r for r in results}
    for trial in (0, 1):
        dev, host, pre = (by[(s, trial)] for s in ("device", "host", "host-prefetch"))
        assert dev["weights_gb"] == 119.043 and pre["weights_gb"] == 72.201
        assert dev["kv_tokens"] == 11_840_000 and pre["kv_tokens"] == 42_700_288
        assert pre["kv_tokens"] / dev["kv_tokens"] == pytest.approx(3.606, rel=0.01)
        assert dev["host_delta_gib"] == pytest.approx(6.5, abs=0.01)
        assert host["host_delta_gib"] == pytest.approx(195.4, abs=0.01)
        assert pre["host_delta_gib"] == pytest.approx(201.6, abs=0.01)
        # Start-up in node time, ordered as in the seed: device < host < host-prefetch.
        assert dev["ready_s"] < host["ready_s"] < pre["ready_s"]
        assert dev["ready_s"] == pytest.approx(125.04, rel=0.15)
    rows = {r["key"]: r for r in report["comparison"]["rows"]}
    assert rows["kv_ratio"]["cells"]["host-prefetch"]["mean"] == pytest.approx(3.606, rel=0.01)
    md = (out / "report.md").read_text()
    assert "host-prefetch +15.57% vs device" in md and "| KV capacity vs baseline" in md
    with open(out / "requests.csv") as f:
        reqs = list(csv.DictReader(f))
    assert len(reqs) == 48 and {r["scenario"] for r in reqs} == {"device", "host",
                                                                 "host-prefetch"}
    assert all(float(r["ttft_ms"]) > 0 for r in reqs)
    alerts = {(a["scenario"], a["id"]) for a in report["alerts"]}
    # Raised once, with the first run, and held through the switches (HBM refills faster
    # than an alert clears).
    assert {("device", f"hbm:gpu{i}") for i in range(4)} <= alerts
    assert all("(> 50%)" in a["message"] for a in report["alerts"] if a["id"].startswith("hbm"))
    assert "- alert during device: GPU 0 HBM" in md and "alert: GPU 0 HBM" in res.stdout
    # Every level is its own row: two trials of each merged, with its percentiles.
    for name in ("device", "host", "host-prefetch"):
        levels = report["levels"][name]
        assert [(lv["kind"], lv["load"], lv["trials"], lv["requests"]) for lv in levels] == [
            ("concurrency", 2.0, 2, 8), ("rate", 20.0, 2, 8)]
        for lv in levels:
            ttft = lv["latency"]["ttft"]
            assert 0 < ttft["p50"] <= ttft["p90"] <= ttft["p95"] <= ttft["p99"]
            assert lv["modelled"] is False and lv["retractions"] == 0
            assert 0 < lv["kv_usage_max"] < 0.01  # 152-token requests in an 11.84M pool
            assert lv["goodput_rps"] is None and lv["meets_slo"] is None  # no SLO in the plan
    assert "## Per level" in md and "| host-prefetch | 20 | live | 8 |" in md
    assert "![Headline deltas against the baseline](deltas.png)" in md
    # Only the reports and their charts go into --out (the servers' logs and state live in
    # the state folder); no [slo], no goodput chart.
    charts = [f"{stem}.{ext}" for stem in ("deltas", "kv_queue", "latency")
              for ext in ("png", "svg")]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["report.json", "report.md", "requests.csv", *charts])
    assert (out / "deltas.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # compare keeps the report's price, and says which currency it is in.
    res = subprocess.run([str(ENGRAM_TOP), "compare", str(out / "report.json"), "--baseline",
                          "device"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "| cost per million output tokens | $/Mtok |" in res.stdout
    assert "Cost at $6 per GPU-hour (US dollars" in res.stdout
    other = tmp_path / "other.json"
    report["comparison"]["price_per_gpu_hour"] = 8.0
    other.write_text(json.dumps(report))
    res = subprocess.run([str(ENGRAM_TOP), "compare", str(out / "report.json"), str(other),
                          "--baseline", "device"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "priced differently (6, 8 per GPU-hour): give --price-per-gpu-hour" in res.stderr


def test_plan_files_that_cannot_run_say_why(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[bench]\nscenarios_file = "nowhere.toml"\nscenarios = ["x"]\n'
                   'baseline = "x"\ntrail = 2\n[workload]\nlevels = [{ requests = 3 }]\n')
    with pytest.raises(PlanError) as err:
        load_plan(bad)
    text = str(err.value)
    assert f"{bad}: bench.trail: unknown key" in text
    assert "workload.levels[0]: needs requests and exactly one of concurrency, rate" in text
    ok_levels = bad.read_text().replace("trail = 2", "trials = 2").replace(
        "{ requests = 3 }", "{ requests = 3, concurrency = 1 }")
    bad.write_text(ok_levels)
    with pytest.raises(PlanError, match="bench.scenarios_file: .*cannot read"):
        load_plan(bad)
    res = subprocess.run([str(ENGRAM_TOP), "bench", str(bad), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "bench.scenarios_file" in res.stderr


def test_shipped_plans_load() -> None:
    for name in ("demo-bench.toml", "dsv41-flash-4xb200-bench.toml", "tiny-cpu-bench.toml",
                 "demo-sweep.toml"):
        plan = load_plan(ROOT / "scenarios" / name)
        assert plan.baseline in plan.scenarios


def test_compare_joins_bench_serving_files_and_names_a_broken_line() -> None:
    data = ROOT / "tests" / "data" / "bench_serving"
    res = subprocess.run([str(ENGRAM_TOP), "compare", str(data / "device.jsonl"),
                          str(data / "host-prefetch.jsonl"), "--baseline", "device"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "| mean TTFT | ms | lower |" in res.stdout and "host-prefetch" in res.stdout
    res = subprocess.run([str(ENGRAM_TOP), "compare", str(data / "broken.jsonl"),
                          "--baseline", "device"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and f"{data / 'broken.jsonl'}:3:" in res.stderr
    assert "Traceback" not in res.stderr


PAIRED = """
[bench]
scenarios_file = "{demo}"
scenarios = ["device", "host-prefetch"]
baseline = "device"
trials = {trials}
time_scale = 0.01
serve_scale = 0.25

[workload]
levels = [{{ concurrency = 1, requests = 6 }}, {{ concurrency = 3, requests = 6 }}]
input_len = 256
output_len = 48
range_ratio = 0.5
warmup_requests = 1
{extra}
"""


@pytest.mark.timeout(200)
def test_the_stop_rule_ends_the_rounds_once_the_interval_decides(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    # TPOT: host-prefetch reads its Engram rows from host memory each step, about a fifth
    # slower than device, far beyond the round-to-round noise.
    plan.write_text(PAIRED.format(demo=ROOT / "scenarios" / "demo.toml", trials=6,
                                  extra='[stop]\nfigure = "tpot"\nmin_rounds = 3\n'))
    out = tmp_path / "out"
    res = subprocess.run([str(ENGRAM_TOP), "bench", str(plan), "--out", str(out)],
                         capture_output=True, text=True, timeout=190)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "stopped after 3 rounds (host-prefetch: excludes zero)" in res.stdout
    assert "round 4/6" not in res.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["paired"]["rounds"] == 3 and len(report["results"]) == 6
    assert report["paired"]["stopped"] == "stopped after 3 rounds (host-prefetch: excludes zero)"
    assert report["paired"]["order"] == ("device host-prefetch | host-prefetch device | "
                                         "device host-prefetch")
    tpot = report["paired"]["scenarios"]["host-prefetch"]["tpot_ms"][0]
    assert tpot["statistic"] == "mean" and tpot["lo"] > 0 and tpot["holds_zero"] is False
    md = (out / "report.md").read_text()
    assert "- Stop rule: stopped after 3 rounds (host-prefetch: excludes zero)." in md
