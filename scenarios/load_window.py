"""What a closed-loop load saw of its own requests over the last window: each request's TPOT
(its spread over independent requests, as bench_serving defines TPOT), and its output
tokens and its requests within the SLO in equal time bins (the spread of throughput and of
goodput from one bin to the next).

A live run measured once has no trials to spread. The server's TTFT histogram gives the
window's requests (compare.live_interval), but its inter-token histogram counts tokens, not
requests, and its output counter has no spread at all. The load that sends the requests
knows each one: this is what it reports, so a run the dashboard drives gets intervals for
TPOT, throughput and goodput as well. Pure data and arithmetic; the model reads the type.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

# Throughput's spread: the window cut into this many equal bins (six 5 s bins of a 30 s
# window: each long against one chat request, enough of them for a t).
BINS = 6


@dataclass(frozen=True)
class LoadWindow:
    """The load's requests that ended in the last ``window_s`` seconds.

    ``tpot_*``: the mean and standard deviation of their TPOTs over ``tpot_n`` requests
    (requests of one output token have none). ``bin_tokens``: the output tokens of the
    requests that ended in each of BINS equal bins of the window, oldest first; None until
    the load has run a whole window (a part-filled first bin would read as a slow one).
    ``bin_good``: the requests in each bin within every SLO bound (goodput's), where the
    load has bounds; else None.
    Times are the load's clock; ``in_node_time`` converts a simulated node's."""

    window_s: float
    tpot_n: int = 0
    tpot_mean_s: float | None = None
    tpot_sd_s: float | None = None
    bin_tokens: tuple[int, ...] | None = None
    bin_good: tuple[int, ...] | None = None

    @property
    def bin_s(self) -> float:
        return self.window_s / BINS

    def tok_s(self) -> tuple[float, float, int] | None:
        """Output tokens per second over the bins: their mean, standard deviation and
        count; None before a whole window."""
        return self._rate(self.bin_tokens)

    def good_rps(self) -> tuple[float, float, int] | None:
        """Requests within every SLO per second (goodput) over the bins, as tok_s."""
        return self._rate(self.bin_good)

    def _rate(self, counts: tuple[int, ...] | None) -> tuple[float, float, int] | None:
        if not counts or len(counts) < 2:
            return None
        rates = [t / self.bin_s for t in counts]
        mean = sum(rates) / len(rates)
        sd = math.sqrt(sum((r - mean) ** 2 for r in rates) / (len(rates) - 1))
        return mean, sd, len(rates)

    def in_node_time(self, serve: float) -> LoadWindow:
        """The figures in the node's time, for a node that serves ``serve`` times as long
        as it takes here (a simulated node's --serve-scale; 1 for a real one): its TPOTs
        are longer by 1/serve and its bins span window_s / serve node seconds."""
        if serve == 1.0:
            return self
        return LoadWindow(
            window_s=self.window_s / serve, tpot_n=self.tpot_n,
            tpot_mean_s=None if self.tpot_mean_s is None else self.tpot_mean_s / serve,
            tpot_sd_s=None if self.tpot_sd_s is None else self.tpot_sd_s / serve,
            bin_tokens=self.bin_tokens, bin_good=self.bin_good)

    def to_json(self) -> dict[str, Any]:
        return {"window_s": self.window_s, "tpot_n": self.tpot_n,
                "tpot_mean_s": self.tpot_mean_s, "tpot_sd_s": self.tpot_sd_s,
                "bin_tokens": None if self.bin_tokens is None else list(self.bin_tokens),
                "bin_good": None if self.bin_good is None else list(self.bin_good)}

    @classmethod
    def from_json(cls, data: Any) -> LoadWindow:
        """Inverse of to_json; ValueError naming the field for anything else."""
        if not isinstance(data, dict):
            raise ValueError(f"window: expected an object, got {type(data).__name__}")
        window_s = _positive(data, "window_s")
        n = data.get("tpot_n", 0)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"window.tpot_n: expected a count, got {n!r}")
        return cls(window_s=window_s, tpot_n=n, tpot_mean_s=_seconds(data, "tpot_mean_s"),
                   tpot_sd_s=_seconds(data, "tpot_sd_s"), bin_tokens=_bins(data, "bin_tokens"),
                   bin_good=_bins(data, "bin_good"))


def _bins(data: dict[str, Any], key: str) -> tuple[int, ...] | None:
    bins = data.get(key)
    if bins is None:
        return None
    if not isinstance(bins, list) or len(bins) != BINS or any(
            isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in bins):
        raise ValueError(f"window.{key}: expected {BINS} counts, got {bins!r}")
    return tuple(bins)


def _positive(data: dict[str, Any], key: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"window.{key}: expected seconds > 0, got {value!r}")
    return float(value)


def _seconds(data: dict[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        raise ValueError(f"window.{key}: expected seconds >= 0, got {value!r}")
    return float(value)


class RequestWindow:
    """The requests a load completed in the last ``window_s`` seconds of its clock: what it
    needs of each (when it ended, its TPOT, its output tokens), dropped once out of the
    window, so its size follows the rate, never the run's length."""

    def __init__(self, window_s: float, started: float, slo: bool = False) -> None:
        if not window_s > 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self.started = started  # when the load began: bins wait for a whole window
        self.slo = slo  # whether the load has SLO bounds: goodput's bins
        self._ended: deque[tuple[float, float | None, int, bool]] = deque()

    def add(self, ended: float, tpot: float | None, output_tokens: int,
            good: bool = False) -> None:
        self._ended.append((ended, tpot, output_tokens, good))

    def figures(self, now: float) -> LoadWindow:
        start = now - self.window_s
        while self._ended and self._ended[0][0] < start:
            self._ended.popleft()
        tpots = [tpot for _, tpot, _, _ in self._ended if tpot is not None]
        n = len(tpots)
        mean = sum(tpots) / n if n else None
        sd = (math.sqrt(sum((x - mean) ** 2 for x in tpots) / (n - 1))
              if mean is not None and n > 1 else None)
        bins = good = None
        if now - self.started >= self.window_s:
            counts, goods = [0] * BINS, [0] * BINS
            width = self.window_s / BINS
            for ended, _, tokens, ok in self._ended:
                i = min(BINS - 1, int((ended - start) / width))
                counts[i] += tokens
                goods[i] += ok
            bins, good = tuple(counts), tuple(goods) if self.slo else None
        return LoadWindow(window_s=self.window_s, tpot_n=n, tpot_mean_s=mean, tpot_sd_s=sd,
                          bin_tokens=bins, bin_good=good)
