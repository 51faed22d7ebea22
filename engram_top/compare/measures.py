"""The compared metrics, registered once: each says its name, unit, which way is better, how
it is read from a run (a RunResult) and how it is written.

compare() makes one row per registered metric, in registration order, and every table is
made from those rows: `engram-top compare`, the compare screen, the bench report
(report.md, report.json) and a snapshot's snapshot.json and summary.md. A new metric is one
METRICS.add(Metric(...)); a figure that no RunResult field holds yet needs that field (and
the importers' or the bench's line that fills it) first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from collectors.units import millions

if TYPE_CHECKING:
    from engram_top.compare.run_result import RunResult
    from engram_top.seed.reference import Placement


def fixed(digits: int, suffix: str = "") -> Callable[[float], str]:
    """A formatter: the value to `digits` decimals."""
    return lambda value: f"{value:.{digits}f}{suffix}"


def compact(value: float) -> str:
    """The compare screen's default: one decimal where that still says enough."""
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def ms(seconds: float | None) -> float | None:
    """Seconds (how runs keep latencies) as the ms the tables show, as the seed and
    bench_serving do."""
    return None if seconds is None else seconds * 1000.0


@dataclass(frozen=True)
class Metric:
    """One compared figure. Its row reads each trial by exactly one of:

    extract: the value of one trial (None: the trial did not measure it);
    priced: the same with the price per GPU-hour; the row exists only when a price is given;
    ratio_of: the key of an earlier metric: its means over the baseline's (no interval).
    """

    key: str  # the row's key in JSON, and what Comparison.row() takes
    label: str
    unit: str
    better: str  # "lower" or "higher"
    # "relative": Δ = mean / baseline - 1. "absolute": Δ = mean - baseline, in `unit`, for a
    # figure that is itself a difference (host memory since launch: the baseline's few GiB
    # would make any host placement thousands of percent).
    delta: str = "relative"
    extract: Callable[[RunResult], float | None] | None = None
    priced: Callable[[RunResult, float], float | None] | None = None
    ratio_of: str | None = None
    fmt: Callable[[float], str] = fixed(2)  # a value in the Markdown reports
    screen_fmt: Callable[[float], str] = compact  # a value on the narrower compare screen
    panel: str = ""  # the dashboard panel the compare screen groups it under
    note: str = ""  # a footnote the reports add under the table
    # The seed's figure of a placement (seeds/, the reference column): its name there and how
    # to read it; or the name of the seed's relative change against the device placement.
    seed_field: str | None = None
    seed_value: Callable[[Placement], float] | None = None
    seed_delta: str | None = None
    seed_note: str = ""  # how a ratio's seed figure is derived
    # What the figure is on each engine, where the engines mean different things by it:
    # said (and the row marked) whenever a comparison holds runs of more than one engine.
    engine_note: str = ""

    def __post_init__(self) -> None:
        ways = [w for w in (self.extract, self.priced, self.ratio_of) if w is not None]
        if len(ways) != 1:
            raise ValueError(f"metric {self.key}: needs exactly one of extract, priced, "
                             "ratio_of")
        if self.better not in ("lower", "higher") or self.delta not in ("relative",
                                                                        "absolute"):
            raise ValueError(f"metric {self.key}: better is lower or higher, delta relative "
                             "or absolute")
        if (self.seed_field is None) != (self.seed_value is None):
            raise ValueError(f"metric {self.key}: seed_field and seed_value go together")

    def json(self) -> dict[str, str]:
        """The row's description in report.json and snapshot.json."""
        return {"key": self.key, "label": self.label, "unit": self.unit,
                "better": self.better, "delta": self.delta}


class Registry:
    """Metrics by key, in the order the tables show them."""

    def __init__(self, metrics: tuple[Metric, ...] = ()) -> None:
        self._metrics: dict[str, Metric] = {}
        for metric in metrics:
            self.add(metric)

    def add(self, metric: Metric) -> Metric:
        if metric.key in self._metrics:
            raise ValueError(f"metric {metric.key} is already registered")
        if metric.ratio_of is not None and metric.ratio_of not in self._metrics:
            raise ValueError(f"metric {metric.key}: ratio_of {metric.ratio_of} is not "
                             "registered before it")
        self._metrics[metric.key] = metric
        return metric

    def remove(self, key: str) -> None:
        del self._metrics[key]

    def __getitem__(self, key: str) -> Metric:
        return self._metrics[key]

    def __iter__(self) -> Iterator[Metric]:
        return iter(tuple(self._metrics.values()))

    def __contains__(self, key: object) -> bool:
        return key in self._metrics


def _cost(r: RunResult, price_per_gpu_hour: float) -> float | None:
    # Per trial, so the cost row gets the same interval treatment as the throughput it
    # comes from.
    if r.gpus is None or not r.output_tok_s:
        return None
    return price_per_gpu_hour * r.gpus / 3600.0 / r.output_tok_s * 1e6


WEIGHTS = Metric("weights_gb", "weights per GPU", "GB", "lower",
                 extract=lambda r: r.weights_gb,
                 fmt=fixed(3), screen_fmt=fixed(3),  # SGLang prints weights to 3 decimals
                 panel="HBM", note="GB is SGLang's label for weights; it computes GiB.",
                 seed_field="weights_gb_per_gpu", seed_value=lambda p: p.weights_gib,
                 engine_note="weights: SGLang's own figure (its /metrics or load line); vLLM "
                             "reports none on /metrics: its log's \"Model loading took\" "
                             "(on GPUs), else n/a")
KV = Metric("kv_tokens", "KV capacity", "tokens", "higher",
            extract=lambda r: None if r.kv_tokens is None else float(r.kv_tokens),
            fmt=millions, screen_fmt=millions, panel="KV pool",
            seed_field="kv_tokens", seed_value=lambda p: float(p.kv_tokens),
            engine_note="KV capacity: SGLang's max_total_num_tokens (the full pool on hybrid "
                        "models); vLLM's kv_cache_size_tokens (cache_config_info), whole "
                        "blocks of its block size")
KV_RATIO = Metric("kv_ratio", "KV capacity vs baseline", "x", "higher", ratio_of=KV.key,
                  fmt=fixed(3, "x"), screen_fmt=fixed(3, "x"), panel="KV pool",
                  seed_note="placement KV tokens / device KV tokens "
                            "(seeds [derived].kv_ratio for host)")
HOST = Metric("host_delta_gib", "host memory delta", "GiB", "lower", delta="absolute",
              extract=lambda r: r.host_delta_gib, fmt=fixed(1), panel="host RAM",
              seed_field="host_delta_gib", seed_value=lambda p: p.host_delta_gib)
READY = Metric("ready_s", "time to ready", "s", "lower", extract=lambda r: r.ready_s,
               panel="start-up", seed_field="ready_s", seed_value=lambda p: p.ready_s,
               engine_note="time to ready: SGLang to its ready line; vLLM to /health and a "
                           "first /metrics page (its port opens only once its engine is up)")
TTFT = Metric("ttft_mean_ms", "mean TTFT", "ms", "lower",
              extract=lambda r: ms(r.ttft_mean_s), panel="latency", seed_delta="ttft_mean")
TPOT = Metric("tpot_mean_ms", "mean TPOT", "ms", "lower",
              extract=lambda r: ms(r.tpot_mean_s), panel="latency", seed_delta="tpot_mean")
THROUGHPUT = Metric("output_tok_s", "output throughput", "tok/s", "higher",
                    extract=lambda r: r.output_tok_s, fmt=fixed(1), panel="latency",
                    seed_delta="output_throughput")
GOODPUT = Metric("goodput_rps", "goodput (in SLO)", "req/s", "higher",
                 extract=lambda r: r.goodput_rps, fmt=fixed(3), screen_fmt=fixed(3),
                 panel="latency")
# The price's currency; "$" because that is how per-GPU-hour prices are usually quoted.
COST = Metric("cost_per_mtok", "cost per million output tokens", "$/Mtok", "lower",
              priced=_cost, fmt=fixed(4), screen_fmt=fixed(4), panel="cost")
# Beside the price: what the same tokens cost in energy, whatever a GPU-hour costs. The
# GPUs' NVML energy counters over the serving window (their mean draw between two polls)
# per output token served in it (engram_top.model.energy).
ENERGY = Metric("joules_per_token", "energy per token", "J/tok", "lower",
                extract=lambda r: r.joules_per_token, fmt=fixed(3), screen_fmt=fixed(2),
                panel="cost")

# What every comparison shows, unless it is given a registry of its own.
METRICS = Registry((WEIGHTS, KV, KV_RATIO, HOST, READY, TTFT, TPOT, THROUGHPUT, GOODPUT,
                    COST, ENERGY))
