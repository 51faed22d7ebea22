"""How far the workload driver's TTFT and end-to-end latency are from the server's own.

Starts one simulated server, runs a small closed- and open-loop workload against
/v1/completions and /generate, and prints, per endpoint and level, the median and the
maximum of (client figure - server figure), where the server's figures come from its
/sim/requests record of when each request arrived and when its first and last tokens left.

    python benchmarks/driver_accuracy.py
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import statistics
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_top.live.demo import DemoOptions, DemoSession  # noqa: E402
from scenarios.workload import Level, WorkloadSpec, run_workload  # noqa: E402


async def main() -> None:
    session = DemoSession(DemoOptions(placement="device", time_scale=0.02, load=None,
                                      poll_interval=5.0))
    await session.start()
    try:
        assert await session.wait_ready(60)
        url = session.store.run.url  # type: ignore[union-attr]
        spec = WorkloadSpec(levels=(Level(8, concurrency=1), Level(32, concurrency=8),
                                    Level(20, rate=4.0)),
                            input_len=256, output_len=64, range_ratio=0.5, warmup_requests=2)
        for endpoint in ("/v1/completions", "/generate"):
            res = await run_workload(url, dataclasses.replace(spec, endpoint=endpoint))
            truth = {r["id"]: r for r in httpx.get(f"{url}/sim/requests").json()["requests"]}
            per_level = collections.defaultdict(list)
            ttft, e2e = [], []
            for rec in res.records:
                t = truth[rec.rid]
                err = rec.ttft - (t["first_token"] - t["arrival"])
                per_level[rec.level].append(err)
                ttft.append(err)
                e2e.append(rec.e2e - (t["finished"] - t["arrival"]))
            levels = "  ".join(f"level {k}: {statistics.median(v) * 1e3:.2f} ms"
                               for k, v in sorted(per_level.items()))
            print(f"{endpoint:16s} n={len(res.records)} failed={res.failed}  TTFT error median "
                  f"{statistics.median(ttft) * 1e3:.2f} ms, max {max(ttft) * 1e3:.2f} ms; "
                  f"e2e error median {statistics.median(e2e) * 1e3:.2f} ms; ({levels}); "
                  f"driver CPU {res.driver_cpu_s:.2f} s over {res.duration_s:.1f} s")
    finally:
        await session.close()


if __name__ == "__main__":
    asyncio.run(main())
