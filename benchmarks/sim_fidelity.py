"""Does the live simulated server reproduce the seed's deltas through real HTTP?

Runs the seed-like workload (seeds [workload]) with the streaming client against a live
simulated server for device and for host-prefetch, and prints mean TTFT, mean TPOT and
output throughput for each, the host-prefetch deltas, the seed's deltas, and the
virtual-time model's own figures (the ground truth). Takes about two minutes at
--serve-scale 1 (node time).

    python benchmarks/sim_fidelity.py [--serve-scale 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_top.live.demo import DemoOptions, DemoSession  # noqa: E402
from engram_top.seed import reference  # noqa: E402
from engram_top.sim.memory import kv_capacity_tokens  # noqa: E402
from engram_top.sim.model import request_lengths, simulate_closed_loop  # noqa: E402
from scenarios.workload import run_requests  # noqa: E402


async def measure(placement: str, serve_scale: float) -> tuple[float, float, float]:
    ref = reference.default()
    wl = ref.workload
    tmp = Path(tempfile.mkdtemp(prefix="engram-fidelity-"))
    session = DemoSession(DemoOptions(placement=placement, time_scale=0.02,
                                      serve_scale=serve_scale, node_dir=tmp / "node",
                                      run_dir=tmp / "runs", poll_interval=2.0, load=None))
    await session.start()
    try:
        if not await session.wait_ready(60):
            raise SystemExit(f"{placement}: the simulated server did not become ready")
        url = session.store.run.url  # type: ignore[union-attr]
        rng = random.Random(wl.seed)
        ttfts, tpots, tokens, duration = [], [], 0, 0.0
        for level, count in zip(wl.concurrency_levels, wl.requests_per_level, strict=True):
            records, dur, failed = await run_requests(url, request_lengths(wl, count, rng), level)
            if failed:
                raise SystemExit(f"{placement}: {failed} requests failed")
            duration += dur
            tokens += sum(r.output_len for r in records)
            ttfts += [r.ttft for r in records]
            tpots += [r.tpot for r in records if r.tpot is not None]
    finally:
        await session.close()
    # Back to node time: service times were multiplied by serve_scale.
    return (sum(ttfts) / len(ttfts) / serve_scale, sum(tpots) / len(tpots) / serve_scale,
            tokens / duration * serve_scale)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve-scale", type=float, default=1.0)
    scale = ap.parse_args().serve_scale
    ref = reference.default()
    live = {p: asyncio.run(measure(p, scale)) for p in ("device", "host-prefetch")}
    model = {}
    for p in ("device", "host-prefetch"):
        r = simulate_closed_loop(ref.placements[p].service, kv_capacity_tokens(ref, p),
                                 ref.workload)
        model[p] = (r.mean_ttft, r.mean_tpot, r.output_throughput)
    seed = [ref.deltas("host-prefetch")[k].value
            for k in ("ttft_mean", "tpot_mean", "output_throughput")]
    print(f"workload {ref.workload}, serve scale {scale}")
    print(f"{'':12s} {'TTFT ms':>10s} {'TPOT ms':>10s} {'tok/s':>10s}")
    for src, figs in (("live", live), ("model", model)):
        for p in ("device", "host-prefetch"):
            t, o, thr = figs[p]
            print(f"{src + ' ' + p:22s} {t * 1e3:10.2f} {o * 1e3:10.2f} {thr:10.1f}")
    for src, figs in (("live", live), ("model", model)):
        d = [figs["host-prefetch"][i] / figs["device"][i] - 1 for i in range(3)]
        print(f"{src:6s} deltas: TTFT {d[0] * 100:+.2f}%  TPOT {d[1] * 100:+.2f}%  "
              f"throughput {d[2] * 100:+.2f}%")
    print(f"seed   deltas: TTFT {seed[0] * 100:+.2f}%  TPOT {seed[1] * 100:+.2f}%  "
          f"throughput {seed[2] * 100:+.2f}%")


if __name__ == "__main__":
    main()
