"""The load sweep: the simulated node's model makes its KV pool bind under long contexts,
the crossover it finds between placements, a sweep plan's checks, a level's server marks
over every scheduler of a page, and a short sweep run end to end over HTTP (its live
levels) and in the model (the rest)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import PageServer, installed_script

from collectors.pages import PageClient
from engram_top.bench import sweep
from engram_top.bench.plan import PlanError, load_plan
from engram_top.compare.slo import Slo
from scenarios import engines

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

ROOT = Path(__file__).resolve().parents[2]
ENGRAM_TOP = installed_script()
LONG = sweep.lengths(98304, 16384, 0.75, 200, 7)  # the demo sweep's contexts and count
SLOS = (Slo("ttft", 99, 60.0), Slo("tpot", 99, 0.25))


def test_long_contexts_fill_the_device_pool_and_not_the_host_one() -> None:
    dev = sweep.modelled_level("device", 0.08, "rate", LONG, SLOS, 1)
    pre = sweep.modelled_level("host-prefetch", 0.08, "rate", LONG, SLOS, 1)
    # 11.84M tokens hold ~130 such requests; 42.70M hold the whole load.
    assert dev.kv_usage_max > 0.99 and pre.kv_usage_max < 0.7
    assert dev.queue_mean_s > 5 * pre.queue_mean_s  # admission waits for KV room
    assert dev.latency["ttft"]["p99"] > 60 > pre.latency["ttft"]["p99"]
    assert dev.modelled and dev.notes == ("modelled: the simulator's scheduler in virtual time",)
    low = sweep.modelled_level("device", 0.02, "rate", LONG, SLOS, 1)
    assert low.kv_usage_max < 0.5 and low.meets_slo and low.retractions == 0


def test_the_model_finds_where_host_prefetch_overtakes_device() -> None:
    loads = (0.04, 0.06, 0.07, 0.08)
    levels = {name: [sweep.modelled_level(name, x, "rate", LONG, SLOS, 1) for x in loads]
              for name in ("device", "host-prefetch")}
    s = sweep.summary(levels, "device", SLOS)
    c = s["crossover"]["host-prefetch"]
    assert c["where"] == "between" and c["between"] == [0.06, 0.07] and c["modelled"]
    assert s["highest_within_slo"]["device"] < s["highest_within_slo"]["host-prefetch"]
    assert "overtakes device's above" in sweep.crossover_sentence("host-prefetch", c, "req/s")


def test_a_sweep_plan_is_checked(tmp_path: Path) -> None:
    base = (f'[bench]\nscenarios_file = "{ROOT / "scenarios" / "demo.toml"}"\n'
            'scenarios = ["device"]\nbaseline = "device"\n[workload]\ninput_len = 64\n')
    plan = tmp_path / "p.toml"
    plan.write_text(base + '[sweep]\nkind = "load"\nloads = [4, 2]\nlive_up_to = -1\n'
                    'requests = 0\nspeed = 2\n[slo]\nttft = { max_ms = "fast" }\n')
    with pytest.raises(PlanError) as err:
        load_plan(plan)
    text = str(err.value)
    for problem in ("sweep.speed: unknown key", "sweep.kind: one of rate, concurrency",
                    "sweep.loads: a rising list of up to 64 numbers, each a number from "
                    "0.001 to 100000",
                    "sweep.live_up_to: -1 is out of range: should be a number from 0 to 100000",
                    "sweep.requests: 0 is out of range: should be a whole number from 1 to "
                    "1000000",
                    "slo.ttft.max_ms: should be a number of milliseconds from 0.001 to "
                    "86400000, got str 'fast'"):
        assert f"{plan}: {problem}" in text
    plan.write_text(base + '[sweep]\nloads = [1, 2]\nlive_up_to = 0.5\n')
    with pytest.raises(PlanError, match="live_up_to: below every load"):
        load_plan(plan)
    plan.write_text(base.replace("input_len", "levels = [{ concurrency = 1, requests = 1 }]\n"
                                              "input_len") + "[sweep]\nloads = [1]\n"
                    "live_up_to = 1\n")
    with pytest.raises(PlanError, match="give one or the other"):
        load_plan(plan)


SWEEP = """
[bench]
scenarios_file = "{demo}"
scenarios = ["device", "host-prefetch"]
baseline = "device"
gpus = 4
time_scale = 0.02

[workload]
input_len = 4096
output_len = 32
range_ratio = 0.5
warmup_requests = 0

[slo]
ttft = {{ percentile = 99, max_ms = 2000 }}
tpot = {{ percentile = 90, max_ms = 200 }}

[sweep]
kind = "concurrency"
loads = [1, 2, 64, 256]
live_up_to = 2
requests = 4
modelled_requests = 64
"""


@pytest.mark.timeout(240)
def test_a_sweep_runs_live_then_modelled_and_writes_its_decision(tmp_path: Path) -> None:
    plan = tmp_path / "sweep.toml"
    plan.write_text(SWEEP.format(demo=ROOT / "scenarios" / "demo.toml"))
    out = tmp_path / "out"
    res = subprocess.run([str(ENGRAM_TOP), "bench", str(plan), "--out", str(out)],
                         capture_output=True, text=True, timeout=230)
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads((out / "report.json").read_text())
    for name in ("device", "host-prefetch"):
        levels = report["levels"][name]
        assert [(lv["load"], lv["modelled"]) for lv in levels] == [
            (1.0, False), (2.0, False), (64.0, True), (256.0, True)]
        for lv in levels[:2]:  # live, over HTTP, with the model beside them
            assert lv["requests"] == 4 and lv["failed"] == 0 and lv["model"]["goodput_rps"]
            assert lv["queue_mean_s"] is not None and lv["retractions"] == 0
            assert 0 <= lv["attainment"] <= 1 and lv["goodput_rps"] <= lv["request_per_s"]
        for lv in levels[2:]:
            assert lv["requests"] == 64 and lv["model"] is None
    # At 256 concurrent 4K-token prompts the prefills queue: p99 TTFT breaks 2 s.
    assert report["levels"]["device"][-1]["meets_slo"] is False
    decision = report["sweep"]
    assert decision["slo"] == ["p99 TTFT <= 2000 ms", "p90 TPOT <= 200 ms"]
    highest = decision["highest_within_slo"]
    assert set(highest) == {"device", "host-prefetch"}
    assert all(v is None or v in (1.0, 2.0, 64.0) for v in highest.values())
    assert decision["crossover"]["host-prefetch"]["over"] == "device"
    md = (out / "report.md").read_text()
    assert "## The decision" in md and "highest load within the SLOs" in md
    assert "| device | 64 | modelled | 64 |" in md and "![Goodput vs load](goodput.png)" in md
    assert "The model at the live loads" in md
    results = {r["scenario"]: r for r in report["results"]}
    assert results["device"]["goodput_rps"] is not None
    assert 0 <= results["device"]["slo_attainment"] <= 1
    rows = {r["key"]: r for r in report["comparison"]["rows"]}
    assert rows["goodput_rps"]["cells"]["device"]["mean"] == pytest.approx(
        results["device"]["goodput_rps"])
    assert (out / "goodput.png").stat().st_size > 10_000


def _queue(labels: str, count: int, total: float, name: str) -> str:
    return (f'{name}_bucket{{{labels},le="1.0"}} {count - 1}\n'
            f'{name}_bucket{{{labels},le="+Inf"}} {count}\n'
            f"{name}_sum{{{labels}}} {total}\n{name}_count{{{labels}}} {count}\n")


SGLANG_PAGE = (
    "# TYPE sglang:num_retracted_requests_total counter\n"
    # Each DP rank's scheduler counts its own retractions; its TP ranks repeat them.
    'sglang:num_retracted_requests_total{dp_rank="0",tp_rank="0"} 5\n'
    'sglang:num_retracted_requests_total{dp_rank="0",tp_rank="1"} 5\n'
    'sglang:num_retracted_requests_total{dp_rank="1",tp_rank="0"} 2\n'
    'sglang:num_retracted_requests_total{dp_rank="1",tp_rank="1"} 2\n'
    "# TYPE sglang:queue_time_seconds histogram\n"
    + _queue('dp_rank="0",tp_rank="0"', 4, 2.0, "sglang:queue_time_seconds")
    + _queue('dp_rank="0",tp_rank="1"', 4, 2.0, "sglang:queue_time_seconds")
    + _queue('dp_rank="1",tp_rank="0"', 6, 3.0, "sglang:queue_time_seconds")
    + _queue('dp_rank="1",tp_rank="1"', 6, 3.0, "sglang:queue_time_seconds"))
VLLM_PAGE = (
    "# TYPE vllm:num_preemptions counter\n"  # two engines (data parallel), each its own count
    'vllm:num_preemptions_total{engine="0",model_name="m"} 3\n'
    'vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9\n'
    'vllm:num_preemptions_total{engine="1",model_name="m"} 4\n'
    "# TYPE vllm:request_queue_time_seconds histogram\n"
    + _queue('engine="0",model_name="m"', 3, 1.5, "vllm:request_queue_time_seconds")
    + _queue('engine="1",model_name="m"', 5, 2.5, "vllm:request_queue_time_seconds"))


@pytest.mark.parametrize(("kind", "page", "want"), [
    ("sglang", SGLANG_PAGE, (5.0, 10.0, 7.0)),
    ("vllm", VLLM_PAGE, (4.0, 8.0, 7.0)),
    ("sglang", "# TYPE sglang:num_retracted_requests_total counter\n"
               "sglang:num_retracted_requests_total 1\n", (None, None, 1.0)),
    ("vllm", SGLANG_PAGE, (None, None, None)),  # another engine's page: nothing false
])
async def test_a_levels_marks_count_every_scheduler_once(kind: str, page: str,
                                                         want: tuple) -> None:
    with PageServer(page) as server:
        client = PageClient(server.url)
        try:
            got = await sweep.mark(client, engines.get(kind).mark_figures)
            server.page = "sglang:num_retracted_requests_total{oops 1\n"
            broken = await sweep.mark(client, engines.get(kind).mark_figures)
        finally:
            await client.aclose()
    assert tuple(got) == want
    assert broken is None  # a page that cannot be read: no mark, the row says nothing
