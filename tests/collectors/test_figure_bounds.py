"""The rule for figures from outside, in one place (collectors/figure_bounds.py), and the
drawing that never trusts them anyway: quick, in-process."""

from __future__ import annotations

import dataclasses

from collectors.figure_bounds import bounded, index
from collectors.readings import ServerData
from engram_top.app.panels.drawing import bar, sparkline


def test_an_index_is_ascii_digits_within_its_bound() -> None:
    assert [index(t) for t in ("0", " 7 ", "4096", "4097", "²", "٣", "-1", "", "1e3")] == \
        [0, 7, 4096, None, None, None, None, None, None]
    assert index("9" * 400) is None  # never converted


def test_a_figure_outside_its_range_is_none_with_its_reason_and_the_rest_kept() -> None:
    data = ServerData(url="u", healthy=True, tp_size=10**400, token_usage=1e308,
                      num_running_reqs=3.0, max_total_num_tokens=8192, weight_gb=-5.0,
                      server_args={"tp_size": 1e30, "page_size": 64, "attention_backend": "fa3"},
                      ranks={0: {"weight_gb": 1e308, "kv_cache_gb": 1.5}, 10**9: {}},
                      hicache_load_back_by_rank={0: 1e20, 1: 5.0})
    out = bounded(data)
    assert (out.tp_size, out.token_usage, out.weight_gb) == (None, None, None)
    assert (out.num_running_reqs, out.max_total_num_tokens) == (3.0, 8192)
    assert out.unavailable == {
        "tp_size": "n/a: an integer of more than 18 digits is outside 1..4096",
        "token_usage": "n/a: 1e+308 is outside 0..10",
        "weight_gb": "n/a: -5 is outside 0..100000",
        "server_args.tp_size": "n/a: 1e+30 is outside 1..4096"}
    assert out.server_args == {"page_size": 64, "attention_backend": "fa3"}
    assert out.ranks == {0: {"kv_cache_gb": 1.5}}
    assert out.hicache_load_back_by_rank == {1: 5.0}
    # NaN and Inf as before (finite()), and a reading within every range is the same object.
    assert bounded(dataclasses.replace(data, token_usage=float("nan"))).unavailable[
        "token_usage"] == "n/a: NaN"
    fine = ServerData(url="u", healthy=True, tp_size=4, token_usage=0.93)
    assert bounded(fine) is fine


def test_bars_and_sparklines_draw_any_number() -> None:
    assert bar([(1e308, "red")], 1.0).plain == "█" * 24
    assert bar([(5.0, "red")], float("inf")).plain == "░" * 24
    assert bar([(float("nan"), "red"), (0.5, "blue")], 1.0).plain == "█" * 12 + "░" * 12
    assert len(sparkline([1e308, -1e308, 0.0, float("nan")]).plain) == 3
    assert sparkline([1.0, 2.0, 3.0]).plain == "▁▄█"


def test_a_report_s_impossible_figures_are_left_out_and_said() -> None:
    """A report.json's NaN was already no figure; -1e308 ms and a negative start-up made
    "host wins (-inf%)" in compare and the verdict strip."""
    import pytest

    from engram_top.compare.run_result import RunResult
    run = RunResult.from_dict({"scenario": "host", "source": "bench", "trial": 0,
                               "ready_s": -5.0, "ttft_mean_s": -1e308, "tpot_mean_s": 0.05,
                               "kv_tokens": 10**30, "output_tok_s": float("nan")})
    assert (run.ready_s, run.ttft_mean_s, run.kv_tokens, run.output_tok_s) == \
        (None, None, None, None)
    assert run.tpot_mean_s == 0.05
    assert run.notes == (
        "refused: kv_tokens an integer of more than 15 digits: outside 0..1e+15",
        "refused: ready_s -5: outside 0..1e+07", "refused: ttft_mean_s -1e+308: outside 0..1e+06")
    with pytest.raises(ValueError, match=r"RunResult.trial: -1 is outside 0..1e\+06"):
        RunResult.from_dict({"scenario": "host", "source": "bench", "trial": -1})
