"""SGLang's HiCache counters on /metrics: bytes loaded back (host -> GPU) and backed up
(GPU -> host), tokens dropped for host pressure, tokens evicted; as totals (one page, for
inspect-metrics) and as rates over the collector's window (ServerData's hicache_* fields).

Names as SGLang's radix-cache metrics collector declares them (sglang: prefix; a page that
writes sglang_ is renamed before this reads it), each with and without the _total that
OpenMetrics pages add; the drop counter carries a reason label (only host_pressure counts
here) and, like load-back, may carry a pool label (summed).
"""

from __future__ import annotations

import math
from typing import Any

from collectors import promtext
from collectors.figure_bounds import index
from collectors.sglang.families import counter_figure, find
from collectors.windowed import WindowedRate

COUNTERS: dict[str, tuple[str, ...]] = {
    "hicache_load_back_bytes": ("sglang:load_back_bytes_total", "sglang:load_back_bytes"),
    "hicache_backup_bytes": ("sglang:hicache_backup_bytes_total", "sglang:hicache_backup_bytes"),
    "hicache_dropped_host_pressure": ("sglang:hicache_dropped_tokens_total",
                                      "sglang:hicache_dropped_tokens"),
    "evicted_tokens": ("sglang:evicted_tokens_total", "sglang:evicted_tokens"),
}
DROP_REASON = "host_pressure"
MAX_RANKS = 256  # tp_rank labels kept apart; a page with more is not a node's


def _only_reason(fam: promtext.Family, reason: str) -> promtext.Family:
    """The family's series for one drop reason. A drop counter without a reason label (an
    older page) counts whole: it has no other reason to tell apart."""
    labelled = [s for s in fam.samples if any(k == "reason" for k, _ in s.labels)]
    if not labelled:
        return fam
    keep = [s for s in labelled if (dict(s.labels).get("reason") == reason)]
    return promtext.Family(fam.name, fam.type, fam.help, keep)


def totals(fams: dict[str, promtext.Family]) -> dict[str, float | None]:
    """Each HiCache counter's total on this page (over the schedulers that count); None for
    a counter the page does not have. A drop counter with other reasons only: 0."""
    out: dict[str, float | None] = {}
    for key, names in COUNTERS.items():
        fam = find(fams, names)
        if fam is None:
            out[key] = None
            continue
        if key == "hicache_dropped_host_pressure":
            fam = _only_reason(fam, DROP_REASON)
            total = counter_figure(fam)
            out[key] = 0.0 if total is None else total
        else:
            out[key] = counter_figure(fam)
    return out


def by_rank(fams: dict[str, promtext.Family]) -> dict[int, float]:
    """The load-back bytes counter by tp_rank (summed over its other labels), where the page
    labels it so (SGLang with metrics for all schedulers): rank r's copy crosses GPU r's link."""
    fam = find(fams, COUNTERS["hicache_load_back_bytes"])
    out: dict[int, float] = {}
    if fam is None:
        return out
    for s in fam.samples:
        label = dict(s.labels).get("tp_rank")
        rank = None if label is None else index(label)
        if s.name.endswith("_created") or rank is None or not math.isfinite(s.value):
            continue
        if rank in out or len(out) < MAX_RANKS:
            out[rank] = out.get(rank, 0.0) + s.value
    return out


class HiCacheRates:
    """The counters' per-second increase over the window, scrape after scrape."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._rates = {k: WindowedRate(window_s) for k in COUNTERS}
        self._ranks: dict[int, WindowedRate] = {}

    def add(self, now: float, fams: dict[str, promtext.Family]) -> dict[str, Any]:
        """Take one page; give the ServerData fields as of ``now``."""
        for key, total in totals(fams).items():
            if total is not None and math.isfinite(total):  # a NaN would poison the window
                self._rates[key].add(now, total)
        for rank, total in by_rank(fams).items():
            self._ranks.setdefault(rank, WindowedRate(self.window_s)).add(now, total)
        ranks = {r: rate for r, w in sorted(self._ranks.items())
                 if (rate := w.rate(now)) is not None}
        return {f"{key}_per_s": self._rates[key].rate(now) for key in COUNTERS} | {
            "hicache_load_back_by_rank": ranks}
