"""A fleet refresh's cost as the fleet grows to 2,000 nodes, without 6,000 exporters: the
answers a Prometheus gives for N nodes (four GPUs, host memory, SGLang's gauges, latencies
and `up` per node, labelled as a scrape config with `node` and `placement` labels does) are
made once and served from 127.0.0.1 by a child process, so the figures are the dashboard's
side alone (the answers' writing holds no loop the dashboard's figures are measured on).

Printed per size (median of --refreshes):
  - answer: the five answers' bytes;
  - poll: one refresh end to end (five queries over HTTP, parsed, grouped into nodes), and
    how long the event loop was held in one stretch meanwhile (what a key waits for);
  - rows: every node's row (figures, state, alerts);
  - draw: the fleet screen's first frame of N rows (headless, 160x50), and a redraw after a
    refresh whose figures are unchanged.

    .venv/bin/python benchmarks/bench_fleet_size.py [--sizes 128 512 2000] [--refreshes 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlsplit

from engram_top.app.fleet_screen import FleetApp
from engram_top.fleet.session import FleetSession

GIB = 1024**3


def answers(nodes: int) -> dict[str, bytes]:
    """Each query's answer, keyed as the fleet source keys its queries."""
    series: dict[str, list[tuple[dict[str, str], float]]] = {k: [] for k in
                                                            ("gpu", "host", "server",
                                                             "latency", "up")}
    for i in range(nodes):
        base = {"node": f"node-{i:04d}", "placement": ("device", "host", "host-prefetch")[i % 3]}
        ip = f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"
        for g in range(4):
            gpu = {**base, "gpu": str(g), "modelName": "NVIDIA B200", "instance": f"{ip}:9400"}
            for name, v in (("DCGM_FI_DEV_FB_USED", 120_000 + g), ("DCGM_FI_DEV_FB_FREE", 60_000),
                            ("DCGM_FI_DEV_FB_RESERVED", 500), ("DCGM_FI_DEV_GPU_UTIL", 87),
                            ("DCGM_FI_DEV_POWER_USAGE", 712.5)):
                series["gpu"].append(({**gpu, "__name__": name}, v))
        for name, v in (("node_memory_MemTotal_bytes", 2048 * GIB),
                        ("node_memory_MemAvailable_bytes", 1500 * GIB),
                        ("node_memory_Shmem_bytes", 190 * GIB)):
            series["host"].append(({**base, "instance": f"{ip}:9100", "__name__": name}, v))
        for name, v in (("sglang:token_usage", 0.42), ("sglang:num_running_reqs", 12),
                        ("sglang:max_total_num_tokens", 11_840_000),
                        ("sglang:weight_memory_usage_gb", 72.2)):
            series["server"].append(({**base, "instance": f"{ip}:30000", "__name__": name}, v))
        for figure, v in (("ttft_p50", 0.35), ("ttft_p99", 1.2), ("tpot_p50", 0.026),
                          ("tpot_p99", 0.04), ("output_tok_s", 224.0)):
            series["latency"].append(({**base, "instance": f"{ip}:30000", "figure": figure}, v))
        for job, port in (("dcgm-exporter", 9400), ("node-exporter", 9100), ("sglang", 30000)):
            series["up"].append(({**base, "job": job, "instance": f"{ip}:{port}"}, 1))
    now = time.time()
    return {key: json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [now, str(v)]} for labels, v in items]}}).encode()
        for key, items in series.items()}


def key_of(query: str) -> str:
    if "histogram_quantile" in query:
        return "latency"
    for key, needle in (("gpu", "DCGM_FI"), ("host", "node_memory"), ("server", "sglang")):
        if needle in query:
            return key
    return "up"


async def serve(bodies: dict[str, bytes]) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.decode("latin-1").split(" ", 2)[1]
                query = parse_qs(urlsplit(target).query).get("query", [""])[0]
                body = bodies[key_of(query)]
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             + f"content-length: {len(body)}\r\n\r\n".encode() + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()  # the client gone, or the bench over

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _answer_forever(nodes: int, told: multiprocessing.Queue[tuple[int, int]]) -> None:
    async def run() -> None:
        bodies = answers(nodes)
        server = await serve(bodies)
        told.put((server.sockets[0].getsockname()[1], sum(map(len, bodies.values()))))
        await server.serve_forever()

    asyncio.run(run())


@contextmanager
def answering(nodes: int) -> Iterator[tuple[str, int]]:
    """A child process that answers the fleet's queries for ``nodes`` nodes: its URL and the
    answers' bytes; the child is stopped on the way out, whatever happens."""
    spawn = multiprocessing.get_context("spawn")
    told = spawn.Queue()
    child = spawn.Process(target=_answer_forever, args=(nodes, told), daemon=True)
    child.start()
    try:
        port, size = told.get(timeout=120)
        yield f"http://127.0.0.1:{port}", size
    finally:
        child.terminate()
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join(10)


async def held(stop: asyncio.Event, out: list[float]) -> None:
    """The longest stretch the event loop was held, as a 1 ms ticker sees it."""
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        out.append(now - last - 0.001)
        last = now


async def measure(url: str, nodes: int, refreshes: int) -> dict[str, float]:
    session = FleetSession(url, interval=3600, deadline_s=60)
    polls, stalls, rows = [], [], []
    try:
        for _ in range(refreshes):
            stop, gaps = asyncio.Event(), list[float]()
            ticker = asyncio.create_task(held(stop, gaps))
            started = time.perf_counter()
            await session.poll_once()
            polls.append(time.perf_counter() - started)
            stop.set()
            await ticker
            stalls.append(max(gaps, default=0.0))
            started = time.perf_counter()
            session.rows()
            rows.append(time.perf_counter() - started)
        if not session.ok or len(session.nodes) != nodes:
            raise SystemExit(f"bench_fleet_size: {session.status}")
        app = FleetApp(session, borrowed=True)
        async with app.run_test(size=(160, 50)) as pilot:
            started = time.perf_counter()
            app.refresh_fleet()
            await pilot.pause()
            first = time.perf_counter() - started
            redraws = []
            for _ in range(refreshes):
                await session.poll_once()
                started = time.perf_counter()
                app.refresh_fleet()
                await pilot.pause()
                redraws.append(time.perf_counter() - started)
    finally:
        await session.close()
    return {"poll_ms": 1000 * statistics.median(polls),
            "held_ms": 1000 * statistics.median(stalls),
            "rows_ms": 1000 * statistics.median(rows), "first_draw_ms": 1000 * first,
            "redraw_ms": 1000 * statistics.median(redraws)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[128, 512, 2000])
    p.add_argument("--refreshes", type=int, default=5)
    args = p.parse_args()
    print(f"{'nodes':>6} {'answer MB':>9} {'poll ms':>8} {'loop held ms':>12} {'rows ms':>8} "
          f"{'first draw ms':>13} {'redraw ms':>9}")
    for n in args.sizes:
        with answering(n) as (url, size):
            r = asyncio.run(measure(url, n, args.refreshes))
        print(f"{n:>6} {size / 1e6:>9.1f} {r['poll_ms']:>8.0f} {r['held_ms']:>12.0f} "
              f"{r['rows_ms']:>8.0f} {r['first_draw_ms']:>13.0f} {r['redraw_ms']:>9.0f}")


if __name__ == "__main__":
    main()
