"""A router's or a cache's page where an engine's was expected: what the engines' collectors
read of it, so that `attach` pointed at SGLang's router (or at LMCache's API server) shows
its workers, requests and hit rate instead of a screen of dashes.

The figures come from page_kind (one reading of those pages for `inspect-metrics` and the
collectors) and are bounded here, where they enter: a count outside 0..MAX_COUNT or a share
outside 0..1 is no figure; a worker's name is a label from outside, cut to its first
MAX_WORKER characters and never more than page_kind.MAX_NAMED of them.
"""

from __future__ import annotations

import dataclasses
import math

from collectors.figure_bounds import MAX_COUNT
from collectors.page_kind import of_families
from collectors.promtext import Family
from collectors.readings import StackPage

STACK_KINDS = ("sgl-router", "lmcache")
MAX_WORKER = 120


def _figure(found: dict[str, object], key: str, most: float) -> float | None:
    value = found.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and 0 <= value <= most else None


def stack_page(fams: dict[str, Family], own_prefixes: tuple[str, ...]) -> StackPage | None:
    """The page as a part of the serving stack: None where it holds any of the engine's own
    families (``own_prefixes``) or is not a router's or LMCache's page."""
    if any(name.startswith(own_prefixes) for name in fams):
        return None
    kind = of_families(fams)
    if kind.kind not in STACK_KINDS:
        return None
    found = kind.found
    workers = found.get("workers")
    named = tuple(str(w)[:MAX_WORKER] for w in workers) if isinstance(workers, list) else ()
    hit = _figure(found, "cache_hit_rate_since_start", 1.0)
    if hit is None:
        hit = _figure(found, "hit_rate_since_start", 1.0)  # LMCache's hit tokens of those asked
    page = StackPage(kind=kind.kind, summary="", workers=named,
                     active_workers=_figure(found, "active_workers", MAX_COUNT),
                     running_requests=_figure(found, "running_requests", MAX_COUNT),
                     requests_total=_figure(found, "requests_total", MAX_COUNT),
                     hit_rate_since_start=hit)
    return dataclasses.replace(page, summary=summary(page))


def summary(page: StackPage) -> str:
    """One line of the bounded figures (page_kind's own summary says what the page holds,
    unbounded, for inspect-metrics)."""
    parts = []
    if page.active_workers is not None:
        parts.append(f"{page.active_workers:,.0f} active worker(s)")
    elif page.workers:
        parts.append(f"{len(page.workers)} worker(s) named")
    if page.requests_total is not None:
        parts.append(f"{page.requests_total:,.0f} requests")
    if page.running_requests is not None:
        parts.append(f"{page.running_requests:,.0f} running")
    if page.hit_rate_since_start is not None:
        parts.append(f"hit rate {page.hit_rate_since_start:.1%} since the start")
    what = {"sgl-router": "an SGLang router page", "lmcache": "an LMCache page"}[page.kind]
    return what + (": " + ", ".join(parts) if parts else "")
