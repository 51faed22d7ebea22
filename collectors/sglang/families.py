"""Reading figures out of SGLang's /metrics families: which schedulers' series count (one
per DP rank), a gauge's and a counter's total over them, a figure's first known spelling.
Apart from the collector so that other readers of the page (HiCache's) share them."""

from __future__ import annotations

import functools
import math

from collectors import promtext
from collectors.figure_bounds import index
from collectors.readings import spell

# How one scheduler's gauges add up over the DP ranks: counts add, usages take the fullest
# (the bottleneck), a hit rate the mean.
SUM, MAX, MEAN = "sum", "max", "mean"

# Labels that split one scheduler's figure without making it another scheduler's.
_DP, _REPLICAS, _PRIORITY = "dp_rank", ("pp_rank", "tp_rank"), "priority"


def _label(labels: promtext.Labels, name: str) -> str | None:
    for k, v in labels:
        if k == name:
            return v
    return None


def _rank_key(labels: promtext.Labels) -> tuple[int, ...] | None:
    """The series' (PP, TP) ranks, -1 for a label the page lacks; None where a label is no
    rank at all ("²", a 30-digit number): that series is no scheduler's."""
    out = []
    for name in _REPLICAS:
        v = _label(labels, name)
        i = -1 if v is None else index(v)
        if i is None:
            return None
        out.append(i)
    return tuple(out)


def primary(label_sets: list[promtext.Labels]) -> dict[str, list[promtext.Labels]]:
    """The series that count, by DP rank: one scheduler per DP rank (its TP and PP ranks
    report the same state: the lowest ones stand for it), and where a page splits a figure
    by priority, its total series (``priority=""``), else every priority."""
    key = tuple(label_sets)
    found = _primary_kept(key) if len(key) <= KEEP_SETS else _primary(key)
    return {dp: list(members) for dp, members in found.items()}


# Every gauge, counter and histogram of every page asks, and a server's label sets are the
# same from one page to the next: worked out once for each (a few dozen a server). A family
# of more label sets than a real server's (a hostile page's) is worked out each time, so the
# cache never holds pages.
KEEP_SETS = 256


def _primary(label_sets: tuple[promtext.Labels, ...]
             ) -> dict[str, tuple[promtext.Labels, ...]]:
    if any(_label(ls, _PRIORITY) is not None for ls in label_sets):
        total = [ls for ls in label_sets if _label(ls, _PRIORITY) == ""]
        label_sets = tuple(total) or label_sets
    keyed = [(ls, key) for ls in label_sets if (key := _rank_key(ls)) is not None]
    groups: dict[str, list[tuple[promtext.Labels, tuple[int, ...]]]] = {}
    for ls, key in keyed:
        groups.setdefault(_label(ls, _DP) or "", []).append((ls, key))
    out: dict[str, tuple[promtext.Labels, ...]] = {}
    for dp, members in groups.items():
        low = min(key for _, key in members)
        out[dp] = tuple(ls for ls, key in members if key == low)
    return out


_primary_kept = functools.lru_cache(maxsize=64)(_primary)


def find(fams: dict[str, promtext.Family], names: tuple[str, ...]) -> promtext.Family | None:
    """The first of a figure's spellings that the page has."""
    for name in names:
        fam = fams.get(name)
        if fam is not None:
            return fam
    return None


def gauge_figure(fam: promtext.Family | None, how: str) -> tuple[float | None, str | None]:
    """One figure of a gauge family over its schedulers, or None and why ("n/a: NaN from
    rank 0") when every sample that counts is NaN or infinite: a broken exporter is a
    reading with a reason, not a number."""
    if fam is None:
        return None, None
    by_labels: dict[promtext.Labels, promtext.Sample] = {}
    for sample in fam.samples:
        if sample.name == fam.name:
            by_labels.setdefault(sample.labels, sample)  # a series given twice: its first
    if not by_labels:
        return None, None
    values: list[float] = []
    bad: promtext.Sample | None = None
    for members in primary(list(by_labels)).values():
        finite_ones = [by_labels[ls].value for ls in members
                       if math.isfinite(by_labels[ls].value)]
        if finite_ones:
            values.append(sum(finite_ones))  # several priorities without a total: add up
        else:
            bad = bad or by_labels[members[0]]
    if not values:
        if bad is None:
            return None, None
        rank = _label(bad.labels, "tp_rank")
        return None, f"n/a: {spell(bad.value)} from {'rank ' + rank if rank else 'the server'}"
    if how == SUM:
        return sum(values), None
    if how == MAX:
        return max(values), None
    return sum(values) / len(values), None


def finite_gauge(fams: dict[str, promtext.Family], name: str) -> tuple[float | None, str | None]:
    """:func:`gauge_figure` of the family ``name`` as a plain gauge (its schedulers' sum)."""
    return gauge_figure(fams.get(name), SUM)


def counter_figure(fam: promtext.Family | None) -> float | None:
    """A counter's total over the schedulers that count (see :func:`primary`)."""
    if fam is None:
        return None
    by_labels: dict[promtext.Labels, float] = {}
    for s in fam.samples:
        if not s.name.endswith("_created"):
            by_labels.setdefault(s.labels, s.value)
    if not by_labels:
        return None
    return sum(by_labels[ls] for members in primary(list(by_labels)).values()
               for ls in members)
