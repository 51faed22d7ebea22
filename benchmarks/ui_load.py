"""The load under which bench_ui_cpu.py measures a dashboard: clients sending short
completions to the watched server, each in a closed loop (the next request once the last
is answered), so that its histograms and counters change every second as a busy server's
do. Runs for --seconds (a total deadline) or until SIGTERM; prints the requests a second it
kept up and the failures, on one line.

    python benchmarks/ui_load.py URL [--clients 4] [--seconds 600] [--max-tokens 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time

import httpx


async def client(http: httpx.AsyncClient, url: str, max_tokens: int, stop: asyncio.Event,
                 counts: dict[str, int]) -> None:
    body = {"model": "default", "prompt": "Where should the Engram tables live?",
            "max_tokens": max_tokens}
    while not stop.is_set():
        try:
            r = await http.post(f"{url}/v1/completions", json=body)
            counts["ok" if r.status_code == 200 else "failed"] += 1
        except httpx.HTTPError:
            counts["failed"] += 1
            await asyncio.sleep(0.1)  # a server that is gone is not hammered


async def run(url: str, clients: int, seconds: float, max_tokens: int) -> str:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    counts = {"ok": 0, "failed": 0}
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=30.0) as http:
        tasks = [asyncio.create_task(client(http, url, max_tokens, stop, counts))
                 for _ in range(clients)]
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
        stop.set()
        await asyncio.wait(tasks, timeout=35)
        for task in tasks:
            task.cancel()
    elapsed = time.monotonic() - started
    return (f"ui_load: {clients} clients, {counts['ok'] / elapsed:.1f} requests/s over "
            f"{elapsed:.0f} s, {counts['failed']} failed")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--max-tokens", type=int, default=8)
    args = ap.parse_args()
    print(asyncio.run(run(args.url.rstrip("/"), args.clients, args.seconds, args.max_tokens)),
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
