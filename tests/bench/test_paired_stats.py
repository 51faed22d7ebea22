"""The bench's statistics against known answers: the exact Student t quantile (closed forms,
published tables, scipy where installed), the paired t, Fieller's ratio, the bootstrap over
rounds, the minimum detectable effect, the round order and the stop rule."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from engram_top.bench import ab
from engram_top.bench.ab import StopRule
from engram_top.bench.plan import PlanError, load_plan, quick_plan
from engram_top.compare import paired, stats
from engram_top.compare.run_result import RunResult

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- t quantile

@pytest.mark.parametrize("p", [0.6, 0.8, 0.9, 0.95, 0.975, 0.995, 0.9995, 1 - 1e-6])
def test_t_quantile_matches_its_closed_forms(p: float) -> None:
    # df 1 is Cauchy's: tan(pi (p - 1/2)); df 2: (2p - 1) / sqrt(2 p (1 - p)).
    assert stats.t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
    assert stats.t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)),
                                                   rel=1e-9)
    assert stats.t_quantile(1 - p, 3) == -stats.t_quantile(p, 3)


def test_t95_beyond_thirty_degrees_of_freedom_is_not_the_normals() -> None:
    # Published two-sided 95% values (Student t tables, to 7 significant digits).
    table = {3: 3.182446, 10: 2.228139, 30: 2.042272, 31: 2.039513, 40: 2.021075,
             60: 2.000298, 100: 1.983972, 120: 1.979930, 1000: 1.962339}
    for df, value in table.items():
        assert stats.t95(df) == pytest.approx(value, abs=1e-6), df
    assert stats.t95(31) > 1.96 and stats.t95(10**6) == pytest.approx(1.959966, abs=1e-6)
    assert stats.t_quantile(0.995, 5) == pytest.approx(4.032143, abs=1e-6)
    with pytest.raises(ValueError):
        stats.t95(0)
    with pytest.raises(ValueError):
        stats.t_quantile(1.0, 3)


def test_t_quantile_agrees_with_scipy_to_many_digits() -> None:
    st = pytest.importorskip("scipy.stats")
    for df in (1, 1.5, 2, 3, 4.7, 7.5, 12, 29, 30, 31, 45.2, 100, 1000, 1e5):
        for p in (0.55, 0.8, 0.9, 0.95, 0.975, 0.995, 0.9995):
            assert stats.t_quantile(p, df) == pytest.approx(float(st.t.ppf(p, df)),
                                                            rel=1e-10), (p, df)


def test_welch_uses_its_fractional_degrees_of_freedom() -> None:
    xs, bs = [10.0, 12.0, 11.0, 13.0], [20.0, 26.0, 21.0]
    iv = stats.welch(xs, bs, absolute=True)
    vx, vb = stats._var(xs) / 4, stats._var(bs) / 3
    df = (vx + vb) ** 2 / (vx**2 / 3 + vb**2 / 2)
    assert not df.is_integer() and iv.df == pytest.approx(df)
    half = stats.t_quantile(0.975, df) * math.sqrt(vx + vb)
    diff = 11.5 - 67 / 3
    assert (iv.lo, iv.hi) == pytest.approx((diff - half, diff + half))


# ----------------------------------------------------------------------------- paired

def test_paired_t_and_mde_by_hand() -> None:
    diffs = [1.0, 3.0, 2.0, 4.0]  # mean 2.5, sd sqrt(5/3)
    se = math.sqrt(5 / 3 / 4)
    lo, hi = paired.paired_t(diffs)  # type: ignore[misc]
    assert (lo, hi) == pytest.approx((2.5 - 3.182446 * se, 2.5 + 3.182446 * se), abs=1e-5)
    # t(0.975, 3) + t(0.8, 3) standard errors.
    assert paired.mde(diffs) == pytest.approx((3.182446 + 0.978472) * se, abs=1e-5)
    assert paired.paired_t([1.0]) is None and paired.mde([1.0]) is None


def test_fieller_carries_the_baselines_uncertainty() -> None:
    base = [100.0, 104.0, 97.0, 101.0, 98.0]
    other = [110.0, 116.0, 106.0, 113.0, 108.0]
    lo, hi = paired.fieller(base, other)  # type: ignore[misc]
    n, mb, mo = 5, sum(base) / 5, sum(other) / 5
    t2 = stats.t_quantile(0.975, 4) ** 2 / n
    # Each end solves (mo - r mb)^2 = t^2/n var(o - r b): the quadratic's roots.
    for r in (lo, hi):
        spread = stats._var([o - r * b for o, b in zip(other, base, strict=True)])
        assert (mo - r * mb) ** 2 == pytest.approx(t2 * spread, rel=1e-9)
    assert lo < mo / mb < hi
    # A baseline with no spread: Fieller is the t interval of the other side over it.
    flat = paired.fieller([100.0] * 5, other)
    half = stats.t_quantile(0.975, 4) * math.sqrt(stats._var(other) / 5)
    assert flat == pytest.approx(((mo - half) / 100, (mo + half) / 100))
    # It is wider than dividing the difference's interval by the baseline mean when the
    # baseline is noisy and the two sides do not move together.
    noisy_base = [80.0, 120.0, 95.0, 105.0, 100.0]
    lo2, hi2 = paired.fieller(noisy_base, [110.0, 108.0, 112.0, 109.0, 111.0])  # type: ignore[misc]
    d = paired.paired_t([o - b for o, b in zip([110.0, 108, 112, 109, 111], noisy_base,
                                               strict=True)])
    assert d is not None and hi2 - lo2 > (d[1] - d[0]) / 100
    # A baseline mean not clearly away from zero: the set is unbounded, no interval, and
    # the estimate says why.
    assert paired.fieller([1.0, -1.0, 2.0], [5.0, 6.0, 7.0]) is None
    mean = paired.estimates("x", {0: [1.0], 1: [-1.0], 2: [2.0]},
                            {0: [5.0], 1: [6.0], 2: [7.0]}, statistics=("mean",))[0]
    assert mean.rel_lo is None and mean.rel_method == paired.UNBOUNDED
    # The verdict says that reason, not "one run each": three rounds were run.
    from engram_top.compare import verdict
    found = verdict.decide(ab.evidence({"b": {"ttft_ms": [mean]}}, "a"), baseline="a")
    (finding,) = found.findings
    assert finding.outcome == verdict.NO_INTERVAL and finding.winner is None
    assert "Fieller's set is unbounded" in finding.text and "(n=3)" in finding.text
    assert "run each" not in finding.text and finding.short == "TTFT: ? n=3"


def test_bootstrap_over_rounds_is_seeded_and_exact_on_a_pure_shift() -> None:
    rng = random.Random(3)
    base = [[rng.gauss(100, 10) for _ in range(20)] for _ in range(8)]
    shifted = [[v + 7.0 for v in r] for r in base]
    for name in ("mean", "median", "p99"):
        got = paired.bootstrap(base, shifted, paired.STATISTICS[name], seed=5)
        assert got is not None and got[0] == pytest.approx((7.0, 7.0))
    other = [[rng.gauss(105, 10) for _ in range(20)] for _ in range(8)]
    one = paired.bootstrap(base, other, paired.STATISTICS["median"], seed=5)
    assert one == paired.bootstrap(base, other, paired.STATISTICS["median"], seed=5)
    assert one != paired.bootstrap(base, other, paired.STATISTICS["median"], seed=6)
    assert one is not None and one[0][0] < one[0][1]
    # Under five rounds there are too few distinct resamples for a percentile interval.
    assert paired.bootstrap(base[:4], other[:4], paired.STATISTICS["mean"]) is None


def test_estimates_say_which_method_gave_each_interval() -> None:
    rng = random.Random(1)
    base = {r: [rng.gauss(50, 5) for _ in range(12)] for r in range(6)}
    other = {r: [v * 1.2 + rng.gauss(0, 3) for v in vs] for r, vs in base.items()}
    found = {e.statistic: e for e in paired.estimates("ttft_ms", base, other, seed=2)}
    mean = found["mean"]
    assert mean.rounds == 6 and mean.rel == pytest.approx(0.2, abs=0.03)
    assert mean.method.startswith("bootstrap over rounds") and "seed 2" in mean.method
    assert mean.rel_method == paired.FIELLER and mean.rel_lo < mean.rel < mean.rel_hi  # type: ignore[operator]
    assert mean.t_lo is not None and mean.mde is not None and mean.holds_zero is False
    assert found["p99"].rel_method == paired.BOOT_RATIO and found["p99"].mde is None
    # Three rounds: the means fall back on the paired t, medians and p99s get no interval.
    few = {e.statistic: e for e in paired.estimates(
        "ttft_ms", {r: base[r] for r in range(3)}, {r: other[r] for r in range(3)})}
    assert few["mean"].method == paired.T_METHOD and few["mean"].lo == few["mean"].t_lo
    assert few["median"].lo is None and "5 rounds" in few["median"].method
    # Rounds only one side measured are left out of the pairing.
    assert paired.estimates("ttft_ms", {0: [1.0]}, {1: [2.0]}) == []


# ----------------------------------------------------------------------------- rounds

def test_rounds_alternate_their_order() -> None:
    assert ab.pattern(["A", "B"], 4) == "A B | B A | A B | B A"
    assert ab.order(["A", "B", "C"], 1) == ("C", "B", "A")


def _rows(shift: float, noise: float, rounds: int) -> tuple[list[dict], list[RunResult]]:
    rng = random.Random(7)
    rows = []
    for r in range(rounds):
        for name, add in (("A", 0.0), ("B", shift)):
            for _ in range(10):
                rows.append({"scenario": name, "trial": r, "status": "ok",
                             "ttft_ms": 100 + add + rng.gauss(0, noise)})
    return rows, []


def test_the_stop_rule_stops_once_the_interval_decides() -> None:
    rule = StopRule("ttft_ms", "mean", None, min_rounds=3)
    rows, results = _rows(30.0, 2.0, 3)
    assert ab.stop_reason(rule, ["A", "B"], "A", rows[:40], results, 2, 1) is None  # too soon
    why = ab.stop_reason(rule, ["A", "B"], "A", rows, results, 3, 1)
    assert why == "stopped after 3 rounds (B: excludes zero)"
    same, _ = _rows(0.0, 0.5, 4)
    assert ab.stop_reason(rule, ["A", "B"], "A", same, [], 4, 1) is None
    within = StopRule("ttft_ms", "mean", 0.05, min_rounds=3)
    assert ab.stop_reason(within, ["A", "B"], "A", same, [], 4, 1) == \
        "stopped after 4 rounds (B: within ±5%)"


def test_a_stop_table_is_checked_and_quick_cuts_the_plan(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    base = (ROOT / "scenarios" / "demo-bench.toml").read_text().replace(
        'scenarios_file = "demo.toml"', f'scenarios_file = "{ROOT / "scenarios" / "demo.toml"}"')
    plan.write_text(base + '\n[stop]\nfigure = "ttfb"\nstatistic = "p50"\nmin_rounds = 1\n')
    with pytest.raises(PlanError) as err:
        load_plan(plan)
    text = str(err.value)
    assert f"{plan}: stop.figure: one of ttft, tpot, e2e, throughput, got 'ttfb'" in text
    assert "stop.statistic: one of mean, median, p99, got 'p50'" in text
    assert "stop.min_rounds:" in text
    plan.write_text(base + '\n[stop]\nfigure = "tpot"\nmargin_pct = 5\n')
    loaded = load_plan(plan)
    assert loaded.stop == StopRule("tpot_ms", "mean", 0.05, 3)
    quick = quick_plan(loaded)
    assert quick.trials == 2 and quick.quick and quick.stop is None
    assert [lv.requests for lv in quick.workload.levels] == [4, 4, 4]
    assert quick.workload.output_len == 48 and quick.serve_scale == 0.25
    assert quick.time_scale == 0.01 and quick.workload.warmup_requests == 1
    # A quick sweep: its live levels 100x faster with short answers; its modelled levels
    # keep the plan's lengths and requests, so its crossover is the full plan's.
    sweep = quick_plan(load_plan(ROOT / "scenarios" / "demo-sweep.toml"))
    assert sweep.workload.output_len == 16384 and sweep.live_output_len == 48
    assert sweep.sweep is not None and sweep.sweep.modelled_requests == 200
    assert sweep.sweep.requests == 4 and sweep.serve_scale == 0.01
