"""The KV panel's rows where the watched URL is a router's or LMCache's page, not an
engine's: what it is, its workers, its requests and hit rate, and where the memory is (its
workers': the command that watches one). No KV row is drawn as a dash for a figure a router
never has."""

from __future__ import annotations

from rich.text import Text

from collectors import DASH, percent, rate, visible
from engram_top.app.panels.drawing import first_fitting, row
from engram_top.model import StackPage

NAMES = {"sgl-router": "SGLang router (sgl-router / sgl-model-gateway)",
         "lmcache": "LMCache (a KV cache tier beside vLLM)"}
HITS = {"sgl-router": "cache-aware routing", "lmcache": "hit tokens of those asked"}


def _count(value: float | None) -> str:
    return DASH if value is None else f"{value:,.0f}"


def stack_rows(page: StackPage, requests_per_s: float | None,
               room: int | None) -> list[tuple[int, Text]]:
    """(rank, line) rows for drawing.fit: what the page is first, where the memory is last."""
    out = [(0, row("serves", NAMES.get(page.kind, page.kind)))]
    workers = [visible(w) for w in page.workers]
    if page.active_workers is not None or workers:
        active = [] if page.active_workers is None else [f"{_count(page.active_workers)} active"]
        out.append((1, row("workers", first_fitting(room, (
            " · ".join([*active, ", ".join(workers)]) if workers else " · ".join(active),
            " · ".join(active) or f"{len(workers)} named")))))
    if page.kind == "sgl-router" or requests_per_s is not None:
        out.append((1, row("requests", f"{_count(page.running_requests)} running · "
                                       f"{rate(requests_per_s, 'req/s')}")))
    if page.hit_rate_since_start is not None:
        out.append((2, row("cache hit", f"{percent(page.hit_rate_since_start, 1)} since start "
                                        f"({HITS.get(page.kind, 'hits')})")))
    out.append((3, Text("no GPU memory or KV pool of its own: its workers hold them",
                        style="dim", no_wrap=True, overflow="ellipsis")))
    if workers:
        out.append((3, row("watch one", f"engram-top attach {workers[0]}")))
    return out
