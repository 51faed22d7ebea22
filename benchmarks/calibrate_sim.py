"""Fit the host-prefetch service extras so the simulated node reproduces the seed's deltas.

Runs the seed-like workload (seeds [workload]) through the simulated scheduler in virtual
time for device and host-prefetch, over model.DRAWS draws of its requests (a bench's rounds
each draw their own), and solves for (extra_step_s, extra_per_seq_s, prefill_factor) so that
mean TTFT, mean TPOT and output throughput move by the seed's +15.57%, +10.91% and -14.36%.
Prints the fit and the residuals; copy the three numbers into seeds/dsv41_flash_4xb200.toml
[service.extra.host-prefetch]. Deterministic: same numbers every run.

    python benchmarks/calibrate_sim.py
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_top.seed import reference  # noqa: E402
from engram_top.sim.memory import kv_capacity_tokens  # noqa: E402
from engram_top.sim.model import DRAWS, simulate_draws  # noqa: E402


def deltas(ref, params):
    svc = dataclasses.replace(ref.placements["host-prefetch"].service, extra_step_s=params[0],
                              extra_per_seq_s=params[1], prefill_factor=params[2])
    return deltas_of(ref, "host-prefetch", svc)


def deltas_of(ref, placement, svc):
    dev = ref.placements["device"]
    base = simulate_draws(dev.service, kv_capacity_tokens(ref, "device"), ref.workload)
    got = simulate_draws(svc, kv_capacity_tokens(ref, placement), ref.workload)
    return (got.mean_ttft / base.mean_ttft - 1, got.mean_tpot / base.mean_tpot - 1,
            got.output_throughput / base.output_throughput - 1)


def solve(ref, target, start=(0.003, 0.0, 0.15), iters=30):
    x = list(start)
    for _ in range(iters):
        f = [a - b for a, b in zip(deltas(ref, x), target, strict=True)]
        if max(abs(v) for v in f) < 1e-6:
            break
        h = [1e-5, 1e-6, 1e-4]
        jac = []
        for j in range(3):
            xp = list(x)
            xp[j] += h[j]
            fp = [a - b for a, b in zip(deltas(ref, xp), target, strict=True)]
            jac.append([(fp[i] - f[i]) / h[j] for i in range(3)])
        # Solve J^T-columns system J dx = -f (3x3, Cramer's rule keeps this dependency-free).
        m = [[jac[j][i] for j in range(3)] for i in range(3)]

        def det(a):
            return (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
                    - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
                    + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]))
        d = det(m)
        dx = []
        for j in range(3):
            mj = [row[:] for row in m]
            for i in range(3):
                mj[i][j] = -f[i]
            dx.append(det(mj) / d)
        x = [xi + di for xi, di in zip(x, dx, strict=True)]
    return x


def main() -> None:
    ref = reference.default()
    target = tuple(ref.deltas("host-prefetch")[k].value
                   for k in ("ttft_mean", "tpot_mean", "output_throughput"))
    x = solve(ref, target)
    got = deltas(ref, x)
    print("workload:", ref.workload, f"over {DRAWS} draws")
    print(f"fit: extra_step_s = {x[0]:.7f}  extra_per_seq_s = {x[1]:.8f}  "
          f"prefill_factor = {x[2]:.5f}")
    for name, g, t in zip(("TTFT", "TPOT", "throughput"), got, target, strict=True):
        print(f"  {name:10s} model {g * 100:+8.3f}%   seed {t * 100:+8.3f}%")
    cur = ref.placements["host-prefetch"].service
    now = deltas(ref, (cur.extra_step_s, cur.extra_per_seq_s, cur.prefill_factor))
    print("with the values now in seeds/:",
          "  ".join(f"{v * 100:+.3f}%" for v in now))
    host = ref.placements["host"].service
    sync = deltas_of(ref, "host", host)
    print("host (synchronous) against device, from its assumed extras:",
          "  ".join(f"{v * 100:+.2f}%" for v in sync), "(TTFT, TPOT, throughput)")


if __name__ == "__main__":
    main()
