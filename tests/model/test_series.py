"""A series' recent points, read from the newest back, are the points the whole-history
reading gave: for every window start, before, inside and past both tiers."""

from __future__ import annotations

import random

import pytest

from engram_top.model.store import Series


def _filled(n: int, step: float = 1.0, fine_len: int = 600) -> Series:
    series = Series(fine_len=fine_len, coarse_every=10, coarse_len=720)
    rng = random.Random(n)
    for i in range(n):
        series.add(i * step, rng.uniform(0, 100))
    return series


@pytest.mark.parametrize("n", [0, 1, 9, 10, 599, 600, 601, 2_000, 8_000])
def test_the_recent_points_are_those_the_whole_history_gives(n: int) -> None:
    series = _filled(n)
    every = series.points()
    starts = [-1.0, 0.0, 0.5, n / 2, n - 30.5, n - 30.0, n - 1.0, n + 5.0]
    if every:
        starts += [every[0][0], every[len(every) // 2][0], every[-1][0]]
    for start in starts:
        before = [p for p in every if p[0] <= start]
        after = [p for p in every if p[0] > start]
        assert series.around(start) == (before[-1] if before else None, after), start
        assert series.fine_since(start) == [p for p in series.fine if p[0] >= start], start


@pytest.mark.parametrize("last", [None, 0, 1, 60, 600, 10_000])
def test_the_last_values_are_the_tail_of_the_fine_tier(last: int | None) -> None:
    series = _filled(1_000)
    whole = [v for _, v in series.fine]
    assert series.values(last) == (whole if last is None else whole[-last:] if last else [])


def test_around_reaches_into_the_coarse_tier_when_the_window_is_older_than_the_fine() -> None:
    series = _filled(1_000, fine_len=20)  # fine: t 980-999; coarse: means of ten
    before, after = series.around(950.0)
    assert before is not None and before[0] <= 950.0
    assert [p[0] for p in after][:3] == [959.0, 969.0, 979.0]  # coarse, then the fine tier
    assert after[3:] == list(series.fine)
