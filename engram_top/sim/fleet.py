"""Simulated nodes as a fleet's Prometheus sees them: each node's GPUs in dcgm-exporter's
format, its host memory in node-exporter's, and its SGLang server's /metrics at steady state.

A node here is only its exporters (no scheduler, no HTTP serving of requests), so a hundred
of them fit in one small process. Its figures follow the single simulated node's model: the
memory plan of its placement (weights, KV pools, host tables) and latencies drawn from the
placement's closed-loop simulation of the seed-like workload. What that model does not give
is marked where it is set: each node's load level, its other host tenants, GPU utilisation,
power and PCIe traffic are the demo's assumptions, chosen so that a fleet shows every state an
on-call engineer looks for (a full KV pool, short host RAM).
"""

from __future__ import annotations

import bisect
import math
import zlib
from dataclasses import dataclass

from collectors.readings import GpuDevice
from collectors.units import GIB, MIB
from engram_top.seed.reference import PLACEMENTS, Reference
from engram_top.sim import memory, model
from engram_top.sim.exporters import dcgm_page, node_page
from engram_top.sim.metrics_page import ITL_BUCKETS, TTFT_BUCKETS, MetricsPage

EXPORTERS = ("dcgm", "node", "sglang")
MODEL_NAME = "deepseek-ai/DeepSeek-V4.1-Flash"
AVG_SEQ_TOKENS = 1300  # input + output of the seed-like workload's mean request, about


def _unit(seed: str) -> float:
    """A stable number in [0, 1) for a name: the same node looks the same in every run."""
    return (zlib.crc32(seed.encode()) % 10_000) / 10_000


@dataclass(frozen=True)
class Steady:
    """A placement's serving figures from its closed-loop simulation (unscaled seconds)."""

    ttft: tuple[float, ...]  # sorted samples
    itl: tuple[float, ...]
    requests_per_s: float
    tokens_per_s: float
    prompt_tokens_per_s: float


_STEADY: dict[tuple[int, str], Steady] = {}


def steady(ref: Reference, placement: str) -> Steady:
    key = (id(ref), placement)
    if key not in _STEADY:
        _STEADY[key] = _simulate(ref, placement)
    return _STEADY[key]


def _simulate(ref: Reference, placement: str) -> Steady:
    run = model.simulate_closed_loop(ref.placements[placement].service,
                                     memory.kv_capacity_tokens(ref, placement), ref.workload)
    reqs = run.requests
    return Steady(ttft=tuple(sorted(r.ttft for r in reqs)),
                  itl=tuple(sorted(r.tpot for r in reqs if r.output_len > 1)),
                  requests_per_s=len(reqs) / run.duration,
                  tokens_per_s=run.output_throughput,
                  prompt_tokens_per_s=sum(r.input_len for r in reqs) / run.duration)


def _cumulative(samples: tuple[float, ...], bounds: tuple[float, ...], scale: float,
                total: float) -> list[float]:
    """Cumulative bucket counts of `total` observations shaped like `samples` x `scale`."""
    n = len(samples)
    return [total * bisect.bisect_right(samples, b / scale) / n for b in bounds] + [total]


class FleetNode:
    """One node's exporters. Counters grow with the seconds since `started`."""

    def __init__(self, ref: Reference, index: int, started: float) -> None:
        self.ref = ref
        self.name = f"sim-{index:03d}"
        self.placement = PLACEMENTS[index % len(PLACEMENTS)]
        self.started = started
        self.plan = memory.plan(ref, self.placement)
        self.steady = steady(ref, self.placement)
        u = _unit(self.name)
        # Assumptions of the demo (see the module's text): how loaded each node is, and
        # what else lives in its host memory. sim-001 runs its KV pool near full, sim-002
        # shares its host with a tenant that leaves it little.
        self.speed = 0.92 + 0.16 * u  # the node's latency factor
        self.kv_base = {1: 0.93}.get(index, 0.15 + 0.6 * _unit(self.name + "kv"))
        self.other_host = {2: 1600 * GIB}.get(index, int(40 * GIB * _unit(self.name + "h")))

    # ------------------------------------------------------------------ figures
    def kv_usage(self, now: float) -> float:
        wave = 0.04 * math.sin((now - self.started) / 45 + _unit(self.name) * 6)
        return min(0.99, max(0.0, self.kv_base + wave))

    def gpu_used(self, gpu: int) -> int:
        # Rank 0 holds a little more (its NCCL and scheduler buffers): min and max differ.
        return self.plan.gpu_bytes + (256 * MIB if gpu == 0 else 0)

    def host(self) -> dict[str, int]:
        ref, p = self.ref, self.plan
        huge = p.host_table_bytes  # the Engram tables live in huge pages (memfd, shared)
        used = ref.host_baseline_used_bytes + p.host_bytes + self.other_host
        return {"MemTotal": ref.host_total_bytes, "MemAvailable": ref.host_total_bytes - used,
                "MemFree": ref.host_total_bytes - used - 8 * GIB, "Cached": 8 * GIB,
                "Buffers": 512 * MIB, "Shmem": 2 * GIB + p.host_table_bytes,
                "HugePages_Total": huge // (2 * MIB), "HugePages_Free": 0,
                "Hugepagesize": 2 * MIB, "SwapTotal": 8 * GIB, "SwapFree": 8 * GIB}

    # ------------------------------------------------------------------ pages
    def dcgm_page(self, now: float) -> str:
        ref = self.ref
        busy = self.kv_usage(now)
        # Host placements read Engram rows over PCIe (assumed rates, GB/s scale).
        rx = {"device": 0.2e9, "host": 9e9, "host-prefetch": 11e9}[self.placement] * busy
        devices = []
        for gpu in range(ref.gpus):
            used = self.gpu_used(gpu)
            devices.append(GpuDevice(
                index=gpu, name=ref.gpu_name,
                uuid=f"GPU-{zlib.crc32(f'{self.name}{gpu}'.encode()):08x}"
                     "-5a1e-4c2b-9d0e-000000000000",
                total_bytes=ref.gpu_total_bytes, reserved_bytes=ref.gpu_reserved_bytes,
                used_bytes=used, free_bytes=ref.gpu_total_bytes - ref.gpu_reserved_bytes - used,
                util_gpu_pct=round(40 + 55 * busy), power_w=round(350 + 600 * busy, 1),
                pcie_tx_bytes_per_s=round(rx / 20), pcie_rx_bytes_per_s=round(rx)))
        return dcgm_page(devices, self.name, "580.95.05")

    def node_page(self, now: float) -> str:
        return node_page(self.host())

    def sglang_page(self, now: float) -> str:
        ref, plan = self.ref, self.plan
        st = self.steady
        elapsed = max(0.0, now - self.started)
        usage = self.kv_usage(now)
        # Load follows the KV usage: a fuller pool serves more streams.
        load = usage / max(0.01, self.kv_base)
        running = min(ref.placements[self.placement].service.max_running_requests,
                      round(usage * plan.kv_tokens / AVG_SEQ_TOKENS))
        m = MetricsPage()
        gauges = {
            "sglang:num_running_reqs": running,
            "sglang:num_queue_reqs": max(0, round((usage - 0.9) * 400)),
            "sglang:token_usage": usage, "sglang:full_token_usage": usage,
            "sglang:swa_token_usage": min(1.0, usage * 0.6),
            "sglang:num_used_tokens": round(usage * plan.kv_tokens),
            "sglang:max_total_num_tokens": plan.kv_tokens,
            "sglang:gen_throughput": round(st.tokens_per_s / self.speed * load, 2),
            "sglang:weight_memory_usage_gb": plan.weights_bytes / GIB,
        }
        sched = {"model_name": MODEL_NAME, "engine_type": "unified", "pp_rank": "0",
                 "moe_ep_rank": "0"}
        for name, value in gauges.items():
            m.declare(name, "gauge", name.split(":")[1].replace("_", " ") + ".")
            for rank in range(ref.gpus):
                m.set(name, {**sched, "tp_rank": str(rank)}, value)
        tok = {"model_name": MODEL_NAME, "engine_type": "unified"}
        for name, per_s in (("sglang:generation_tokens_total", st.tokens_per_s),
                            ("sglang:prompt_tokens_total", st.prompt_tokens_per_s),
                            ("sglang:num_requests_total", st.requests_per_s)):
            m.declare(name, "counter", name.split(":")[1].replace("_", " ") + ".")
            m.set(name, tok, round(per_s / self.speed * elapsed, 3))
        lines = [m.render()]
        reqs = st.requests_per_s / self.speed * elapsed
        for name, samples, bounds, total in (
                ("sglang:time_to_first_token_seconds", st.ttft, TTFT_BUCKETS, reqs),
                ("sglang:inter_token_latency_seconds", st.itl, ITL_BUCKETS,
                 st.tokens_per_s / self.speed * elapsed)):
            counts = _cumulative(samples, bounds, self.speed, total)
            lines.append(f"# HELP {name} Histogram of {name.split(':')[1]}.\n"
                         f"# TYPE {name} histogram\n")
            label = f'model_name="{MODEL_NAME}",engine_type="unified"'
            for bound, count in zip((*bounds, math.inf), counts, strict=True):
                le = "+Inf" if math.isinf(bound) else repr(float(bound))
                lines.append(f'{name}_bucket{{{label},le="{le}"}} {count!r}\n')
            mean = sum(samples) / len(samples) * self.speed
            lines.append(f"{name}_sum{{{label}}} {mean * total!r}\n"
                         f"{name}_count{{{label}}} {total!r}\n")
        return "".join(lines)

    def page(self, exporter: str, now: float) -> str:
        return {"dcgm": self.dcgm_page, "node": self.node_page,
                "sglang": self.sglang_page}[exporter](now)
