"""The fleet on the serving stack's parts that are no engine: SGLang's router and LMCache's
server, as Prometheus scrapes them. In-process over answers shaped as Prometheus gives them
(a router's node reads "router", with its workers, requests and hit rate, and misses no
engine), and end to end: a real Prometheus scraping a router's page (real HTTP on loopback,
a page server on a thread), read by `fleet --once`."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import PageServer, installed_script

from collectors.prometheus import group, queries
from engram_top.alerts.thresholds import Thresholds
from engram_top.fleet import session as fleet
from engram_top.fleet.words import node_json, stack_line
from scenarios.prometheus import Prometheus, Target

DIALECTS = fleet.dialects()


def sample(value: Any, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [1_795_000_000.0, str(value)]}


def answers(stack: list[dict[str, Any]]) -> dict[str, Any]:
    return {"gpu": [], "host": [], "server": [], "latency": [], "up": [], "agent": [],
            "stack": stack}


def test_a_routers_node_reads_router_with_its_figures() -> None:
    nodes = group(answers([
        sample(2, figure="workers", node="gw"), sample(4, figure="running", node="gw"),
        sample(20.5, figure="requests_per_s", node="gw"),
        sample(0.75, figure="routing_hit_rate", node="gw"),
        sample(0.276, figure="lmcache_hit_rate", node="cache"),
    ]), DIALECTS)
    gw, cache = nodes["gw"], nodes["cache"]
    assert gw.stack is not None and cache.stack is not None
    assert (gw.stack.kind, gw.stack.workers, gw.stack.running, gw.stack.requests_per_s,
            gw.stack.hit_rate) == ("sgl-router", 2, 4, 20.5, 0.75)
    assert (cache.stack.kind, cache.stack.hit_rate) == ("lmcache", 0.276)
    # No engine to miss on a router's node; its node-exporter and GPUs still are.
    assert not any("/metrics" in m for m in gw.missing)
    row = fleet.row(gw, 0.0, Thresholds(), 15.0)
    assert row.state == "router" and "server silent" not in row.alerts
    assert fleet.results([row]) == []  # no trial of a placement
    assert node_json(row)["stack"] == {"kind": "sgl-router", "workers": 2.0, "running": 4.0,
                                       "requests_per_s": 20.5, "hit_rate": 0.75}
    assert stack_line(row.stack) == (  # type: ignore[arg-type]
        "SGLang router · 2 workers · 4 running · 20.5 req/s · cache-aware routing hit 75.0% "
        "since start; the GPU memory and KV pools are its workers'")


def test_absurd_stack_figures_are_left_out_and_counted() -> None:
    from collectors.prom_answer import Odd

    odd = Odd()
    nodes = group(answers([sample(-3, figure="workers", node="gw"),
                           sample("1e300", figure="requests_per_s", node="gw"),
                           sample(7, figure="routing_hit_rate", node="gw"),
                           sample(1, figure="running", node="gw")]), DIALECTS, odd=odd)
    stack = nodes["gw"].stack
    assert stack is not None and stack.running == 1
    assert (stack.workers, stack.requests_per_s, stack.hit_rate) == (None, None, None)
    assert odd.count == 3


def test_the_refresh_asks_for_the_stack_in_one_expression() -> None:
    q = queries("30s", dialects=DIALECTS)
    assert "stack" in q and "[30s]" in q["stack"]
    assert all(name in q["stack"] for name in ("sgl_router_active_workers", "smg_requests_total",
                                               "lmcache:num_hit_tokens"))


ROUTER_PAGE = """\
# TYPE sgl_router_active_workers gauge
sgl_router_active_workers 2
# TYPE sgl_router_requests_total counter
sgl_router_requests_total{route="/generate"} 1200
# TYPE sgl_router_running_requests gauge
sgl_router_running_requests{worker="http://10.0.0.7:30000"} 3
sgl_router_running_requests{worker="http://10.0.0.8:30000"} 1
# TYPE sgl_router_cache_hits_total counter
sgl_router_cache_hits_total 75
# TYPE sgl_router_cache_misses_total counter
sgl_router_cache_misses_total 25
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_real_prometheus_scraping_a_router_gives_its_node_in_the_fleet(
        tmp_path: Path) -> None:
    with PageServer(ROUTER_PAGE) as router:
        address = router.url.removeprefix("http://")
        prom = Prometheus(tmp_path / "prom", [Target("sgl-router", address, {"node": "gw"})],
                          scrape_s=1.0)
        prom.start()
        try:
            async def scraped() -> None:
                await prom.wait_ready()
                await prom.wait_scraped(1)
            asyncio.run(scraped())
            once = subprocess.run([str(installed_script()), "fleet", "--prometheus", prom.url,
                                   "--once", "--json"], capture_output=True, text=True,
                                  timeout=60)
            text = subprocess.run([str(installed_script()), "fleet", "--prometheus", prom.url,
                                   "--once"], capture_output=True, text=True, timeout=60)
        finally:
            prom.stop_now()
    assert once.returncode == 0, once.stderr
    (node,) = [n for n in json.loads(once.stdout)["nodes"] if n["node"] == "gw"]
    assert node["state"] == "router"
    assert node["stack"]["kind"] == "sgl-router"
    assert (node["stack"]["workers"], node["stack"]["running"], node["stack"]["hit_rate"]) == \
        (2.0, 4.0, 0.75)
    assert text.returncode == 0, text.stderr
    assert "gw  ?  router" in text.stdout
    assert "  SGLang router · 2 workers · 4 running · " in text.stdout
    assert "cache-aware routing hit 75.0% since start; the GPU memory and KV pools are its " \
           "workers'" in text.stdout
