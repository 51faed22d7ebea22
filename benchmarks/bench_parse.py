"""Parse time of one large SGLang-style /metrics page: collectors.promtext vs prometheus_client.

Run from the repository root:  .venv/bin/python benchmarks/bench_parse.py [--runs N]
Prints figures only; nothing here asserts on time (machines differ).

``make_page()`` is importable (``from benchmarks.bench_parse import make_page`` with the
repository root on sys.path) for other scripts and tests that need a realistic page.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

# SGLang's default bucket lists (its metrics collector's defaults).
TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
ITL_BUCKETS = [
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
    0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
]
E2E_BUCKETS = [
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200,
    1800, 2400,
]
# Other histograms of about 20 buckets (first 20 of SGLang's lists).
QUEUE_BUCKETS = [0.0, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1, 2, 3, 4, 5, 10,
                 15, 20, 30, 40, 50, 60]
STAGE_BUCKETS = [round(0.001 * 1.62**i, 6) for i in range(20)]
EVICTION_BUCKETS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6,
                    0.7, 0.8, 0.9, 1, 2, 5, 10, 20]

HISTOGRAMS: dict[str, list[float]] = {
    "sglang:time_to_first_token_seconds": TTFT_BUCKETS,
    "sglang:inter_token_latency_seconds": ITL_BUCKETS,
    "sglang:e2e_request_latency_seconds": E2E_BUCKETS,
    "sglang:queue_time_seconds": QUEUE_BUCKETS,
    "sglang:per_stage_req_latency_seconds": STAGE_BUCKETS,
    "sglang:eviction_duration_seconds": EVICTION_BUCKETS,
}
GAUGES = [
    "num_running_reqs", "num_queue_reqs", "num_grammar_queue_reqs", "gen_throughput",
    "cache_hit_rate", "decode_sum_seq_lens", "token_usage", "full_token_usage",
    "swa_token_usage", "num_used_tokens", "kv_available_tokens", "kv_evictable_tokens",
    "kv_used_tokens", "max_total_num_tokens", "utilization", "new_token_ratio",
    "spec_accept_length", "is_cuda_graph",
]
COUNTERS = [
    "prompt_tokens_total", "generation_tokens_total", "cached_tokens_total",
    "num_requests_total", "num_aborted_requests_total", "evicted_tokens_total",
]


def _fmt(v: float) -> str:
    # prometheus_client's floatToGoString for the values used here.
    return repr(float(v))


def scheduler_labels(n: int) -> list[dict[str, str]]:
    """``n`` SGLang scheduler label sets (4 ranks per data-parallel group)."""
    return [
        {
            "dp_rank": str(i // 4),
            "engine_type": "unified",
            "model_name": "DeepSeek-V4.1-Flash",
            "moe_ep_rank": str(i % 4),
            "pp_rank": "0",
            "tp_rank": str(i % 4),
        }
        for i in range(n)
    ]


def _render(labels: dict[str, str]) -> str:
    # Sorted by name, as prometheus_client's generate_latest writes them (so `le` sits
    # between engine_type and model_name, not at the end).
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))


def make_page(label_sets: int = 8, seed: int = 0) -> str:
    """A /metrics page shaped like SGLang's: 18 gauges, 6 counters, 6 histograms.

    With the default 8 label sets it is about 200 KB and 1,400 lines.
    """
    rng = random.Random(seed)
    dicts = scheduler_labels(label_sets)
    sets = [_render(d) for d in dicts]
    lines: list[str] = []
    for g in GAUGES:
        name = f"sglang:{g}"
        lines += [f"# HELP {name} The {g.replace('_', ' ')}.", f"# TYPE {name} gauge"]
        lines += [f"{name}{{{ls}}} {_fmt(rng.uniform(0, 1000))}" for ls in sets]
    for c in COUNTERS:
        name = f"sglang:{c}"
        lines += [f"# HELP {name} Number of {c[:-6].replace('_', ' ')}.", f"# TYPE {name} counter"]
        lines += [f"{name}{{{ls}}} {_fmt(rng.randrange(10**9))}" for ls in sets]
    for name, bounds in HISTOGRAMS.items():
        lines += [f"# HELP {name} Histogram of {name[7:]}.", f"# TYPE {name} histogram"]
        for ls, labels in zip(sets, dicts, strict=True):
            total = 0
            obs_sum = 0.0
            for b in bounds:
                n = rng.randrange(500)
                total += n
                obs_sum += n * b * 0.7
                le = _render({**labels, "le": _fmt(b)})
                lines.append(f"{name}_bucket{{{le}}} {_fmt(total)}")
            total += rng.randrange(5)
            lines.append(f'{name}_bucket{{{_render({**labels, "le": "+Inf"})}}} {_fmt(total)}')
            lines.append(f"{name}_sum{{{ls}}} {_fmt(obs_sum)}")
            lines.append(f"{name}_count{{{ls}}} {_fmt(total)}")
    return "\n".join(lines) + "\n"


def _time(fn: object, page: str, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(page)  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--label-sets", type=int, default=8)
    args = ap.parse_args()

    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:  # run as a script: make `collectors` importable
        sys.path.insert(0, root)
    from prometheus_client.parser import text_string_to_metric_families

    from collectors import promtext

    page = make_page(args.label_sets)
    fams = promtext.parse(page)
    n_samples = sum(len(f.samples) for f in fams.values())
    print(f"page: {len(page.encode()):,} bytes, {page.count(chr(10)):,} lines, "
          f"{len(fams)} families, {n_samples:,} samples; {args.runs} runs each")

    ours = _time(promtext.parse, page, args.runs)
    theirs = _time(lambda p: list(text_string_to_metric_families(p)), page, args.runs)
    for label, ts in (("promtext.parse", ours), ("prometheus_client", theirs)):
        print(f"{label:>18}: median {statistics.median(ts) * 1e3:7.2f} ms   "
              f"min {min(ts) * 1e3:7.2f} ms   "
              f"({statistics.median(ts) / n_samples * 1e6:.2f} µs/sample)")
    print(f"{'ratio':>18}: prometheus_client / promtext = "
          f"{statistics.median(theirs) / statistics.median(ours):.1f}x (median), "
          f"{min(theirs) / min(ours):.1f}x (min)")


if __name__ == "__main__":
    main()
