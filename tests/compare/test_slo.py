"""The SLO arithmetic: percentiles, goodput, attainment and its interval, the sweep's highest
load within the SLOs and the crossover, each against a case computed by hand."""

from __future__ import annotations

import dataclasses

import pytest

from engram_top.compare import slo
from engram_top.compare.slo import LevelStats, Slo

SLOS = (Slo("ttft", 99, 2.0), Slo("tpot", 99, 0.05))


def test_percentiles_interpolate_between_ranks_as_numpy_does() -> None:
    assert slo.percentile([4, 1, 3, 2], 50) == 2.5
    assert slo.percentile([float(i) for i in range(1, 101)], 99) == pytest.approx(99.01)
    assert slo.percentile([7.0], 99) == 7.0 and slo.percentile([], 50) is None


def test_a_request_is_good_only_within_every_bound() -> None:
    assert slo.good({"ttft": 1.5, "tpot": 0.04, "e2e": 9.0}, SLOS)
    assert not slo.good({"ttft": 1.5, "tpot": 0.06, "e2e": 9.0}, SLOS)
    assert slo.good({"ttft": 2.0, "tpot": None, "e2e": 2.0}, SLOS)  # one token: no TPOT


def times(ttft: float, tpot: float) -> dict[str, float | None]:
    return {"ttft": ttft, "tpot": tpot, "e2e": ttft + 100 * tpot}


def test_goodput_and_attainment_count_failures_as_not_good() -> None:
    reqs = [times(1.0, 0.03)] * 7 + [times(3.0, 0.03)] * 2 + [times(1.0, 0.08)]
    lv = slo.level_stats(reqs, failed=1, duration_s=5.0, slos=SLOS, load=4, kind="concurrency",
                         modelled=False, output_tokens=1000)
    assert lv.good == 7 and lv.requests == 10 and lv.failed == 1
    assert lv.goodput_rps == pytest.approx(7 / 5) and lv.attainment == pytest.approx(7 / 11)
    # Wilson's interval of 7/11 (by hand: centre 0.6011, half-width 0.2473), times 11/5 req/s.
    assert lv.interval == pytest.approx((0.3538 * 11 / 5, 0.8483 * 11 / 5), abs=2e-3)
    assert lv.latency["ttft"]["p50"] == 1.0 and lv.latency["ttft"]["p99"] == pytest.approx(3.0)
    # p99 TTFT over 11 requests, the failed one at +inf: rank 9.9 lies between 3.0 and inf.
    assert not lv.meets_slo and lv.slo["p99 TTFT <= 2000 ms"]["value_s"] is None
    assert lv.output_tok_s == 200 and lv.request_per_s == 2


def test_a_level_meets_its_slos_by_percentile_not_by_every_request() -> None:
    reqs = [times(1.0, 0.03)] * 199 + [times(5.0, 0.03)]  # one slow in 200: p99 is fine
    lv = slo.level_stats(reqs, failed=0, duration_s=10.0, slos=SLOS, load=1, kind="concurrency",
                         modelled=True, output_tokens=0)
    assert lv.meets_slo and lv.attainment == pytest.approx(199 / 200)
    check = lv.slo["p99 TTFT <= 2000 ms"]
    # Rank 0.99 x 199 = 197.01 lies between two fast ones: the slow one is rank 199.
    assert check["met"] and check["value_s"] == 1.0


def stats(load: float, goodput: float, meets: bool = True) -> LevelStats:
    return LevelStats(load=load, kind="concurrency", modelled=load > 16, requests=10, failed=0,
                      duration_s=1.0, output_tok_s=None, request_per_s=None, latency={},
                      good=0, goodput_rps=goodput, attainment=None, interval=None, slo={},
                      meets_slo=meets)


def test_the_crossover_is_interpolated_where_the_difference_first_turns_positive() -> None:
    device = [stats(1, 1.0), stats(4, 3.5), stats(16, 10.0), stats(64, 4.0)]
    host = [stats(1, 0.9), stats(4, 3.2), stats(16, 11.0), stats(64, 12.0)]
    c = slo.crossover(device, host)
    assert c["where"] == "between" and c["between"] == [4, 16]
    assert c["at"] == pytest.approx(4 + 12 * 0.3 / 1.3) and c["modelled"] is False
    assert c["until"] is None  # ahead to the top of the sweep
    # The other way round: ahead from the start, behind from between 4 and 16 on.
    back = slo.crossover(host, device)
    assert back["where"] == "below" and back["at"] == 1
    assert back["until"] == pytest.approx(4 + 12 * 0.3 / 1.3)
    assert back["until_between"] == [4, 16]
    assert slo.crossover([stats(1, 2.0)], [stats(1, 1.0)])["at"] is None  # never ahead
    # Ahead in the middle only: where it first overtakes, and where it falls back.
    mid = [stats(1, 1.0), stats(4, 5.0), stats(16, 1.0), stats(64, 9.0)]
    c = slo.crossover(device, mid)
    assert c["between"] == [1, 4] and c["until_between"] == [4, 16]
    assert c["at"] == 1 and c["modelled"] is False  # level with the baseline at 1


def told(load: float, goodput: float, lo: float, hi: float) -> LevelStats:
    return dataclasses.replace(stats(load, goodput), interval=(lo, hi))


def test_levels_whose_goodput_intervals_overlap_are_level_not_a_crossover() -> None:
    # The sweep CI ran: at 0.01 req/s host-prefetch's 8 live requests came in 0.00001 req/s
    # ahead of device's, inside intervals [0, 0.04], and the crossover read "above device's
    # from the lowest load swept", hiding the one the model finds at 0.06-0.07.
    device = [told(0.01, 0.01174, 0, 0.0433), told(0.02, 0.0365, 0, 0.189),
              told(0.04, 0.03695, 0.0363, 0.0369), told(0.06, 0.05564, 0.0546, 0.0556),
              told(0.07, 0.0428, 0.0393, 0.0458), told(0.1, 0.03874, 0.0347, 0.0424),
              told(0.12, 0.03817, 0.0342, 0.0418)]
    host = [told(0.01, 0.01175, 0, 0.0426), told(0.02, 0.03533, 0, 0.181),
            told(0.04, 0.03655, 0.0359, 0.0365), told(0.06, 0.0538, 0.0528, 0.0538),
            told(0.07, 0.05428, 0.0533, 0.0543), told(0.1, 0.05728, 0.055, 0.0585),
            told(0.12, 0.02116, 0.0174, 0.0253)]
    c = slo.crossover(device, host)
    assert c["where"] == "between" and c["between"] == [0.06, 0.07]
    # -0.00184 at 0.06, +0.01148 at 0.07: zero at 0.06 + 0.01 x 0.00184 / 0.01332.
    assert c["at"] == pytest.approx(0.06 + 0.01 * 0.00184 / 0.01332)
    assert c["until_between"] == [0.1, 0.12] and c["until_how"] == "behind"
    assert c["until"] == pytest.approx(0.1 + 0.02 * 0.01854 / (0.01854 + 0.01701))
    # Ahead at the lowest load, then level where the intervals meet (the higher figure
    # still b's): "level again", at that level.
    c = slo.crossover([told(1, 1.0, 0.9, 1.1), told(2, 2.0, 1.8, 2.2)],
                      [told(1, 1.5, 1.2, 1.8), told(2, 2.1, 1.9, 2.3)])
    assert c["where"] == "below" and c["until"] == 2 and c["until_how"] == "level"
    # Level everywhere: never ahead, whichever figure is higher.
    assert slo.crossover(device[:2], host[:2])["at"] is None


def test_the_highest_load_within_the_slo_stops_at_the_first_break() -> None:
    levels = [stats(1, 1, True), stats(4, 1, True), stats(16, 1, False), stats(64, 1, True)]
    assert slo.highest_within(levels) == 4
    assert slo.highest_within([stats(1, 1, False)]) is None


def test_trials_merge_with_a_t_interval_of_their_goodput() -> None:
    a = slo.level_stats([times(1.0, 0.03)] * 4, 0, 2.0, SLOS, load=4, kind="concurrency",
                        modelled=False, output_tokens=10)
    b = slo.level_stats([times(1.0, 0.03)] * 6, 0, 2.0, SLOS, load=4, kind="concurrency",
                        modelled=False, output_tokens=10)
    m = slo.merge_trials([a, b])
    assert m.trials == 2 and m.goodput_rps == pytest.approx(2.5)
    # t(1 df) 12.706 x sd 0.7071 / sqrt 2 = 6.353 either side; never below 0.
    assert m.interval == pytest.approx((0.0, 2.5 + 6.353), abs=1e-3)


def test_a_plans_slo_table_is_checked_key_by_key() -> None:
    problems: list[str] = []
    got = slo.parse("plan.toml", {"ttft": {"percentile": 99, "max_ms": 2000},
                                  "tpot": {"max_ms": 50}}, problems)
    assert got == (Slo("ttft", 99, 2.0), Slo("tpot", 99, 0.05)) and not problems
    slo.parse("plan.toml", {"itl": {"max_ms": 1}, "ttft": {"percentile": 0, "max_ms": 5},
                            "e2e": {"max_ms": -1}, "tpot": 50}, problems)
    assert problems == [
        "plan.toml: slo.itl: unknown metric (one of ttft, tpot, e2e)",
        "plan.toml: slo.ttft.percentile: 0 is out of range: should be a percentile from "
        "0.001 to 100",
        "plan.toml: slo.e2e.max_ms: -1 is out of range: should be a number of milliseconds "
        "from 0.001 to 86400000",
        "plan.toml: slo.tpot: should be { percentile = 99, max_ms = N }"]
