"""`engram-top bench PLAN.toml --out DIR`: the seed's controlled benchmark, headless.

For each trial, for each scenario of the plan in turn: start it (switching stops the previous
server and waits for its HBM to return), wait until ready, warm up, run the measured
workload, read memory and start-up facts; at the end stop. Then write DIR/report.md (the
comparison in the seed's terms), DIR/report.json and DIR/requests.csv (one row per request).

On the simulated node, times are converted back to node time: start-up divided by the
time scale, latencies divided by the serve scale, throughput multiplied by it. The report
says so.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import json
import os
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors.pages import PageClient, bearer
from collectors.safetext import visible
from engram_top.alerts.monitor import AlertChange
from engram_top.alerts.thresholds import Thresholds
from engram_top.bench import sweep
from engram_top.bench.sweep import SweepSpec
from engram_top.compare import slo
from engram_top.compare.comparison import compare, to_json, to_markdown
from engram_top.compare.run_result import THROTTLED, RunResult
from engram_top.compare.runs import serves
from engram_top.compare.slo import LevelStats, Slo
from engram_top.live.session import Session, SessionOptions
from engram_top.model import energy, facts
from engram_top.model.store import node_time as startup_in_node_time
from engram_top.seed import reference
from engram_top.settings.paths import default_state_dir
from scenarios import scenario_file
from scenarios.bounds import Range, bounded_float, bounded_int, read_toml, typed
from scenarios.engines.base import Mark
from scenarios.workload import DriverResult, Level, WorkloadSpec, run_workload

# key -> (kind, default). Kinds: "str", "names" (a list of strings), or the Range of a
# number, with why its ends are where they are.
SCALE = bounded_float(0.001, 100)  # as a scenario file's time_scale and serve_scale
BENCH_KEYS: dict[str, tuple[Any, Any]] = {
    "scenarios_file": ("str", None), "scenarios": ("names", None), "baseline": ("str", None),
    "trials": (bounded_int(1, 1000), 1),  # each trial starts every scenario once
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
                if k not in ("bench", "workload", "slo", "sweep")]
    bench = _table(path, raw, "bench", BENCH_KEYS, problems)
    wl = _table(path, raw, "workload", WORKLOAD_KEYS, problems)
    for key in ("scenarios_file", "scenarios", "baseline"):
        if bench[key] is None:
            problems.append(f"{path}: bench.{key}: missing")
    slos = slo.parse(str(path), raw.get("slo"), problems)
    sweep_spec = sweep.parse(str(path), raw.get("sweep"), problems)
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
                bench["serve_scale"], slos, sweep_spec)


async def run_bench(plan: Plan, out: Path, say: Callable[[str], None] = print, *,
                    state_dir: Path | None = None, lock_wait_s: float = 0.0,
                    thresholds: Thresholds | None = None) -> dict[str, Any]:
    """Run the plan and write its reports under ``out``. The servers it starts are those of
    the plan's scenario file, in its state folder (by default the one run, switch and stop
    use): `engram-top stop` finds whatever a killed bench left, and no second command starts
    a server of that file meanwhile."""
    session = Session(SessionOptions(
        scenario_file=plan.scenarios_file,
        state_dir=state_dir or default_state_dir(plan.scenarios_file), load=None,
        free_ports=True, poll_interval=0.5, time_scale=plan.time_scale,
        serve_scale=plan.serve_scale, command="bench", lock_wait_s=lock_wait_s,
        thresholds=thresholds))
    session.announce = say
    results: list[RunResult] = []
    requests: list[dict[str, Any]] = []
    raised: list[dict[str, Any]] = []  # every alert the runs raised, for the report

    def alert(change: AlertChange) -> None:
        if change.change == "raised":
            a = change.alert
            raised.append({"wall": a.since, "id": a.id, "severity": a.severity,
                           "message": a.message,
                           "scenario": session.store.run.scenario if session.store.run
                           else None})
            say(f"  alert: {a.message}")

    session.alerts.listeners.append(alert)
    levels: dict[str, list[list[LevelStats]]] = {}  # scenario -> trials -> levels
    modelled: dict[str, str] = {}  # scenario -> its placement, where the model can stand in
    try:
        await session.start()
        for trial in range(plan.trials):
            for name in plan.scenarios:
                result, lvs = await _one(session, plan, name, trial, requests, say)
                results.append(result)
                levels.setdefault(name, []).append(lvs)
                sc = session.scenario(name)
                if getattr(sc.engine, "follows_reference", False) and \
                        sc.placement in reference.default().placements:
                    modelled[name] = sc.placement
        await session.stop_scenario()
    finally:
        await session.close()
    # Another model's runs: the seed's figures are no reference for them.
    seed_column = any(serves(run, reference.default().model) for run in session.store.runs)
    table = _level_table(plan, levels, modelled, say)
    return write_report(plan, results, requests, out, raised, seed_column=seed_column,
                        levels=table)


def _level_table(plan: Plan, levels: dict[str, list[list[LevelStats]]],
                 modelled: dict[str, str],
                 say: Callable[[str], None]) -> dict[str, list[LevelStats]]:
    """Each scenario's levels, its trials merged; a sweep's loads above what ran live from
    the simulator's model (simulated scenarios only), and the model beside each live one."""
    table: dict[str, list[LevelStats]] = {}
    for name, trials in levels.items():
        by_load: dict[float, list[LevelStats]] = {}
        for trial in trials:
            for lv in trial:
                by_load.setdefault(lv.load, []).append(lv)
        table[name] = [slo.merge_trials(lvs) for _, lvs in sorted(by_load.items())]
    spec, wl = plan.sweep, plan.workload
    if spec is None:
        return table
    for name, placement in modelled.items():
        live = {lv.load: lv for lv in table.get(name, [])}
        say(f"modelling {name} at {len(spec.loads)} loads (the simulator's scheduler)")
        out = []
        for i, load in enumerate(spec.loads):
            lengths = sweep.lengths(wl.input_len, wl.output_len, wl.range_ratio,
                                    spec.modelled_requests, wl.seed + 1000 + i)
            m = sweep.modelled_level(placement, load, spec.kind, lengths, plan.slos, wl.seed)
            if load <= spec.live_up_to and load not in live:
                continue  # it did not run live (a server that never became ready)
            if load in live:
                lv = live[load]
                lv.model = {"goodput_rps": m.goodput_rps, "attainment": m.attainment,
                            "ttft_p99_s": m.latency["ttft"]["p99"],
                            "tpot_p99_s": m.latency["tpot"]["p99"],
                            "output_tok_s": m.output_tok_s}
                out.append(lv)
            else:
                out.append(m)
        table[name] = out
    return table


def write_report(plan: Plan, results: list[RunResult], requests: list[dict[str, Any]],
                 out: Path, alerts: list[dict[str, Any]] | None = None,
                 *, seed_column: bool = True,
                 levels: dict[str, list[LevelStats]] | None = None) -> dict[str, Any]:
    """The plan's trials compared against its baseline, at its price, with the seed's
    figures beside them unless told not to, each level's row and a sweep's summary:
    report.json, report.md, requests.csv and the charts under ``out``; returns
    report.json's data."""
    comparison = compare(results, plan.baseline, price_per_gpu_hour=plan.price_per_gpu_hour,
                         reference=reference.default() if seed_column else None)
    levels = levels or {}
    summary = sweep.summary(levels, plan.baseline, plan.slos) if plan.sweep or plan.slos \
        else None
    report = {"plan": str(plan.path), "scenarios_file": str(plan.scenarios_file),
              "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "results": [r.to_dict() for r in results], "comparison": to_json(comparison),
              "slo": [{"metric": x.metric, "percentile": x.percentile, "max_s": x.max_s}
                      for x in plan.slos],
              "levels": {name: [lv.to_dict() for lv in lvs] for name, lvs in levels.items()},
              "sweep": summary, "alerts": list(alerts or ())}
    from engram_top.bench import report as bench_report
    from engram_top.export import plots  # the charts' library only when writing them
    charts, why = plots.bench_charts(out, levels, summary, comparison, plan.baseline)
    report["charts"] = charts
    _write(out / "report.json", json.dumps(facts.finite_json(report), indent=2, default=str,
                                           allow_nan=False) + "\n")
    _write(out / "report.md", _markdown(plan, results, to_markdown(comparison),
                                        report["alerts"]) + bench_report.levels_markdown(
        plan, levels, summary, charts, why))
    _write(out / "requests.csv", _csv(requests))
    return report


async def _one(session: Session, plan: Plan, name: str, trial: int,
               requests: list[dict[str, Any]], say: Callable[[str], None]
               ) -> tuple[RunResult, list[LevelStats]]:
    sc = session.scenario(name)
    time_scale, serve = sc.engine.clock(sc)
    say(f"trial {trial + 1}/{plan.trials}: {name}: starting")
    run = await session.switch(name)
    if not await session.supervisor.wait_ready(run):
        say(f"  {name} did not become ready: {run.failure or run.state}")
        return RunResult(scenario=name, placement=sc.placement, source="bench", trial=trial,
                         gpus=plan.gpus, engine=sc.engine.display,
                         notes=(f"not ready: {run.failure or run.state}",)), []
    say(f"  ready after {run.ready_s:.1f} s; measuring")
    await asyncio.sleep(1.5)  # a fresh poll of every source after ready
    # A plan's rates are node time: the simulated node serves `serve` times faster.
    spec = dataclasses.replace(
        plan.workload, count_prompts=bool(getattr(sc.engine, "simulated_node", False)),
        levels=tuple(dataclasses.replace(lv, rate=lv.rate / serve) if lv.rate else lv
                     for lv in plan.workload.levels))
    marks: dict[tuple[int, str], tuple[float, Mark | None]] = {}
    client = PageClient(sc.url, headers=bearer(sc.api_key))

    async def on_level(index: int, when: str) -> None:
        marks[(index, when)] = (time.monotonic(), await sweep.mark(client, sc.engine.mark_figures))

    gpu_before = session.store.last_ok.get("gpu")  # the energy counters as it starts
    try:
        result = await run_workload(sc.url, spec, api_key=sc.api_key, on_level=on_level)
    finally:
        await client.aclose()
    store = session.store
    levels = _live_levels(plan, result, marks, store, serve)
    bound = store.facts_for(name)  # the session's facts of this run: its modelled start-up
    planned = bound.planned_ready_s if bound is not None else None
    gpus = facts.gpu_facts(store)
    host = facts.host_facts(store)
    # Without GPU readings (a CPU server, no NVML) SGLang's own figures still say it.
    now = facts.summary(store)
    weights, kv_tokens = now.weights_gb, now.kv_tokens
    for r in result.records:
        requests.append({"scenario": name, "trial": trial, "level": r.level, "status": "ok",
                         "input_len": r.input_len, "output_len": r.output_len,
                         "ttft_ms": r.ttft * 1e3 / serve, "e2e_ms": r.e2e * 1e3 / serve,
                         "tpot_ms": None if r.tpot is None else r.tpot * 1e3 / serve,
                         "itl_mean_ms": (sum(r.itls) / len(r.itls) * 1e3 / serve)
                         if r.itls else None})
    for f in result.failures:  # kept, with why; no latency: they are in no figure
        requests.append({"scenario": name, "trial": trial, "level": f.level,
                         "status": f.kind, "input_len": f.input_len, "output_len": f.received,
                         "asked_len": f.output_len, "error": f.reason})

    def node_time(value: float | None) -> float | None:
        return None if value is None else value / serve

    incomplete = f" ({result.incomplete} of them incomplete)" if result.incomplete else ""
    say(f"  {len(result.records)} requests, {result.failed} failed{incomplete}, "
        f"{(result.output_tok_s or 0) * serve:.1f} tok/s")
    if result.failures:
        say(f"  first failure: {result.failures[0].reason}")
    notes = [f"driver CPU {result.driver_cpu_s:.2f} s over {result.duration_s:.1f} s"]
    if result.failed:
        notes.append(f"{result.failed} requests failed{incomplete}: left out of latency and "
                     "throughput (requests.csv says why)")
    if time_scale != 1 or serve != 1:
        notes.append(f"simulated: start-up x{time_scale:g}, service x{serve:g}; figures "
                     "converted to node time")
    notes += result.errors[:5]
    if bound is not None and bound.results.throttled:  # the session's figures saw it serve
        notes.append(f"{THROTTLED}: {'; '.join(bound.results.throttled)}")
    return RunResult(
        scenario=name, placement=sc.placement, source="bench", trial=trial,
        engine=sc.engine.display, gpus=plan.gpus or (len(gpus) or None),
        weights_gb=weights, kv_tokens=kv_tokens,
        host_delta_gib=host.delta_gib if host else None,
        ready_s=None if run.ready_s is None
        else startup_in_node_time(run.ready_s, time_scale, planned),
        ttft_mean_s=node_time(result.mean("ttft")), tpot_mean_s=node_time(result.mean("tpot")),
        itl_mean_s=node_time(_mean([i for r in result.records for i in r.itls])),
        e2e_mean_s=node_time(result.mean("e2e")),
        ttft_p99_s=node_time(result.quantile("ttft", 0.99)),
        tpot_p99_s=node_time(result.quantile("tpot", 0.99)),
        output_tok_s=None if result.output_tok_s is None else result.output_tok_s * serve,
        # The serving GPUs' mean draw over the workload per node-time token/s: J per token.
        joules_per_token=energy.joules_per_token(
            energy.mean_power_w(gpu_before, store.last_ok.get("gpu"), facts.serving_gpus(store)),
            None if result.output_tok_s is None else result.output_tok_s * serve),
        request_per_s=None if result.request_per_s is None else result.request_per_s * serve,
        goodput_rps=_run_goodput(levels, plan.slos), slo_attainment=_run_attainment(levels,
                                                                                  plan.slos),
        completed=len(result.records), failed=result.failed,
        duration_s=result.duration_s / serve, notes=tuple(notes)), levels


def _live_levels(plan: Plan, result: DriverResult,
                 marks: dict[tuple[int, str], tuple[float, Mark | None]],
                 store: Any, serve: float) -> list[LevelStats]:
    """One row per level the driver ran, in node time."""
    series = store.line("server", "token_usage")
    points = series.points() if series is not None else []
    out = []
    for i, level in enumerate(plan.workload.levels):
        if i >= len(result.level_durations):
            break
        records = [r for r in result.records if r.level == i]
        times = [{"ttft": r.ttft / serve, "e2e": r.e2e / serve,
                  "tpot": None if r.tpot is None else r.tpot / serve} for r in records]
        (t0, m0), (t1, m1) = marks.get((i, "start"), (0.0, None)), marks.get((i, "end"),
                                                                           (0.0, None))
        extra = {**sweep.server_deltas(m0, m1, serve), **sweep.kv_usage(points, t0, t1)}
        out.append(slo.level_stats(
            times, sum(1 for f in result.failures if f.level == i),
            result.level_durations[i] / serve, plan.slos,
            load=level.rate if level.rate is not None else float(level.concurrency or 1),
            kind="rate" if level.rate is not None else "concurrency", modelled=False,
            output_tokens=sum(r.output_len for r in records), **extra))
    return out


def _run_goodput(levels: list[LevelStats], slos: tuple[Slo, ...]) -> float | None:
    duration = sum(lv.duration_s for lv in levels)
    return sum(lv.good for lv in levels) / duration if slos and duration > 0 else None


def _run_attainment(levels: list[LevelStats], slos: tuple[Slo, ...]) -> float | None:
    total = sum(lv.requests + lv.failed for lv in levels)
    return sum(lv.good for lv in levels) / total if slos and total else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _markdown(plan: Plan, results: list[RunResult], table: str,
              alerts: list[dict[str, Any]]) -> str:
    wl = plan.workload
    levels = ", ".join(f"{lv.requests} requests at concurrency {lv.concurrency}"
                       if lv.concurrency else f"{lv.requests} requests at {lv.rate:g} req/s"
                       for lv in wl.levels)
    lines = [f"# engram-top bench: {plan.path.name}", "",
             f"Scenarios from `{plan.scenarios_file.name}`, {plan.trials} trial(s) each, "
             f"baseline `{plan.baseline}`.",
             f"Workload: {levels}; input {wl.input_len} and output {wl.output_len} tokens "
             f"(range ratio {wl.range_ratio:g}), seed {wl.seed}, {wl.warmup_requests} warm-up "
             f"request(s) excluded, streaming {wl.endpoint}.",
             "Measured: TTFT, TPOT (bench_serving's definitions) and output throughput by the "
             "client; weights and KV capacity from each server's own figures (SGLang's "
             "/metrics; vLLM's cache_config_info, and its log for weights); host memory as used "
             "(MemTotal - MemAvailable) minus the pre-launch baseline; time to ready from "
             "launch to the ready line (vLLM: to /health and a first /metrics page).", ""]
    failed = [r for r in results if r.completed == 0]
    for r in failed:
        lines.append(f"- {r.scenario} trial {r.trial + 1}: no measurement ({'; '.join(r.notes)})")
    notes = sorted({n for r in results for n in r.notes if n.startswith("simulated")})
    lines += [f"- {n}" for n in notes]
    # Raised during the runs, with the user's thresholds, as the dashboard would have shown.
    lines += [f"- alert during {a['scenario'] or 'the bench'}: {a['message']}" for a in alerts]
    # Names and servers' errors: a line each, no control (the table is made so already).
    return "\n".join([*map(visible, lines), "", table, ""])


def _csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    # status: ok, failed or incomplete; output_len is what came, asked_len what was asked
    # (failed and incomplete rows only, with their error).
    fields = ["scenario", "trial", "level", "status", "input_len", "output_len", "ttft_ms",
              "tpot_ms", "itl_mean_ms", "e2e_ms", "asked_len", "error"]
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    for row in rows:
        # A server's error text, a scenario's name: no control in a file read with cat.
        writer.writerow({k: (f"{v:.3f}" if isinstance(v, float) else
                             visible(v) if isinstance(v, str) else v) for k, v in row.items()})
    return buf.getvalue()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
