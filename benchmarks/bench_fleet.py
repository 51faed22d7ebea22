"""The fleet screen's cost at 8, 32 and 128 nodes scraped by one real Prometheus.

For each size: exporter-only simulated nodes (one process), Debian's Prometheus scraping them
every 5 s, then `engram-top fleet --prometheus URL --interval 5` in tmux at 160x50 as a user
would run it. Printed per size:
  - the dashboard's CPU over a steady minute (% of one core) and per refresh (ms);
  - Prometheus's own CPU meanwhile (% of one core);
  - a refresh's five queries, end to end (median and max of 20, ms), and the series they
    return;
  - the time to the first full frame (launch to every node counted in the header and the
    first row drawn), median of three launches.
Figures, not pass/fail: this machine is shared.

    .venv/bin/python benchmarks/bench_fleet.py [--sizes 8 32 128] [--seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.bench_ui_cpu import BIN, Tmux, cpu_seconds, wait_for
from collectors.prometheus import PrometheusSource
from engram_top.fleet.session import dialects
from scenarios.fleet_demo import FleetDemo

INTERVAL_S = 5.0


async def _query_times(url: str, n: int = 20) -> tuple[list[float], int]:
    src = PrometheusSource(url, dialects=dialects(), window="30s")
    times, series = [], 0
    try:
        for _ in range(n):
            out = await src.poll()
            status = next(r for k, r in out if k.source == "prometheus")
            if not status.ok:
                raise SystemExit(f"bench_fleet: {status.message}")
            times.append(status.data.query_ms)
            series = status.data.series
            await asyncio.sleep(0.1)
    finally:
        await src.close()
    return times, series


def _frame(socket: Path, url: str, nodes: int, i: int) -> float:
    argv = [str(BIN / "engram-top"), "fleet", "--prometheus", url, "--interval", "5"]
    started = time.monotonic()
    t = Tmux(f"first{i}", socket, argv, {"TERM": "xterm-256color"})
    try:
        wait_for(lambda: f"{nodes} nodes" in t.screen() and "sim-000" in t.screen(), 60,
                 "the first full frame")
        return time.monotonic() - started
    finally:
        t.kill()


def measure(nodes: int, seconds: float, work: Path) -> dict[str, float]:
    demo = FleetDemo(nodes, scrape_s=INTERVAL_S, real_node_exporter=False,
                     folder=work / f"fleet{nodes}")
    (work / f"fleet{nodes}").mkdir()
    url = asyncio.run(demo.start(deadline_s=90))
    socket = work / f"tmux{nodes}.sock"
    try:
        asyncio.run(asyncio.sleep(30))  # a rate window's worth of samples
        times, series = asyncio.run(_query_times(url))
        frames = [_frame(socket, url, nodes, i) for i in range(3)]
        argv = [str(BIN / "engram-top"), "fleet", "--prometheus", url, "--interval", "5"]
        t = Tmux("steady", socket, argv, {"TERM": "xterm-256color"})
        try:
            wait_for(lambda: f"{nodes} nodes" in t.screen(), 60, "the fleet screen")
            pid = wait_for(t.pid, 10, "the dashboard's pid")
            prom = psutil.Process(demo.prometheus.proc.pid)  # type: ignore[union-attr]
            time.sleep(10)  # past the first refreshes
            c0, p0, w0 = cpu_seconds(pid), prom.cpu_times(), time.monotonic()
            time.sleep(seconds)
            c1, p1, w1 = cpu_seconds(pid), prom.cpu_times(), time.monotonic()
        finally:
            t.kill()
    finally:
        asyncio.run(demo.stop())
    wall = w1 - w0
    return {"nodes": nodes, "series": series,
            "dashboard_pct": 100 * (c1 - c0) / wall,
            "per_refresh_ms": 1000 * (c1 - c0) / (wall / INTERVAL_S),
            "prometheus_pct": 100 * ((p1.user + p1.system) - (p0.user + p0.system)) / wall,
            "query_ms_median": statistics.median(times), "query_ms_max": max(times),
            "first_frame_s": statistics.median(frames)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 32, 128])
    p.add_argument("--seconds", type=float, default=60.0)
    args = p.parse_args()
    print(f"bench_fleet: {psutil.cpu_count()} cores; refresh and scrape every {INTERVAL_S:g} s; "
          f"{args.seconds:g} s steady per size", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        for n in args.sizes:
            r = measure(n, args.seconds, Path(tmp))
            print(f"{r['nodes']:4d} nodes  {r['series']:5d} series  dashboard "
                  f"{r['dashboard_pct']:5.2f}% of a core ({r['per_refresh_ms']:6.1f} ms CPU per "
                  f"refresh)  Prometheus {r['prometheus_pct']:5.2f}%  queries "
                  f"{r['query_ms_median']:5.1f} ms median, {r['query_ms_max']:5.1f} max  "
                  f"first full frame {r['first_frame_s']:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
