"""The load's own window (scenarios.load_window): each request's TPOT and its output tokens
in six bins over the last window, by hand; its JSON, as the load process sends it; and its
figures in a simulated node's time."""

from __future__ import annotations

import math

import pytest

from scenarios.load_window import BINS, LoadWindow, RequestWindow


def test_tpots_and_bins_of_the_last_window_by_hand() -> None:
    w = RequestWindow(30.0, started=100.0, slo=True)
    w.add(101.0, 0.010, 50, True)  # out of the window by the time it is read (t=140)
    w.add(112.0, 0.020, 100, True)  # bin 0: [110, 115)
    w.add(114.9, None, 1, True)  # one token: no TPOT, its token still counts
    w.add(126.0, 0.030, 200, False)  # bin 3: [125, 130), outside the SLO
    w.add(139.9, 0.040, 300, True)  # bin 5
    got = w.figures(140.0)
    assert got.window_s == 30.0 and got.tpot_n == 3
    assert got.tpot_mean_s == pytest.approx(0.030)
    assert got.tpot_sd_s == pytest.approx(0.010)  # sample sd of 20, 30, 40 ms
    assert got.bin_tokens == (101, 0, 0, 200, 0, 300)
    rate = got.tok_s()
    assert rate is not None
    rates = [t / 5.0 for t in (101, 0, 0, 200, 0, 300)]
    mean = sum(rates) / 6
    assert rate == pytest.approx(
        (mean, math.sqrt(sum((r - mean) ** 2 for r in rates) / 5), 6))
    assert rate[0] * 30.0 == pytest.approx(601)  # every token of the window, once
    assert got.bin_good == (2, 0, 0, 0, 0, 1)
    good = got.good_rps()
    assert good is not None and good[0] == pytest.approx(3 / 30) and good[2] == 6
    # A load with no SLO bounds counts no goodput.
    plain = RequestWindow(30.0, started=100.0)
    plain.add(112.0, 0.02, 100)
    assert plain.figures(140.0).bin_good is None and plain.figures(140.0).good_rps() is None


def test_no_bins_before_a_whole_window_and_no_spread_from_one_request() -> None:
    w = RequestWindow(30.0, started=100.0)
    w.add(110.0, 0.02, 10)
    got = w.figures(120.0)  # 20 s of a 30 s window run: a first bin would be part-filled
    assert got.bin_tokens is None and got.tok_s() is None
    assert (got.tpot_n, got.tpot_mean_s, got.tpot_sd_s) == (1, 0.02, None)
    empty = RequestWindow(30.0, started=0.0).figures(100.0)
    assert (empty.tpot_n, empty.tpot_mean_s, empty.bin_tokens) == (0, None, (0,) * BINS)
    with pytest.raises(ValueError, match="positive"):
        RequestWindow(0.0, started=0.0)


def test_the_window_keeps_only_what_it_needs() -> None:
    w = RequestWindow(30.0, started=0.0)
    for i in range(10_000):  # an hour at ~3 requests a second
        w.add(i * 0.36, 0.02, 10)
    w.figures(3600.0)
    assert len(w._ended) <= 30 / 0.36 + 1


def test_json_both_ways_and_bad_fields_named() -> None:
    w = LoadWindow(window_s=30.0, tpot_n=12, tpot_mean_s=0.025, tpot_sd_s=0.004,
                   bin_tokens=(1, 2, 3, 4, 5, 6), bin_good=(0, 1, 0, 1, 0, 1))
    assert LoadWindow.from_json(w.to_json()) == w
    bare = LoadWindow(window_s=30.0)
    assert LoadWindow.from_json(bare.to_json()) == bare
    for bad, field in [({"window_s": 0}, "window.window_s"),
                       ({"window_s": 30, "tpot_n": -1}, "window.tpot_n"),
                       ({"window_s": 30, "tpot_mean_s": "fast"}, "window.tpot_mean_s"),
                       ({"window_s": 30, "tpot_sd_s": float("nan")}, "window.tpot_sd_s"),
                       ({"window_s": 30, "bin_tokens": [1, 2]}, "window.bin_tokens"),
                       ({"window_s": 30, "bin_good": [True] * 6}, "window.bin_good"),
                       ([1], "window: expected an object")]:
        with pytest.raises(ValueError, match=field):
            LoadWindow.from_json(bad)


def test_a_simulated_nodes_figures_in_its_own_time() -> None:
    # --serve-scale 0.02: the node takes 50x as long as it takes here.
    w = LoadWindow(window_s=30.0, tpot_n=4, tpot_mean_s=0.001, tpot_sd_s=0.0002,
                   bin_tokens=(50,) * BINS)
    node = w.in_node_time(0.02)
    assert node.tpot_mean_s == pytest.approx(0.05) and node.tpot_sd_s == pytest.approx(0.01)
    assert node.window_s == pytest.approx(1500.0) and node.bin_tokens == w.bin_tokens
    here, there = w.tok_s(), node.tok_s()
    assert here is not None and there is not None
    assert there[0] == pytest.approx(here[0] * 0.02)  # tokens per node second
    assert w.in_node_time(1.0) is w
