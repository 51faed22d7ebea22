"""A run's headline figures (RunFacts.results), typed: what the dashboard keeps with each run
for the scenario list and the comparison.

Latencies are seconds here, as SGLang's histograms, RunResult and the workload driver keep
them; the comparison shows them in ms (engram_top.compare.measures). Only the JSON form differs:
recordings and snapshot.json have always written these figures in ms under *_ms keys, and
files written by earlier versions must still read back, so to_json/from_json keep that form.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunFigures:
    """None: not measured (yet). Never 0 for a figure nobody measured."""

    # Launch to ready on this machine: a simulated node's faster start-up is not yet
    # converted to node time (RunFacts.node_seconds does that).
    ready_s: float | None = None
    gpus: int | None = None
    weights_gb: float | None = None  # SGLang's "GB", which it computes as GiB
    kv_tokens: int | None = None
    host_delta_gib: float | None = None  # host memory used since launch
    # The server's histograms over their window; SGLang's inter-token latency is its TPOT.
    ttft_p50_s: float | None = None
    ttft_mean_s: float | None = None
    itl_p50_s: float | None = None
    itl_mean_s: float | None = None
    output_tok_s: float | None = None
    # The GPUs' energy over the same window, per output token (J).
    joules_per_token: float | None = None
    # Every GPU throttle seen while the server served requests ("GPU 2 sw_power_cap"):
    # a run whose clocks were held down is no fair side of an A/B comparison.
    throttled: tuple[str, ...] | None = None
    # The demo load's requests within every SLO, per node second, and their share (0..1).
    goodput_rps: float | None = None
    slo_attainment: float | None = None
    # What the latency figures were measured over: the window's length (s), the requests
    # whose first token came in it, and how long the run had served (ready to the reading,
    # s): a comparison reads them as warming up until they mean something.
    window_s: float | None = None
    window_requests: int | None = None
    served_s: float | None = None
    # The spread (standard deviation) of the window's TTFTs, from the histogram's buckets,
    # and how many lay above its highest finite bound (then no spread can be told): a
    # single live run's interval within its window (compare.live_interval).
    ttft_sd_s: float | None = None
    ttft_over: int | None = None
    # The bucket each p50 lies in where that bucket is too wide for the figure to be a
    # measurement (Quantiles.bucketed, collectors.windowed.coarse): (lower, upper), the upper
    # None for the +Inf bucket; None where the p50 is resolved. It goes with its p50.
    ttft_p50_bucket_s: tuple[float, float | None] | None = None
    itl_p50_bucket_s: tuple[float, float | None] | None = None
    # The demo load's own requests over the same window, in node time, where the dashboard
    # drives the load (scenarios.load_window): their mean TPOT, its spread over
    # load_tpot_n requests (bench_serving's TPOT: each request's (end - first token) /
    # (tokens - 1)), their output tokens per second and their requests within every SLO per
    # second (goodput), each with its spread over load_bins equal bins of the window. A run
    # measured once gets its TPOT, throughput and goodput intervals from them
    # (compare.live_interval).
    load_tpot_mean_s: float | None = None
    load_tpot_sd_s: float | None = None
    load_tpot_n: int | None = None
    load_tok_s: float | None = None
    load_tok_s_sd: float | None = None
    load_bins: int | None = None
    load_good_rps: float | None = None
    load_good_rps_sd: float | None = None

    def measured(self) -> bool:
        """Whether any figure is known."""
        return any(getattr(self, f.name) is not None for f in dataclasses.fields(self))

    def merged(self, newer: RunFigures) -> RunFigures:
        """These figures with every one that `newer` measured taken from it: a figure missing
        from one poll keeps its last value rather than going back to unmeasured. Throttles
        add up: one seen a minute ago still happened during the run."""
        taken = {f.name: v for f in dataclasses.fields(self)
                 if (v := getattr(newer, f.name)) is not None}
        for p50, bucket in _BUCKETS.items():  # a resolved p50 takes its bucket away
            if getattr(newer, p50) is not None:
                taken[bucket] = getattr(newer, bucket)
        if self.throttled and newer.throttled:
            taken["throttled"] = tuple(dict.fromkeys(self.throttled + newer.throttled))
        return dataclasses.replace(self, **taken)

    def to_json(self) -> dict[str, Any]:
        """The JSON form: measured figures only, latencies in ms under their *_ms keys."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name in _NOTES:
                out[f.name] = list(value)
                continue
            key, scale = _JSON.get(f.name, (f.name, 1))
            if f.name in _BUCKETS.values():
                out[key] = [None if v is None else round(v * scale, 6) for v in value]
                continue
            # Rounded to the nanosecond: seconds x 1000 must not write 12.350000000000001.
            out[key] = round(value * scale, 6) if scale != 1 else value
        return out

    @classmethod
    def from_json(cls, data: Any) -> RunFigures:
        """Inverse of to_json. ValueError for anything else: a damaged file must say so,
        not fail later in a comparison."""
        if not isinstance(data, dict):
            raise ValueError(f"expected an object, got {type(data).__name__}")
        names = {key: (name, scale) for name, (key, scale) in _JSON.items()}
        names.update({f.name: (f.name, 1) for f in dataclasses.fields(cls)
                      if f.name not in _JSON})
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(f"unknown figures {unknown}")
        # Each field's value of its field's kind, as _notes, _bucket and _number check it:
        # words, a bucket or a number, by field name.
        values: dict[str, Any] = {}
        for key, value in data.items():
            name, scale = names[key]
            if name in _NOTES:
                values[name] = _notes(key, value)
                continue
            if name in _BUCKETS.values():
                values[name] = _bucket(key, value, scale)
                continue
            number = _number(key, value, whole=name in _COUNTS)
            values[name] = number / scale if number is not None and scale != 1 else number
        return cls(**values)


# Fields whose JSON key and unit differ: field -> (key, JSON value per field unit).
_JSON = {"ttft_p50_s": ("ttft_p50_ms", 1000), "ttft_mean_s": ("ttft_mean_ms", 1000),
         "ttft_sd_s": ("ttft_sd_ms", 1000),
         "itl_p50_s": ("itl_p50_ms", 1000), "itl_mean_s": ("itl_mean_ms", 1000),
         "ttft_p50_bucket_s": ("ttft_p50_bucket_ms", 1000),
         "itl_p50_bucket_s": ("itl_p50_bucket_ms", 1000),
         "load_tpot_mean_s": ("load_tpot_mean_ms", 1000),
         "load_tpot_sd_s": ("load_tpot_sd_ms", 1000)}
# Each p50 and the field of the bucket it lies in (where that is too wide to resolve it).
_BUCKETS = {"ttft_p50_s": "ttft_p50_bucket_s", "itl_p50_s": "itl_p50_bucket_s"}
_COUNTS = {"gpus", "kv_tokens", "window_requests", "ttft_over", "load_tpot_n", "load_bins"}
_NOTES = {"throttled"}  # lists of words, not numbers


def _notes(key: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key}: expected a list of strings, got {value!r}")
    return tuple(value)


def _bucket(key: str, value: Any, scale: float) -> tuple[float, float | None] | None:
    """A bucket's [lower, upper] (upper null: +Inf) from JSON, in the field's unit."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2 or value[0] is None:
        raise ValueError(f"{key}: expected [lower, upper], got {value!r}")
    lo, hi = (_number(key, v, whole=False) for v in value)
    if lo is None or (hi is None and value[1] is not None):
        raise ValueError(f"{key}: expected finite bounds, got {value!r}")
    return lo / scale, None if hi is None else hi / scale


def _number(key: str, value: Any, whole: bool) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or (whole and not isinstance(value, int)):
        kind = "a whole number" if whole else "a number"
        raise ValueError(f"{key}: expected {kind}, got {type(value).__name__} {value!r}")
    # A NaN mean (no samples) is a figure not measured.
    return value if math.isfinite(value) else None
