"""A dashboard's runs as trials for the comparison: each run's headline figures as a
RunResult, and the one comparison of a session's runs that the compare screen and a snapshot
both show.
"""

from __future__ import annotations

from collections.abc import Sequence

from engram_top.compare.comparison import Comparison, compare
from engram_top.compare.measures import Registry
from engram_top.compare.run_result import THROTTLED, RunResult
from engram_top.model.store import RunFacts
from engram_top.seed.reference import Reference


def run_result(run: RunFacts, trial: int, source: str = "live") -> RunResult:
    """A dashboard run's headline figures as one trial for engram_top.compare.comparison.

    Time to ready is in node time (divided by the run's time scale). Latencies are the
    run's last 30 s window (SGLang's histograms); SGLang's inter-token latency stands in for
    TPOT, as it does in SGLang's own metrics."""
    r = run.results
    throttled = (f"{THROTTLED}: {'; '.join(r.throttled)}",) if r.throttled else ()
    return RunResult(
        scenario=run.scenario, placement=run.placement, source=source, trial=trial,
        engine=run.engine_name or None, gpus=r.gpus, weights_gb=r.weights_gb,
        kv_tokens=r.kv_tokens,
        host_delta_gib=r.host_delta_gib,
        # Start-up in node time: a simulated node started x time_scale faster than the
        # node (and the seed) would; a real node's time_scale is 1.
        ready_s=run.node_seconds(r.ready_s),
        ttft_mean_s=r.ttft_mean_s, tpot_mean_s=r.itl_mean_s, itl_mean_s=r.itl_mean_s,
        output_tok_s=r.output_tok_s, joules_per_token=r.joules_per_token,
        goodput_rps=r.goodput_rps, slo_attainment=r.slo_attainment,
        notes=("live: last 30 s window of the server's histograms", *throttled))


def run_results(runs: list[RunFacts], source: str = "live") -> list[RunResult]:
    """Every run with figures, each numbered as a trial of its scenario (0, 1, ...)."""
    counts: dict[str, int] = {}
    out = []
    for run in runs:
        if not run.results.measured():
            continue
        trial = counts.get(run.scenario, 0)
        counts[run.scenario] = trial + 1
        out.append(run_result(run, trial, source))
    return out


def comparison(runs: Sequence[RunFacts], *, baseline: str | None = None,
               extra: Sequence[RunResult] = (), reference: Reference | None = None,
               price_per_gpu_hour: float | None = None,
               metrics: Registry | None = None) -> Comparison | None:
    """The comparison of a session's runs (repeats are trials) and of runs loaded from
    files (--compare-with), at a price: the compare screen's, and the one a snapshot writes
    into both snapshot.json and summary.md. The baseline is `baseline` when it is among them,
    else the device placement's scenario (the seed's deltas are against it), else the first.
    None while no run has figures."""
    results = run_results(list(runs)) + list(extra)
    if not results:
        return None
    if reference is not None and runs and not extra \
            and not any(serves(run, reference.model) for run in runs):
        reference = None  # the seed's figures are another model's: no column for them
    names = list(dict.fromkeys(r.scenario for r in results))
    if baseline not in names:
        device = [r.scenario for r in results if r.placement == "device"]
        baseline = (device or names)[0]
    more = {} if metrics is None else {"metrics": metrics}  # else compare's own default
    return compare(results, baseline, reference=reference,
                   price_per_gpu_hour=price_per_gpu_hour, **more)


def serves(run: RunFacts, model: str) -> bool:
    """Whether the run serves ``model`` (a Hugging Face id such as the seed's
    deepseek-ai/DeepSeek-V4.1-Flash): the same name, by the last part of the path (a local
    copy keeps it), in any case and with or without the dot of the version. A run whose
    model nobody has told yet counts as serving it."""
    if run.model is None:
        return True
    return _model_key(run.model) == _model_key(model)


def _model_key(path: str) -> str:
    name = path.rstrip("/").rsplit("/", 1)[-1].lower()
    return name.replace(".", "").replace("_", "-")
