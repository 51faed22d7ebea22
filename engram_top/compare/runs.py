"""A dashboard's runs as trials for the comparison: each run's headline figures as a
RunResult, and the one comparison of a session's runs that the compare screen and a snapshot
both show.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import PurePath

from engram_top.compare import live_interval
from engram_top.compare.comparison import Comparison, compare
from engram_top.compare.measures import METRICS, Registry
from engram_top.compare.run_result import THROTTLED, WARMING, RunResult
from engram_top.model.figures import RunFigures
from engram_top.model.store import RunFacts
from engram_top.seed.reference import Reference
from scenarios.runstate import ENDED


def run_result(run: RunFacts, trial: int, source: str = "live", *,
               own_load: tuple[bool, bool, bool] = (True, True, True)) -> RunResult:
    """A dashboard run's headline figures as one trial for engram_top.compare.comparison.

    Time to ready is in node time (divided by the run's time scale). Latencies are the
    run's last 30 s window (SGLang's histograms); SGLang's inter-token latency stands in for
    TPOT, as it does in SGLang's own metrics. Where the dashboard drove the load, TPOT,
    throughput and goodput are its own requests' over the same window instead
    (RunFigures.load_*): bench_serving's per-request TPOT, with the spread their intervals
    need. ``own_load`` says whether (TPOT, throughput, goodput) may be the load's: not where
    another run compared with it has only the other figure (run_results), as a delta of one
    against the other would compare two different figures."""
    r = run.results
    if not own_load[0]:
        r = dataclasses.replace(r, load_tpot_mean_s=None)
    if not own_load[1]:
        r = dataclasses.replace(r, load_tok_s=None)
    if not own_load[2]:
        r = dataclasses.replace(r, load_good_rps=None)
    throttled = (f"{THROTTLED}: {'; '.join(r.throttled)}",) if r.throttled else ()
    warming: tuple[str, ...] = ()
    if (why := warming_up(r)) is not None:  # its sampled figures mean nothing yet
        r = dataclasses.replace(r, **dict.fromkeys(_SAMPLED))
        warming = (f"{WARMING}: {why}",)
    return RunResult(
        scenario=run.scenario, placement=run.placement, source=source, trial=trial,
        engine=run.engine_name or None, gpus=r.gpus, weights_gb=r.weights_gb,
        kv_tokens=r.kv_tokens,
        host_delta_gib=r.host_delta_gib,
        # Start-up in node time: a simulated node started x time_scale faster than the
        # node (and the seed) would; a real node's time_scale is 1.
        ready_s=run.node_seconds(r.ready_s),
        ttft_mean_s=r.ttft_mean_s, itl_mean_s=r.itl_mean_s,
        tpot_mean_s=r.itl_mean_s if r.load_tpot_mean_s is None else r.load_tpot_mean_s,
        output_tok_s=r.output_tok_s if r.load_tok_s is None else r.load_tok_s,
        joules_per_token=r.joules_per_token,
        goodput_rps=r.goodput_rps if r.load_good_rps is None else r.load_good_rps,
        slo_attainment=r.slo_attainment,
        notes=("live: last 30 s window of the server's histograms", *load_note(r), *throttled,
               *warming))


# A live figure means something once its run has served a whole window since ready (no
# start-up, no first cold requests in it) and that window holds this many requests.
WARM_REQUESTS = 30
# The figures sampled from the window (a warming run's are left out); the KV pool, weights,
# host memory and start-up are not, and stand from the start.
_SAMPLED = ("ttft_p50_s", "ttft_mean_s", "itl_p50_s", "itl_mean_s", "output_tok_s",
            "joules_per_token", "goodput_rps", "slo_attainment", "ttft_p50_bucket_s",
            "itl_p50_bucket_s", "load_tpot_mean_s", "load_tpot_sd_s", "load_tpot_n",
            "load_tok_s", "load_tok_s_sd", "load_bins", "load_good_rps", "load_good_rps_sd")


def load_note(r: RunFigures) -> tuple[str, ...]:
    """What a run's TPOT, throughput and goodput were read from, where the load's own
    requests."""
    said = [name for name, v in (("TPOT", r.load_tpot_mean_s), ("throughput", r.load_tok_s),
                                 ("goodput", r.load_good_rps)) if v is not None]
    return (f"{', '.join(said)}: the dashboard's load's own requests in that window",) \
        if said else ()


def warming_up(r: RunFigures) -> str | None:
    """Why a live run's latency and throughput do not mean anything yet ("12 s of a 30 s
    window served"), else None: also when it has none (no load) or does not say (a file
    written before runs kept their window)."""
    if r.served_s is None or r.window_s is None or not r.window_s > 0 \
            or all(getattr(r, name) is None for name in _SAMPLED):
        return None
    if r.served_s < r.window_s:
        return f"{r.served_s:.0f} s of a {r.window_s:.0f} s window served"
    if r.window_requests is not None and r.window_requests < WARM_REQUESTS:
        return f"{r.window_requests} of {WARM_REQUESTS} requests in the {r.window_s:.0f} s window"
    return None


def window(r: RunFigures) -> str | None:
    """What a live run's latencies were measured over: "30 s window, 412 requests"."""
    if r.window_s is None:
        return None
    count = "" if r.window_requests is None else f", {r.window_requests:,} requests"
    return f"{r.window_s:.0f} s window{count}"


def run_results(runs: list[RunFacts], source: str = "live") -> list[RunResult]:
    """Every run with figures, each numbered as a trial of its scenario (0, 1, ...). TPOT,
    throughput and goodput are the dashboard's load's window's (run_result) only where every
    run that has the other figure has the load's too."""
    measured = [run for run in runs if run.results.measured()]
    own = own_load(measured)
    counts: dict[str, int] = {}
    out = []
    for run in measured:
        trial = counts.get(run.scenario, 0)
        counts[run.scenario] = trial + 1
        out.append(run_result(run, trial, source, own_load=own))
    return out


def own_load(runs: Sequence[RunFacts]) -> tuple[bool, bool, bool]:
    """Whether a comparison of these runs takes TPOT, throughput and goodput from the
    dashboard's load's window: where every run past warming up that has the other figure
    (the server's; goodput since the load began) has the load's."""
    warm = [run.results for run in runs if warming_up(run.results) is None]
    return (all(r.load_tpot_mean_s is not None for r in warm if r.itl_mean_s is not None),
            all(r.load_tok_s is not None for r in warm if r.output_tok_s is not None),
            all(r.load_good_rps is not None for r in warm if r.goodput_rps is not None))


def comparison(runs: Sequence[RunFacts], *, baseline: str | None = None,
               extra: Sequence[RunResult] = (), reference: Reference | None = None,
               price_per_gpu_hour: float | None = None,
               metrics: Registry | None = None) -> Comparison | None:
    """The comparison of a session's runs (repeats are trials) and of runs loaded from
    files (--compare-with), at a price: the compare screen's, and the one a snapshot writes
    into both snapshot.json and summary.md. A file's runs are columns of their own, named
    with their source (own_column), never more trials of a live scenario. The baseline is
    `baseline` when it is among them, else the device placement's scenario (the seed's
    deltas are against it), else the first.
    None while no run has figures."""
    results = run_results(list(runs)) + [own_column(r) for r in extra]
    if not results:
        return None
    if reference is not None and runs and not extra \
            and not any(serves(run, reference.model) for run in runs):
        reference = None  # the seed's figures are another model's: no column for them
    names = list(dict.fromkeys(r.scenario for r in results))
    if baseline not in names:
        device = [r.scenario for r in results if r.placement == "device"]
        baseline = (device or names)[0]
    # A file's runs are a workload of their own: compared with their own file's baseline.
    workloads = {own_column(r).scenario: origin(r) for r in extra}
    c = compare(results, baseline, reference=reference,
                price_per_gpu_hour=price_per_gpu_hour,
                metrics=METRICS if metrics is None else metrics, workloads=workloads)
    live = live_windows(runs)  # a file's runs say their own warming up (their notes)
    c = dataclasses.replace(c, windows=live["windows"], warming={**c.warming, **live["warming"]})
    return within_windows(c, runs)


def within_windows(c: Comparison, runs: Sequence[RunFacts]) -> Comparison:
    """The comparison with an interval on the delta of each live scenario measured by one
    run, against a baseline measured by one, from within their windows
    (compare.live_interval): the mean TTFT's from the server's histogram; TPOT's,
    throughput's and goodput's from the dashboard's load, where they are its figures
    (run_results). Where
    an open bucket stops TTFT's, its window says why. Repeated runs keep their trial-level
    intervals."""
    alone: dict[str, RunFigures | None] = {}
    for run in runs:
        if run.results.measured():
            alone[run.scenario] = None if run.scenario in alone else run.results
    base = alone.get(c.baseline)
    if base is None or c.trials.get(c.baseline) != 1:
        return c
    tpot, tok, good = own_load([run for run in runs if run.results.measured()])
    found_by = {"ttft_mean_ms": live_interval.ttft_interval,
                **({"tpot_mean_ms": live_interval.tpot_interval} if tpot else {}),
                **({"output_tok_s": live_interval.throughput_interval} if tok else {}),
                **({"goodput_rps": live_interval.goodput_interval} if good else {})}
    windows = dict(c.windows)
    rows = []
    for row in c.rows:
        interval_of = found_by.get(row.metric.key)
        base_cell = row.cells.get(c.baseline)
        if interval_of is None or base_cell is None or base_cell.mean is None:
            rows.append(row)
            continue
        cells = dict(row.cells)
        for s, cell in row.cells.items():
            figures = alone.get(s)
            if s == c.baseline or figures is None or c.trials.get(s) != 1 \
                    or cell.mean is None or cell.delta is None or cell.interval is not None:
                continue
            found = interval_of(figures, base)
            if isinstance(found, str):
                # Said where the window had one to give but an open bucket hides the
                # spread; otherwise the verdict's "one run each" says it.
                if row.metric.key == "ttft_mean_ms" and s in windows \
                        and (figures.ttft_over or base.ttft_over):
                    windows[s] += f"; no TTFT interval: {found}"
                continue
            cells[s] = dataclasses.replace(cell, interval=found,
                                           spans_zero=found.lo <= 0.0 <= found.hi)
        rows.append(dataclasses.replace(row, cells=cells))
    return dataclasses.replace(c, rows=tuple(rows), windows=windows)


def live_windows(runs: Sequence[RunFacts]) -> dict[str, dict[str, str]]:
    """Each live scenario's window (its latest run's), and why a scenario whose every run is
    still warming up has no latency yet: a Comparison's ``windows`` and ``warming``."""
    windows: dict[str, str] = {}
    warming: dict[str, str] = {}
    warm: set[str] = set()
    for run in runs:
        if not run.results.measured():
            continue
        if (text := window(run.results)) is not None:
            windows[run.scenario] = text
        why = warming_up(run.results)
        if why is None:
            warm.add(run.scenario)
            warming.pop(run.scenario, None)
        elif run.scenario not in warm:
            # An ended run's last window is all it will have: "warming up" would wait for ever.
            warming[run.scenario] = why if run.state not in ENDED else (
                f"{why} when it {run.state}: start it again for a whole window")
    return {"windows": windows, "warming": warming}


def file_label(path: PurePath) -> str:
    """A file as a column names it: its folder and name ("B/report.json"), so two bench
    reports, each report.json in its own folder, read apart."""
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def from_file(results: Sequence[RunResult], path: PurePath) -> list[RunResult]:
    """A file's runs, their source naming the file ("bench:B/report.json"): what keeps
    each file's runs in columns of their own in a comparison (own_column)."""
    label = file_label(path)
    return [dataclasses.replace(r, source=f"{r.source.split(':', 1)[0]}:{label}")
            for r in results]


def compared_scenarios(runs: Sequence[RunFacts], extra: Sequence[RunResult] = ()
                       ) -> tuple[str, ...]:
    """The columns a comparison of these runs would have (comparison's scenarios), without
    comparing them: the dashboard asks every second whether there is a second one yet."""
    return tuple(dict.fromkeys([run.scenario for run in runs if run.results.measured()]
                               + [own_column(r).scenario for r in extra]))


def own_column(r: RunResult) -> RunResult:
    """A run loaded from a file, in a column of its own: its scenario labelled with its
    source ("device (B/report.json)"), so a bench's device runs never join the live device
    column as more trials of it (their workloads differ)."""
    return dataclasses.replace(r, scenario=f"{r.scenario} ({origin(r)})")


def origin(r: RunResult) -> str:
    """The file a loaded run came from, as its column names it."""
    return r.source.split(":", 1)[-1] or r.source


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
