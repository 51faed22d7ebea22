"""A bench plan (PLAN.toml): its [bench], [workload], [slo] and [sweep] tables read and
checked, every problem said with the file and the key, into a Plan the runner runs and the
report describes."""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_top.bench import ab, sweep
from engram_top.bench.ab import StopRule
from engram_top.bench.sweep import SweepSpec
from engram_top.compare import slo
from engram_top.compare.slo import Slo
from scenarios import scenario_file
from scenarios.bounds import Range, bounded_float, bounded_int, read_toml, typed
from scenarios.workload import Level, WorkloadSpec

# key -> (kind, default). Kinds: "str", "names" (a list of strings), or the Range of a
# number, with why its ends are where they are.
SCALE = bounded_float(0.001, 100)  # as a scenario file's time_scale and serve_scale
BENCH_KEYS: dict[str, tuple[Any, Any]] = {
    "scenarios_file": ("str", None), "scenarios": ("names", None), "baseline": ("str", None),
    # Rounds (the round limit under a [stop] rule): each starts every scenario once, in
    # alternating order (A B, B A, ...).
    "trials": (bounded_int(1, 1000), 1),
    "price_per_gpu_hour": (bounded_float(0, 10_000), None),  # US dollars: a few in practice
    "gpus": (bounded_int(1, 1024), None), "time_scale": (SCALE, None),
    "serve_scale": (SCALE, None)}
WORKLOAD_KEYS: dict[str, tuple[Any, Any]] = {
    # Tokens: a million is past any model's context.
    "levels": ("levels", None), "input_len": (bounded_int(1, 1_000_000), 1024),
    "output_len": (bounded_int(1, 1_000_000), 192),
    "range_ratio": (bounded_float(0.001, 1), 1.0), "seed": (bounded_int(0, 2**63 - 1), 1),
    "warmup_requests": (bounded_int(0, 100_000), 1),
    "endpoint": ("str", "/v1/completions"), "model": ("str", None),
    # A request not finished by then failed ("no complete answer within N s"): a stream that
    # stalls must not hold a level for the 10 minutes of a read timeout. A day at most.
    "request_timeout_s": (bounded_float(0.1, 86_400, unit="seconds"), 300.0)}
# [stop]: end the rounds early once the paired interval decides (bench.ab.StopRule).
STOP_KEYS: dict[str, tuple[Any, Any]] = {
    "figure": ("str", "ttft"), "statistic": ("str", "mean"),
    "margin_pct": (bounded_float(0.001, 100, unit="percent"), None),
    "min_rounds": (bounded_int(2, 1000), 3)}
STATISTICS = ("mean", "median", "p99")
# A level: requests to send, and streams in flight (one process: past a thousand it meets
# the open-file limit) or a rate in requests per second.
REQUESTS = bounded_int(1, 1_000_000)
CONCURRENCY = bounded_int(1, 1024)
RATE = bounded_float(0.001, 100_000, unit="requests per second")
_KINDS = {"str": "a string", "names": "a list of scenario names"}


class PlanError(ValueError):
    """A plan file that cannot run; names the file and the key."""


@dataclass(frozen=True)
class Plan:
    path: Path
    scenarios_file: Path
    scenarios: tuple[str, ...]
    baseline: str
    trials: int
    workload: WorkloadSpec
    price_per_gpu_hour: float | None
    gpus: int | None
    time_scale: float | None
    serve_scale: float | None
    slos: tuple[Slo, ...] = ()
    sweep: SweepSpec | None = None
    stop: StopRule | None = None
    quick: bool = False  # cut down by --quick (quick_plan)
    # The live requests' answers, where shorter than the workload's (a quick sweep's): the
    # modelled loads keep the workload's.
    live_output_len: int | None = None


def _check(kind: Any, value: Any) -> str | None:
    """What is wrong with a plan's value, or None."""
    if isinstance(kind, Range):
        return kind.problem(value)
    ok = isinstance(value, str) if kind == "str" else \
        isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)
    return None if ok else f"should be {_KINDS[kind]}, got {typed(value)}"


def _table(path: Path, raw: dict[str, Any], name: str, keys: dict[str, tuple[str, Any]],
           problems: list[str]) -> dict[str, Any]:
    """The table's values (defaults filled in); what is wrong goes to ``problems``."""
    table = raw.get(name, {})
    if not isinstance(table, dict):
        problems.append(f"{path}: {name}: should be a table [{name}]")
        return {k: d for k, (_, d) in keys.items()}
    out = {}
    for key, value in table.items():
        if key not in keys:
            problems.append(f"{path}: {name}.{key}: unknown key")
        elif keys[key][0] != "levels" and (wrong := _check(keys[key][0], value)) is not None:
            problems.append(f"{path}: {name}.{key}: {wrong}")
        else:
            out[key] = value
    return {**{k: d for k, (_, d) in keys.items()}, **out}


def _levels(path: Path, levels: Any, problems: list[str]) -> list[Level]:
    if not isinstance(levels, list) or not levels:
        problems.append(f"{path}: workload.levels: a list of {{concurrency = N, requests = M}} "
                        "or {rate = R, requests = M} tables")
        return []
    parsed = []
    for i, lv in enumerate(levels):
        where = f"{path}: workload.levels[{i}]"
        if not (isinstance(lv, dict) and set(lv) <= {"requests", "concurrency", "rate"}
                and "requests" in lv and ("concurrency" in lv) != ("rate" in lv)):
            problems.append(f"{where}: needs requests and exactly one of concurrency, rate "
                            "({concurrency = N, requests = M} or {rate = R, requests = M})")
            continue
        wrong = [f"{where}.{key}: {problem}" for key, kind in
                 (("requests", REQUESTS), ("concurrency", CONCURRENCY), ("rate", RATE))
                 if key in lv and (problem := kind.problem(lv[key])) is not None]
        if wrong:
            problems += wrong
            continue
        parsed.append(Level(lv["requests"], concurrency=lv.get("concurrency"),
                            rate=float(lv["rate"]) if "rate" in lv else None))
    return parsed


def load_plan(path: Path) -> Plan:
    try:
        raw = read_toml(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlanError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise PlanError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError:
        raise PlanError(f"{path}: not a plan (nested too deeply to read)") from None
    problems = [f"{path}: unknown top-level key '{k}'" for k in raw
                if k not in ("bench", "workload", "slo", "sweep", "stop")]
    bench = _table(path, raw, "bench", BENCH_KEYS, problems)
    wl = _table(path, raw, "workload", WORKLOAD_KEYS, problems)
    for key in ("scenarios_file", "scenarios", "baseline"):
        if bench[key] is None:
            problems.append(f"{path}: bench.{key}: missing")
    slos = slo.parse(str(path), raw.get("slo"), problems)
    sweep_spec = sweep.parse(str(path), raw.get("sweep"), problems)
    stop = _stop(path, raw, problems)
    if "sweep" in raw and wl["levels"] is not None:
        problems.append(f"{path}: workload.levels: a plan with [sweep] takes its levels from "
                        "sweep.loads; give one or the other")
        parsed: list[Level] = []
    elif sweep_spec is not None:
        parsed = [Level(sweep_spec.requests, rate=x) if sweep_spec.kind == "rate"
                  else Level(sweep_spec.requests, concurrency=int(x))
                  for x in sweep.live_loads(sweep_spec)]
        if not parsed:
            problems.append(f"{path}: sweep.live_up_to: below every load; at least the "
                            "first level runs live")
    elif "sweep" in raw:
        parsed = []  # its problems are said
    else:
        parsed = _levels(path, wl["levels"], problems)
    if problems:
        raise PlanError("\n".join(problems))
    scen_file = (path.parent / bench["scenarios_file"]).resolve()
    try:
        sf = scenario_file.load(scen_file)
    except scenario_file.ScenarioError as exc:
        raise PlanError(f"{path}: bench.scenarios_file: {exc}") from exc
    names = tuple(bench["scenarios"])
    unknown = [n for n in (*names, bench["baseline"]) if n not in sf.scenarios]
    if unknown:
        raise PlanError(f"{path}: bench.scenarios: not in {scen_file.name}: {', '.join(unknown)}")
    if bench["baseline"] not in names:
        raise PlanError(f"{path}: bench.baseline: '{bench['baseline']}' is not benchmarked")
    spec = WorkloadSpec(levels=tuple(parsed), input_len=wl["input_len"],
                        output_len=wl["output_len"], range_ratio=float(wl["range_ratio"]),
                        seed=wl["seed"], warmup_requests=wl["warmup_requests"],
                        endpoint=wl["endpoint"], model=wl["model"],
                        request_timeout_s=float(wl["request_timeout_s"]))
    return Plan(path, scen_file, names, bench["baseline"], bench["trials"], spec,
                bench["price_per_gpu_hour"], bench["gpus"], bench["time_scale"],
                bench["serve_scale"], slos, sweep_spec, stop)


def _stop(path: Path, raw: dict[str, Any], problems: list[str]) -> StopRule | None:
    if "stop" not in raw:
        return None
    before = len(problems)
    t = _table(path, raw, "stop", STOP_KEYS, problems)
    if t["figure"] not in ab.STOP_FIGURES:
        problems.append(f"{path}: stop.figure: one of {', '.join(ab.STOP_FIGURES)}, "
                        f"got {t['figure']!r}")
    if t["statistic"] not in STATISTICS:
        problems.append(f"{path}: stop.statistic: one of {', '.join(STATISTICS)}, "
                        f"got {t['statistic']!r}")
    elif ab.STOP_FIGURES.get(t["figure"]) in ab.PER_ROUND and t["statistic"] != "mean":
        problems.append(f"{path}: stop.statistic: {t['figure']} is one figure per round: "
                        "only its mean")
    if len(problems) > before:
        return None
    margin = None if t["margin_pct"] is None else float(t["margin_pct"]) / 100
    return StopRule(ab.STOP_FIGURES[t["figure"]], t["statistic"], margin, t["min_rounds"])


# --quick: a short run that still pairs (two rounds, A B then B A), about a minute on the
# simulated node: a few requests a level, service 4x faster (converted back to node time),
# start-up 100x.
QUICK_REQUESTS = 4
QUICK_SERVE_SCALE = 0.25
QUICK_TIME_SCALE = 0.01
# Shorter answers: TTFT and TPOT are per token and keep their meaning; end-to-end latency
# and throughput are of the shorter answers.
QUICK_OUTPUT_LEN = 48
# A sweep's live loads are a few requests a node minute: served 100x faster, their arrivals
# come a second apart instead of a minute. Its live answers are QUICK_OUTPUT_LEN long (the
# model beside them too); its modelled loads keep the plan's lengths and requests, so the
# crossover is the full plan's.
QUICK_SWEEP_SERVE_SCALE = 0.01


def quick_plan(plan: Plan) -> Plan:
    """The plan cut down for --quick: two rounds, at most QUICK_REQUESTS requests a level
    and one warm-up, shorter answers (a sweep's live ones only), the simulated node
    faster."""
    wl = plan.workload
    levels = tuple(dataclasses.replace(lv, requests=min(lv.requests, QUICK_REQUESTS))
                   for lv in wl.levels)
    spec = plan.sweep and dataclasses.replace(
        plan.sweep, requests=min(plan.sweep.requests, QUICK_REQUESTS))
    serve = QUICK_SWEEP_SERVE_SCALE if plan.sweep else QUICK_SERVE_SCALE
    return dataclasses.replace(
        plan, trials=2, quick=True, sweep=spec,
        workload=dataclasses.replace(
            wl, levels=levels, warmup_requests=min(wl.warmup_requests, 1),
            output_len=wl.output_len if plan.sweep else min(wl.output_len, QUICK_OUTPUT_LEN)),
        live_output_len=min(wl.output_len, QUICK_OUTPUT_LEN) if plan.sweep else None,
        time_scale=min(plan.time_scale or QUICK_TIME_SCALE, QUICK_TIME_SCALE),
        serve_scale=min(plan.serve_scale or serve, serve),
        stop=None)
