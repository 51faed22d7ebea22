"""What the fleet reads of the serving stack's parts that are no engine: SGLang's router
(sgl-router's `sgl_router_*`, sgl-model-gateway's `smg_*`) and LMCache's server
(`lmcache:*`). Per node: the router's workers, requests running and per second, and its
cache-aware routing hit rate; LMCache's hit tokens of those asked for. One expression,
whatever the fleet's size; a node with neither has none of these series.

A router's node has no engine of its own: its row says what it routes instead of "no server".
"""

from __future__ import annotations

from dataclasses import dataclass

from collectors.prom_answer import Labels

GROUP = "node, Hostname, hostname, instance, placement"
ROUTER_KIND, LMCACHE_KIND = "sgl-router", "lmcache"
# figure -> (whose, its PromQL per node: {by} is `sum by (the node's labels)`, {m} the
# matchers that narrow it to a node, {window} the rate's)
FIGURES = {
    "workers": (ROUTER_KIND, '{by} ({{__name__=~"sgl_router_active_workers|smg_worker_health"'
                             '{m}}})'),
    "running": (ROUTER_KIND, '{by} ({{__name__="sgl_router_running_requests"{m}}})'),
    "requests_per_s": (ROUTER_KIND, '{by} (rate({{__name__=~"sgl_router_requests_total|'
                                    'smg_requests_total"{m}}}[{window}]))'),
    "routing_hit_rate": (ROUTER_KIND, '{by} ({{__name__="sgl_router_cache_hits_total"{m}}}) / '
                                      '({by} ({{__name__="sgl_router_cache_hits_total"{m}}}) + '
                                      '{by} ({{__name__="sgl_router_cache_misses_total"{m}}}))'),
    "lmcache_hit_rate": (LMCACHE_KIND, '{by} ({{__name__=~"lmcache:num_hit_tokens(_total)?"{m}}})'
                                       ' / {by} ({{__name__=~"lmcache:num_requested_tokens'
                                       '(_total)?"{m}}})'),
}


def query(window: str = "1m", match: str = "") -> str:
    """The stack's part of a refresh, each figure labelled `figure`. ``match``: label
    matchers narrowing it to a node."""
    by, m = f"sum by ({GROUP})", f", {match}" if match else ""
    return " or ".join(f'label_replace({expr.format(by=by, m=m, window=window)}, "figure", '
                       f'"{figure}", "", "")' for figure, (_, expr) in FIGURES.items())


@dataclass(frozen=True, slots=True)
class StackFigures:
    """A node's router or LMCache figures; ``kind`` says which (a router's, where both)."""

    kind: str
    workers: float | None = None
    running: float | None = None
    requests_per_s: float | None = None
    hit_rate: float | None = None  # the router's routing hits, or LMCache's hit tokens


class StackReader:
    """Each node's figures, sample by sample; ``figures(node)`` once all are read."""

    def __init__(self) -> None:
        self._by_node: dict[str, dict[str, float]] = {}

    def add(self, node: str, labels: Labels, value: float) -> None:
        figure = labels.get("figure", "")
        if figure in FIGURES:
            self._by_node.setdefault(node, {})[figure] = value

    def nodes(self) -> set[str]:
        return set(self._by_node)

    def figures(self, node: str) -> StackFigures | None:
        got = self._by_node.get(node)
        if not got:
            return None
        router = any(FIGURES[f][0] == ROUTER_KIND for f in got)
        hit = got.get("routing_hit_rate") if router else got.get("lmcache_hit_rate")
        return StackFigures(kind=ROUTER_KIND if router else LMCACHE_KIND,
                            workers=got.get("workers"), running=got.get("running"),
                            requests_per_s=got.get("requests_per_s"),
                            hit_rate=None if hit is None else min(1.0, max(0.0, hit)))
