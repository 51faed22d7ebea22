"""One trial of one scenario as every comparison reads it (RunResult), and how its notes
flag a run: the record the bench, the importers, recordings and the fleet produce and the
comparison, the compared metrics and the reports consume."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class RunResult:
    """One trial of one scenario. Latencies in seconds; weights in SGLang's "GB" (GiB)."""

    scenario: str
    placement: str | None
    source: str  # "bench", "live", "bench_serving:<file>", ...
    trial: int
    # Measurements: None when the trial did not measure it (a bench_serving file has no
    # weights; a server that never became ready has nothing).
    gpus: int | None = None
    weights_gb: float | None = None
    kv_tokens: int | None = None
    host_delta_gib: float | None = None
    ready_s: float | None = None  # node time
    ttft_mean_s: float | None = None
    tpot_mean_s: float | None = None
    itl_mean_s: float | None = None
    e2e_mean_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    # Medians: where only quantiles exist (a fleet through Prometheus's histograms).
    ttft_p50_s: float | None = None
    tpot_p50_s: float | None = None
    output_tok_s: float | None = None
    joules_per_token: float | None = None  # the GPUs' energy per output token
    request_per_s: float | None = None
    # Requests per second within every SLO of the bench plan, and their share (0..1).
    goodput_rps: float | None = None
    slo_attainment: float | None = None
    completed: int = 0
    failed: int = 0
    duration_s: float | None = None
    notes: tuple[str, ...] = ()
    # The engine that served it ("SGLang", "vLLM", "vLLM (simulated)"); None where the
    # source does not say (reports written before engines were named).
    engine: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["notes"] = list(self.notes)  # JSON has no tuples
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        """Inverse of to_dict. Measurements left out read as None; unknown keys are refused
        so a misspelt field cannot silently become a missing measurement."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"RunResult: unknown keys {unknown}")
        missing = [k for k in ("scenario", "source", "trial") if k not in data]
        if missing:
            raise ValueError(f"RunResult: missing keys {missing}")
        # Each of its field's kind, as _check_type checks it below: str, int, float, notes.
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)
                                  if f.name not in ("completed", "failed", "notes")}
        values["completed"] = data.get("completed", 0)
        values["failed"] = data.get("failed", 0)
        values["notes"] = tuple(data.get("notes", ()))
        refused = []
        for name, value in values.items():
            _check_type(name, value)
            if isinstance(value, float) and not math.isfinite(value):
                values[name] = None  # a NaN mean (no samples) is a figure not measured
            elif name in RANGES and value is not None \
                    and not RANGES[name][0] <= value <= RANGES[name][1]:
                if name in _REQUIRED:
                    raise ValueError(f"RunResult.{name}: {_shown(value)} is outside "
                                     f"{RANGES[name][0]:g}..{RANGES[name][1]:g}")
                # A figure no run could have (a negative start-up, -1e308 ms) is no figure:
                # left out, said, the rest of the run kept.
                values[name] = None
                refused.append(f"{REFUSED} {name} {_shown(value)}: outside "
                               f"{RANGES[name][0]:g}..{RANGES[name][1]:g}")
        values["notes"] = values["notes"] + tuple(refused)
        return cls(**values)


_INT_FIELDS = {"trial", "gpus", "kv_tokens", "completed", "failed"}
_S, _RATE = (0.0, 1e6), (0.0, 1e12)
# What each figure can be on any node (generous: their job is to refuse the impossible).
RANGES: dict[str, tuple[float, float]] = {
    "trial": (0, 1e6), "gpus": (0, 4096), "kv_tokens": (0, 1e15), "completed": (0, 1e15),
    "failed": (0, 1e15), "weights_gb": (0.0, 1e5), "host_delta_gib": (-1e5, 1e5),
    "ready_s": (0.0, 1e7), "ttft_mean_s": _S, "tpot_mean_s": _S, "itl_mean_s": _S,
    "e2e_mean_s": _S, "ttft_p99_s": _S, "tpot_p99_s": _S, "ttft_p50_s": _S, "tpot_p50_s": _S,
    "output_tok_s": _RATE, "joules_per_token": (0.0, 1e9), "request_per_s": _RATE,
    "goodput_rps": _RATE, "slo_attainment": (0.0, 1.0), "duration_s": (0.0, 1e9),
}
# A note that starts so says a figure of the file was no figure and was left out.
REFUSED = "refused:"


def _shown(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, float) or abs(value) < 10**15 else \
        "an integer of more than 15 digits"
_STR_FIELDS = {"scenario", "placement", "source", "engine"}
_REQUIRED = {"scenario", "source", "trial", "completed", "failed"}


def _check_type(name: str, value: Any) -> None:
    if name == "notes":
        if not all(isinstance(n, str) for n in value):
            raise ValueError("RunResult.notes: expected a list of strings")
        return
    if value is None:
        if name in _REQUIRED:
            raise ValueError(f"RunResult.{name}: must not be null")
        return
    if name in _STR_FIELDS:
        ok = isinstance(value, str)
    elif name in _INT_FIELDS:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:  # float fields accept ints, as JSON writes 2.0 as 2 in some producers
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok:
        raise ValueError(f"RunResult.{name}: unexpected {type(value).__name__} {value!r}")


# A RunResult note that starts so says a GPU's clocks were held down while the run served
# ("throttled while serving: GPU 2 sw_power_cap"): the comparison flags that run.
THROTTLED = "throttled while serving"
# One that starts so says its latency and throughput were left out, the window they came
# from not meaning anything yet ("warming up: 1 s of a 30 s window served"): a recording's
# run carries the reason into a comparison of files, as a live run's column says it.
WARMING = "warming up"
# One that starts so says the run is a `bench --quick` one (two rounds, a few requests a
# level): every view of it says its intervals are a first look, not figures to quote.
QUICK = "a --quick bench run"
QUICK_NOTE = f"{QUICK}: two rounds, a few requests a level"
QUICK_CAVEAT = ("a --quick bench (two rounds, a few requests a level, shorter answers): a "
                "first look, its intervals too wide to quote")
