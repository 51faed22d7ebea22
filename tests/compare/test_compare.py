"""engram_top.compare.comparison: deltas and intervals computed by hand, None handling, the
seed column."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from helpers import md_row

from engram_top.compare.comparison import Comparison, compare, to_json
from engram_top.compare.markdown import to_markdown
from engram_top.compare.run_result import RunResult
from engram_top.compare.stats import t95
from engram_top.seed import reference

_EMPTY: dict[str, Any] = dict(
    gpus=None, weights_gb=None, kv_tokens=None, host_delta_gib=None, ready_s=None,
    ttft_mean_s=None, tpot_mean_s=None, itl_mean_s=None, e2e_mean_s=None, ttft_p99_s=None,
    tpot_p99_s=None, output_tok_s=None, request_per_s=None,
)


def run(scenario: str, trial: int, placement: str | None = None, **kw: Any) -> RunResult:
    return RunResult(scenario=scenario, placement=placement, source="bench", trial=trial,
                     **{**_EMPTY, **kw})


def series(scenario: str, key: str, values: list[float | None], **kw: Any) -> list[RunResult]:
    return [run(scenario, i, **{key: v, **kw}) for i, v in enumerate(values)]


# ----------------------------------------------------------------------------- statistics


def test_t95_is_exact() -> None:
    # Published table values; past 30 df it is still Student's t, not the normal 1.96.
    assert t95(1) == pytest.approx(12.7062, abs=5e-5)
    assert t95(2) == pytest.approx(4.3027, abs=5e-5)
    assert t95(30) == pytest.approx(2.0423, abs=5e-5)
    assert t95(31) == pytest.approx(2.0395, abs=5e-5)
    with pytest.raises(ValueError):
        t95(0)


def test_paired_delta_and_interval_by_hand() -> None:
    # TTFT 100/200/400 ms against 110/230/440 ms: per-pair deltas 0.10, 0.15, 0.10.
    results = (series("device", "ttft_mean_s", [0.100, 0.200, 0.400])
               + series("prefetch", "ttft_mean_s", [0.110, 0.230, 0.440]))
    cell = compare(results, "device").row("ttft_mean_ms").cells["prefetch"]
    assert cell.n == 3
    assert cell.mean == pytest.approx(260.0)  # ms
    # The point delta is the change of the means, as the seed reports it: 260 / 233.33 - 1.
    assert cell.delta == pytest.approx(260.0 / (700.0 / 3) - 1)  # 0.114286
    # Pairs: mean 0.116667, sd sqrt(1/1200), se 1/60, t(2 df) = 4.3027.
    assert cell.interval is not None
    assert cell.interval.method == "paired"
    assert cell.interval.df == 2
    assert cell.interval.lo == pytest.approx(0.1166667 - 4.3027 / 60, abs=1e-6)  # 0.044955
    assert cell.interval.hi == pytest.approx(0.1166667 + 4.3027 / 60, abs=1e-6)  # 0.188378
    assert cell.spans_zero is False
    base = compare(results, "device").row("ttft_mean_ms").cells["device"]
    assert (base.n, base.delta, base.interval, base.spans_zero) == (3, None, None, None)
    assert base.mean == pytest.approx(233.3333, abs=1e-3)


def test_welch_when_trial_counts_differ() -> None:
    # Baseline 10, 12 (mean 11, var 2); other 15, 17, 19 (mean 17, var 4). A relative
    # change is a ratio of means, and the baseline's mean is itself uncertain (two trials):
    # Fieller's interval is the set of ratios r with (17 - 11 r)^2 <= t^2 (4/3 + r^2 2/2),
    # t at Welch-Satterthwaite's df of 17 - 11 r taken at r = 17/11. Checked here by a scan
    # over r with scipy's own t quantile, not by the product's formula.
    from scipy.stats import t as student_t

    results = (series("base", "output_tok_s", [10.0, 12.0])
               + series("other", "output_tok_s", [15.0, 17.0, 19.0]))
    cell = compare(results, "base").row("output_tok_s").cells["other"]
    assert cell.delta == pytest.approx(17 / 11 - 1)
    assert cell.interval is not None
    assert cell.interval.method == "welch"
    r0 = 17 / 11
    df = (4 / 3 + r0**2) ** 2 / ((4 / 3) ** 2 / 2 + r0**4 / 1)
    assert cell.interval.df == pytest.approx(df)
    t = student_t.ppf(0.975, df)
    inside = [r / 1e5 for r in range(0, 400_000)
              if (17 - 11 * r / 1e5) ** 2 <= t * t * (4 / 3 + (r / 1e5) ** 2)]
    assert cell.interval.lo == pytest.approx(inside[0] - 1, abs=2e-5)  # -0.0204
    assert cell.interval.hi == pytest.approx(inside[-1] - 1, abs=2e-5)  # +1.6131
    # Dividing Welch's interval of the difference by the baseline mean, as if that mean
    # were exact, gave (+0.093, +0.998): a win. With the baseline's own noise it is not one.
    assert cell.spans_zero is True


def test_a_baseline_too_noisy_to_bound_a_ratio_gives_no_interval() -> None:
    # Baseline 1 and 20: its mean is not clear of zero at two trials' noise, so the set of
    # ratios is unbounded; no interval is given rather than a wrong one.
    results = (series("base", "output_tok_s", [1.0, 20.0])
               + series("other", "output_tok_s", [15.0, 17.0, 19.0]))
    cell = compare(results, "base").row("output_tok_s").cells["other"]
    assert cell.delta == pytest.approx(17 / 10.5 - 1)
    assert cell.interval is None and cell.spans_zero is None


def test_host_memory_delta_is_absolute_in_gib() -> None:
    """Host memory since launch is already a difference: against a device baseline of a few
    GiB any host placement would be thousands of percent. Its Δ is in GiB, paired by hand:
    pairs 195, 196, 194 GiB; mean 195, sd 1, se 1/sqrt(3), t(2 df) = 4.3027."""
    results = (series("device", "host_delta_gib", [6.0, 6.5, 7.0])
               + series("host", "host_delta_gib", [201.0, 202.5, 201.0]))
    c = compare(results, "device")
    cell = c.row("host_delta_gib").cells["host"]
    assert c.row("host_delta_gib").metric.delta == "absolute"
    assert cell.delta == pytest.approx(195.0)
    assert cell.interval is not None and cell.interval.method == "paired"
    half = 4.3027 / 3 ** 0.5
    assert (cell.interval.lo, cell.interval.hi) == (pytest.approx(195 - half),
                                                    pytest.approx(195 + half))
    assert md_row(to_markdown(c), "host memory delta")[4] == (
        "201.5 (Δ +195.0 GiB [+192.5 GiB, +197.5 GiB])")
    # Welch, unequal trials: the difference of means, not divided by the baseline.
    welch = compare(series("device", "host_delta_gib", [6.0, 7.0])
                    + series("host", "host_delta_gib", [200.0, 202.0, 204.0]), "device")
    w = welch.row("host_delta_gib").cells["host"]
    assert w.delta == pytest.approx(195.5) and w.interval is not None
    assert w.interval.method == "welch"
    assert (w.interval.lo + w.interval.hi) / 2 == pytest.approx(195.5)
    # A baseline of zero GiB still gives a delta (a relative one would divide by it).
    zero = compare([run("a", 0, host_delta_gib=0.0), run("b", 0, host_delta_gib=3.0)], "a")
    assert zero.row("host_delta_gib").cells["b"].delta == pytest.approx(3.0)


def test_equal_counts_but_other_trials_use_welch() -> None:
    # Same number of trials but not the same ones: nothing to pair.
    results = [run("a", 0, output_tok_s=10.0), run("a", 1, output_tok_s=12.0),
               run("b", 1, output_tok_s=15.0), run("b", 2, output_tok_s=17.0)]
    cell = compare(results, "a").row("output_tok_s").cells["b"]
    assert cell.interval is not None and cell.interval.method == "welch"


def test_noisy_data_spans_zero() -> None:
    # Per-pair deltas +30%, -20%, +5%: the mean moves +5% but the noise is larger.
    results = (series("device", "output_tok_s", [1000.0, 1000.0, 1000.0])
               + series("host", "output_tok_s", [1300.0, 800.0, 1050.0]))
    c = compare(results, "device")
    cell = c.row("output_tok_s").cells["host"]
    assert cell.delta == pytest.approx(0.05)
    assert cell.interval is not None and cell.interval.lo < 0 < cell.interval.hi
    assert cell.spans_zero is True
    md = to_markdown(c)
    assert md_row(md, "output throughput")[4].endswith(" ~")
    assert "~ the 95% interval spans zero" in md


def test_no_interval_with_one_trial() -> None:
    results = [run("a", 0, output_tok_s=100.0), run("b", 0, output_tok_s=90.0)]
    cell = compare(results, "a").row("output_tok_s").cells["b"]
    assert cell.delta == pytest.approx(-0.1)
    assert cell.interval is None and cell.spans_zero is None
    assert "[" not in md_row(to_markdown(compare(results, "a")), "output throughput")[4]


# ----------------------------------------------------------------------------- None handling

def test_missing_values_stay_none() -> None:
    results = (series("device", "ttft_mean_s", [0.1, 0.2])
               + series("bench", "ttft_mean_s", [None, None]))
    c = compare(results, "device")
    cell = c.row("ttft_mean_ms").cells["bench"]
    assert (cell.n, cell.mean, cell.delta, cell.interval) == (0, None, None, None)
    # Nothing measured memory at all: None, never 0.
    for key in ("weights_gb", "kv_tokens", "kv_ratio", "host_delta_gib", "ready_s"):
        for s in ("device", "bench"):
            assert c.row(key).cells[s].mean is None
    assert md_row(to_markdown(c), "mean TTFT")[4] == "n/a"
    assert to_json(c)["rows"][0]["cells"]["device"]["mean"] is None


def test_missing_baseline_gives_no_delta() -> None:
    results = series("device", "ttft_mean_s", [None, None]) + series("x", "ttft_mean_s", [0.1, 0.2])
    cell = compare(results, "device").row("ttft_mean_ms").cells["x"]
    assert cell.mean == pytest.approx(150.0)
    assert cell.delta is None and cell.interval is None


def test_partly_missing_trial_falls_back_to_welch_and_shows_n() -> None:
    results = (series("a", "output_tok_s", [100.0, 110.0, 120.0])
               + series("b", "output_tok_s", [90.0, None, 100.0]))
    c = compare(results, "a")
    cell = c.row("output_tok_s").cells["b"]
    assert cell.n == 2 and cell.mean == pytest.approx(95.0)
    assert cell.interval is not None and cell.interval.method == "welch"
    assert "(n=2)" in md_row(to_markdown(c), "output throughput")[4]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="no results"):
        compare([], "device")
    with pytest.raises(ValueError, match="'host' is not among"):
        compare([run("device", 0)], "host")
    with pytest.raises(ValueError, match="negative"):
        compare([run("device", 0)], "device", price_per_gpu_hour=-1.0)


# ----------------------------------------------------------------------------- rows

def test_columns_in_first_seen_order() -> None:
    results = [run("host-prefetch", 0), run("device", 0), run("host", 0), run("device", 1)]
    c = compare(results, "device")
    assert c.scenarios == ("host-prefetch", "device", "host")
    assert c.trials == {"host-prefetch": 1, "device": 2, "host": 1}
    head = to_markdown(c).splitlines()[2]
    assert head.index("host-prefetch") < head.index("device (baseline)") < head.index("| host |")


def test_kv_ratio_row() -> None:
    results = [run("device", 0, kv_tokens=11_840_000), run("host", 0, kv_tokens=42_700_000)]
    c = compare(results, "device")
    assert c.row("kv_ratio").cells["host"].mean == pytest.approx(42.70 / 11.84)  # 3.606
    assert c.row("kv_ratio").cells["device"].mean == pytest.approx(1.0)
    assert c.row("kv_tokens").cells["host"].delta == pytest.approx(42.70 / 11.84 - 1)
    md = to_markdown(c)
    assert md_row(md, "KV capacity vs baseline")[3:5] == ["1.000x", "3.606x"]
    assert md_row(md, "KV capacity")[3] == "11.84M"


def test_cost_row() -> None:
    # 6.0 per GPU-hour x 4 GPUs / 3600 s / 2000 tok/s * 1e6 = 3.3333 per million tokens.
    results = [run("device", 0, gpus=4, output_tok_s=2000.0),
               run("host", 0, gpus=4, output_tok_s=1600.0),
               run("bench", 0, gpus=None, output_tok_s=1600.0)]
    c = compare(results, "device", price_per_gpu_hour=6.0)
    row = c.row("cost_per_mtok")
    assert row.metric.unit == "$/Mtok" and row.metric.better == "lower"
    assert row.cells["device"].mean == pytest.approx(6.0 * 4 / 3600 / 2000 * 1e6)
    assert row.cells["host"].mean == pytest.approx(6.0 * 4 / 3600 / 1600 * 1e6)  # 4.1667
    assert row.cells["host"].delta == pytest.approx(0.25)
    assert row.cells["bench"].mean is None  # no GPU count, no cost
    assert md_row(to_markdown(c), "cost per million output tokens")[3] == "3.3333"
    with pytest.raises(KeyError):
        compare(results, "device").row("cost_per_mtok")  # no price, no row


def test_row_metadata() -> None:
    c = compare([run("device", 0)], "device")
    meta = [(r.metric.key, r.metric.unit, r.metric.better) for r in c.rows]
    assert meta == [
        ("weights_gb", "GB", "lower"), ("kv_tokens", "tokens", "higher"),
        ("kv_ratio", "x", "higher"), ("host_delta_gib", "GiB", "lower"),
        ("ready_s", "s", "lower"), ("ttft_mean_ms", "ms", "lower"),
        ("tpot_mean_ms", "ms", "lower"), ("output_tok_s", "tok/s", "higher"),
        ("goodput_rps", "req/s", "higher"), ("joules_per_token", "J/tok", "lower"),
    ]


# ----------------------------------------------------------------------------- seed column

def _seed_like() -> list[RunResult]:
    out = []
    for i, (t, p, o) in enumerate([(0.410, 0.0218, 2410.0), (0.425, 0.0220, 2390.0),
                                   (0.440, 0.0222, 2400.0)]):
        out.append(run("device", i, "device", gpus=4, weights_gb=119.043, kv_tokens=11_840_000,
                       host_delta_gib=6.1, ready_s=125.0 + i, ttft_mean_s=t, tpot_mean_s=p,
                       output_tok_s=o))
        out.append(run("host-prefetch", i, "host-prefetch", gpus=4, weights_gb=72.201,
                       kv_tokens=42_700_000, host_delta_gib=201.0, ready_s=273.0 + i,
                       ttft_mean_s=t * 1.1557, tpot_mean_s=p * 1.1091, output_tok_s=o * 0.8564))
    return out


def test_reference_column_from_seeds() -> None:
    ref = reference.default()
    c = compare(_seed_like(), "device", reference=ref)
    md = to_markdown(c)
    assert md.splitlines()[2].endswith("| seed reference |")
    assert md_row(md, "mean TTFT")[-1] == "host-prefetch +15.57% vs device"
    assert md_row(md, "mean TPOT")[-1] == "host-prefetch +10.91% vs device"
    assert md_row(md, "output throughput")[-1] == "host-prefetch -14.36% vs device"
    assert md_row(md, "KV capacity vs baseline")[-1] == "host-prefetch 3.606x vs device"
    assert md_row(md, "weights per GPU")[-1] == "device 119.043 · host-prefetch 72.201"
    # Assumptions are marked: the host deltas, and the split of the ready-time range.
    assert md_row(md, "host memory delta")[-1] == "device 6.5† · host-prefetch 201.6†"
    assert md_row(md, "time to ready")[-1] == "device 125.04 · host-prefetch 273.07†"
    assert "† assumption" in md
    # The measured side reproduces the seed's deltas.
    assert md_row(md, "mean TTFT")[4].startswith("491.17 (Δ +15.57% [")
    ready = {f.placement: f for f in c.row("ready_s").reference}
    assert not ready["device"].assumed and ready["host-prefetch"].assumed
    assert ready["host-prefetch"].note  # the seeds file's why


def test_reference_covers_all_placements_when_runs_name_none() -> None:
    results = [run("a", 0, kv_tokens=1), run("b", 0, kv_tokens=2)]
    c = compare(results, "a", reference=reference.default())
    assert [f.placement for f in c.row("weights_gb").reference] == [
        "device", "host", "host-prefetch"]
    assert md_row(to_markdown(c), "KV capacity vs baseline")[-1] == (
        "host 3.606x vs device · host-prefetch 3.606x vs device")


def test_markdown_header_and_no_reference() -> None:
    c = compare(_seed_like(), "device")
    md = to_markdown(c)
    assert md.startswith("Baseline: device; 3 trial(s) per scenario.")
    assert "seed reference" not in md and "†" not in md
    assert "~ the 95% interval" not in md  # the seed-like runs are far outside the noise


# ----------------------------------------------------------------------------- JSON

def test_run_result_json_round_trip() -> None:
    r = run("host", 2, "host", gpus=4, weights_gb=72.201, kv_tokens=42_700_000,
            ttft_mean_s=0.5, completed=64, failed=1, duration_s=59.5, notes=("line=3", "x=1"))
    back = RunResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r
    assert isinstance(back.notes, tuple)
    # Measurements left out read as None.
    assert RunResult.from_dict({"scenario": "s", "source": "bench", "trial": 0}) == run("s", 0)


def test_run_result_from_dict_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="unknown keys"):
        RunResult.from_dict({"scenario": "s", "source": "x", "trial": 0, "ttft_mean": 1.0})
    with pytest.raises(ValueError, match="missing keys"):
        RunResult.from_dict({"scenario": "s"})
    with pytest.raises(ValueError, match="kv_tokens"):
        RunResult.from_dict({"scenario": "s", "source": "x", "trial": 0, "kv_tokens": "many"})


def test_comparison_to_json() -> None:
    c: Comparison = compare(_seed_like(), "device", price_per_gpu_hour=6.0,
                            reference=reference.default())
    data = json.loads(json.dumps(to_json(c), allow_nan=False))
    assert data["baseline"] == "device"
    assert data["scenarios"] == ["device", "host-prefetch"]
    rows = {r["key"]: r for r in data["rows"]}
    assert set(rows) >= {"weights_gb", "kv_ratio", "cost_per_mtok"}
    ttft = rows["ttft_mean_ms"]
    assert ttft["cells"]["host-prefetch"]["delta"] == pytest.approx(0.1557)
    assert ttft["cells"]["host-prefetch"]["interval"]["method"] == "paired"
    assert ttft["cells"]["host-prefetch"]["spans_zero"] is False
    assert ttft["reference"] == [{"placement": "host-prefetch", "value": 0.1557,
                                  "source": "seed", "note": "", "is_delta": True,
                                  "assumed": False}]
    host = rows["host_delta_gib"]["reference"]
    assert [f["assumed"] for f in host] == [True, True]


def test_every_view_of_a_quick_bench_says_it_is_a_first_look(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from engram_top.app.compare_screen import verdict_text
    from engram_top.compare.run_result import QUICK_CAVEAT, QUICK_NOTE
    from engram_top.export.plots import deltas_chart
    from engram_top.record.importers import load_runs
    quick = [run(s, i, placement=s, ttft_mean_s=t, notes=(QUICK_NOTE,))
             for s, ts in (("device", (0.35, 0.36)), ("host", (0.40, 0.41)))
             for i, t in enumerate(ts)]
    c = compare(quick, "device")
    assert c.quick == ("device", "host") and to_json(c)["quick"] == ["device", "host"]
    assert f"⚠ device, host: {QUICK_CAVEAT}." in to_markdown(c)
    assert f"⚠ device, host: {QUICK_CAVEAT}" in verdict_text(c).plain  # the `c` screen's
    assert deltas_chart(tmp_path, c, "device")  # its title says so (drawn, not read back)
    # A full bench's: no caveat anywhere.
    full = compare([dataclasses.replace(r, notes=()) for r in quick], "device")
    assert full.quick == () and QUICK_CAVEAT not in to_markdown(full)
    assert QUICK_CAVEAT not in verdict_text(full).plain
    # A report written before its runs said so: read with the caveat all the same.
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"results": [dataclasses.replace(q, notes=()).to_dict()
                                              for q in quick], "paired": {"quick": True}}))
    assert all(QUICK_NOTE in r.notes for r in load_runs(report))
    report.write_text(json.dumps({"results": [dataclasses.replace(q, notes=()).to_dict()
                                              for q in quick], "paired": {"quick": False}}))
    assert not any(r.notes for r in load_runs(report))


def test_a_files_runs_are_compared_with_their_own_files_baseline_never_across_workloads() -> None:
    from engram_top.compare.runs import comparison
    from engram_top.compare.verdict import from_comparison
    from engram_top.model.store import RunFacts
    # Live: the demo's device and host-prefetch, one run each, its own workload.
    live = [run(s, 0, placement=s, ttft_mean_s=t)
            for s, t in (("device", 0.080), ("host-prefetch", 0.270))]
    # A bench report: two rounds of each placement, another workload (long prompts).
    bench = [dataclasses.replace(run(s, i, placement=s, ttft_mean_s=t), source="bench:B.json")
             for s, ts in (("device", (0.500, 0.520)), ("host-prefetch", (0.580, 0.600)))
             for i, t in enumerate(ts)]
    from engram_top.compare.runs import own_column
    workloads = {own_column(r).scenario: "B.json" for r in bench}
    c = compare(live + [own_column(r) for r in bench], "device", workloads=workloads)
    assert c.against == {"device (B.json)": "device (B.json)",
                         "host-prefetch (B.json)": "device (B.json)"} and c.unpaired == {}
    ttft = c.row("ttft_mean_ms").cells
    # The file's host-prefetch against the file's device (+15.7%, paired over its two
    # rounds), not against the live device (+637%); the file's device has no change.
    assert ttft["host-prefetch (B.json)"].delta == pytest.approx(0.59 / 0.51 - 1)
    assert ttft["host-prefetch (B.json)"].interval is not None
    assert ttft["device (B.json)"].delta is None
    assert ttft["host-prefetch"].delta == pytest.approx(0.27 / 0.08 - 1)  # live vs live
    found = {(e.scenario, e.baseline, e.n) for e in from_comparison(c) if e.axis == "ttft"}
    assert found == {("host-prefetch", "device", 1),
                     ("host-prefetch (B.json)", "device (B.json)", 2)}
    md = to_markdown(c)
    assert "device (B.json) (its file's baseline)" in md
    assert ("host-prefetch (B.json): against device (B.json), of the same file (another "
            "workload than device's: never compared across workloads).") in md
    assert to_json(c)["against"]["host-prefetch (B.json)"] == "device (B.json)"
    # A file with no run of the baseline's placement (nor device): shown, compared with none.
    only = [dataclasses.replace(r, source="bench:C.json") for r in bench
            if r.placement == "host-prefetch"]
    c2 = compare(live + [own_column(r) for r in only], "device",
                 workloads={own_column(r).scenario: "C.json" for r in only})
    assert c2.unpaired == {"host-prefetch (C.json)": "C.json has no device run to compare it "
                           "with, and device ran another workload"}
    assert c2.row("ttft_mean_ms").cells["host-prefetch (C.json)"].delta is None
    # The session's comparison (`--compare-with B.json`) puts the file in a workload of
    # its own, whatever baseline the session chose.
    from engram_top.model.figures import RunFigures
    facts = RunFacts(scenario="device", placement="device", node="n", time_scale=1.0,
                     launched_wall=0.0, launched_at=0.0, state="stopped")
    facts.results = RunFigures.from_json({"gpus": 4, "ttft_mean_ms": 80.0})
    session = comparison([facts], extra=bench)
    assert session is not None and session.baseline == "device"
    assert session.against["host-prefetch (B.json)"] == "device (B.json)"
