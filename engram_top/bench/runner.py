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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collectors.pages import PageClient, bearer
from collectors.safetext import visible
from collectors.source import SourceName
from engram_top.alerts.monitor import AlertChange
from engram_top.alerts.thresholds import Thresholds
from engram_top.bench import ab, sweep
from engram_top.bench import report as bench_report
from engram_top.bench.plan import Plan
from engram_top.compare import paired, slo
from engram_top.compare.comparison import compare, to_json
from engram_top.compare.markdown import to_markdown
from engram_top.compare.measures import GOODPUT, METRICS, Registry
from engram_top.compare.run_result import QUICK_NOTE, THROTTLED, RunResult
from engram_top.compare.runs import serves
from engram_top.compare.slo import LevelStats, Slo
from engram_top.live.session import Session, SessionOptions
from engram_top.model import energy, facts
from engram_top.model.fingerprint import Fingerprint
from engram_top.model.store import SeriesName
from engram_top.model.store import node_time as startup_in_node_time
from engram_top.seed import reference
from engram_top.settings.paths import default_state_dir
from scenarios import bench_driver
from scenarios.engines.base import Mark
from scenarios.workload import DriverResult, WorkloadSpec


async def run_bench(plan: Plan, out: Path, say: Callable[[str], None] = print, *,
                    state_dir: Path | None = None, lock_wait_s: float = 0.0,
                    thresholds: Thresholds | None = None, force: bool = False,
                    say_left: Callable[[Session], None] | None = None) -> dict[str, Any]:
    """Run the plan and write its reports under ``out``. The servers it starts are those of
    the plan's scenario file, in its state folder (by default the one run, switch and stop
    use): `engram-top stop` finds whatever a killed bench left, and no second command starts
    a server of that file meanwhile. ``say_left``: told the session once it is closed, to
    name what it left running (an earlier command's server, if the bench ended before
    switching away from it)."""
    session = Session(SessionOptions(
        scenario_file=plan.scenarios_file,
        state_dir=state_dir or default_state_dir(plan.scenarios_file), load=None,
        free_ports=True, poll_interval=0.5, time_scale=plan.time_scale,
        serve_scale=plan.serve_scale, command="bench", lock_wait_s=lock_wait_s,
        thresholds=thresholds, force=force))
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
    stopped: str | None = None  # why the stop rule ended the rounds early
    rounds = 0
    modelled: dict[str, str] = {}  # scenario -> its placement, where the model can stand in
    try:
        await session.start()
        for trial in range(plan.trials):
            say(f"round {trial + 1}/{plan.trials}: {' '.join(ab.order(plan.scenarios, trial))}")
            for name in ab.order(plan.scenarios, trial):
                result, lvs = await _one(session, plan, name, trial, requests, say)
                results.append(result)
                levels.setdefault(name, []).append(lvs)
                sc = session.scenario(name)
                if getattr(sc.engine, "follows_reference", False) and \
                        sc.placement in reference.default().placements:
                    modelled[name] = sc.placement
            rounds = trial + 1
            if plan.stop is not None and trial + 1 < plan.trials and (stopped := ab.stop_reason(
                    plan.stop, plan.scenarios, plan.baseline, requests, results, rounds,
                    plan.workload.seed)):
                say(stopped)
                break
        await session.stop_scenario()
    finally:
        await session.close()
        if say_left is not None:
            say_left(session)
    # Another model's runs: the seed's figures are no reference for them.
    seed_column = any(serves(run, reference.default().model) for run in session.store.runs)
    table = _level_table(plan, levels, modelled, say)
    # What each scenario ran as (its last run's): `engram-top diff` of two reports reads it.
    ran_as = {run.scenario: run.fingerprint for run in session.store.runs
              if run.fingerprint is not None}
    return write_report(plan, results, requests, out, raised, seed_column=seed_column,
                        levels=table, rounds=rounds, stopped=stopped, fingerprints=ran_as)


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
    spec, wl, live_wl = plan.sweep, plan.workload, live_workload(plan)
    if spec is None:
        return table
    for name, placement in modelled.items():
        live = {lv.load: lv for lv in table.get(name, [])}
        say(f"modelling {name} at {len(spec.loads)} loads (the simulator's scheduler)")
        out = []
        for i, load in enumerate(spec.loads):
            # The model beside a live level serves what the live level served.
            answers = live_wl.output_len if load <= spec.live_up_to else wl.output_len
            lengths = sweep.lengths(wl.input_len, answers, wl.range_ratio,
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


def round_seed(seed: int, trial: int) -> int:
    """The requests' seed of a round: the plan's for the first, the next ones after it."""
    return seed + trial


def live_workload(plan: Plan) -> WorkloadSpec:
    """What the live levels send: the plan's workload, its answers capped where the plan
    says (a quick sweep's)."""
    wl = plan.workload
    if plan.live_output_len is None or plan.live_output_len >= wl.output_len:
        return wl
    return dataclasses.replace(wl, output_len=plan.live_output_len)


def write_report(plan: Plan, results: list[RunResult], requests: list[dict[str, Any]],
                 out: Path, alerts: list[dict[str, Any]] | None = None,
                 *, seed_column: bool = True,
                 levels: dict[str, list[LevelStats]] | None = None, rounds: int | None = None,
                 stopped: str | None = None,
                 fingerprints: dict[str, Fingerprint] | None = None) -> dict[str, Any]:
    """The plan's trials compared against its baseline, at its price, with the seed's
    figures beside them unless told not to, each level's row and a sweep's summary:
    report.json, report.md, requests.csv and the charts under ``out``; returns
    report.json's data."""
    # Goodput counts requests within the SLOs: a plan without [slo] has no goodput row.
    metrics = METRICS if plan.slos else Registry(tuple(m for m in METRICS
                                                       if m.key != GOODPUT.key))
    comparison = compare(results, plan.baseline, price_per_gpu_hour=plan.price_per_gpu_hour,
                         reference=reference.default() if seed_column else None,
                         metrics=metrics)
    levels = levels or {}
    summary = sweep.summary(levels, plan.baseline, plan.slos) if plan.sweep or plan.slos \
        else None
    shown_alerts = list(alerts or ())
    report: dict[str, Any] = {
        "plan": str(plan.path), "scenarios_file": str(plan.scenarios_file),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "results": [r.to_dict() for r in results], "comparison": to_json(comparison),
        "slo": [{"metric": x.metric, "percentile": x.percentile, "max_s": x.max_s}
                for x in plan.slos],
        "levels": {name: [lv.to_dict() for lv in lvs] for name, lvs in levels.items()},
        "sweep": summary, "alerts": shown_alerts,
        # The requests each round drew (round k: seed + k): two reports of the same workload
        # drew the same requests round by round, so `diff` pairs their rounds.
        "workload": facts.plain(live_workload(plan)),
        "fingerprints": {name: facts.plain(fp) for name, fp in (fingerprints or {}).items()}}
    rounds = rounds if rounds is not None else max((r.trial + 1 for r in results), default=0)
    found = ab.analyse(plan.scenarios, plan.baseline, requests, results, seed=plan.workload.seed)
    report["paired"] = {
        "rounds": rounds, "order": ab.pattern(plan.scenarios, rounds), "stopped": stopped,
        "stop_rule": None if plan.stop is None else plan.stop.describe(), "quick": plan.quick,
        "methods": {"difference": paired.bootstrap_method(paired.RESAMPLES, plan.workload.seed),
                    "mean_difference": paired.T_METHOD, "mean_relative": paired.FIELLER,
                    "quantile_relative": paired.BOOT_RATIO},
        "scenarios": ab.to_json(found)}
    judged = ab.verdict(plan, comparison, found, summary)
    report["verdict"] = judged.to_json()
    from engram_top.export import plots  # the charts' library only when writing them
    charts, why = plots.bench_charts(out, levels, summary, comparison, plan.baseline)
    report["charts"] = charts
    _write(out / "report.json", json.dumps(facts.finite_json(report), indent=2, default=str,
                                           allow_nan=False) + "\n")
    _write(out / "report.md", _markdown(plan, results, to_markdown(comparison),
                                        shown_alerts)
           + judged.markdown()
           + ab.markdown(found, plan.baseline, plan.scenarios, rounds, paired.RESAMPLES,
                         plan.workload.seed, stopped)
           + bench_report.levels_markdown(plan, levels, summary, charts, why))
    _write(out / "requests.csv", _csv(requests))
    return report


async def _one(session: Session, plan: Plan, name: str, trial: int,
               requests: list[dict[str, Any]], say: Callable[[str], None]
               ) -> tuple[RunResult, list[LevelStats]]:
    sc = session.scenario(name)
    time_scale, serve = sc.engine.clock(sc)
    say(f"round {trial + 1}/{plan.trials}: {name}: starting")
    run = await session.switch(name)
    if not await session.supervisor.wait_ready(run):
        say(f"  {name} did not become ready: {run.failure or run.state}")
        return RunResult(scenario=name, placement=sc.placement, source="bench", trial=trial,
                         gpus=plan.gpus, engine=sc.engine.display,
                         notes=(f"not ready: {run.failure or run.state}",)), []
    say(f"  ready after {run.ready_s:.1f} s; measuring")
    await _fresh_readings(session, time.monotonic())
    # A plan's rates are node time: the simulated node serves `serve` times faster. Each
    # round draws its own requests (every scenario of the round gets the same ones), so the
    # rounds' spread holds the workload's own sampling, not only the node's noise.
    spec = dataclasses.replace(
        live_workload(plan), count_prompts=bool(getattr(sc.engine, "simulated_node", False)),
        seed=round_seed(plan.workload.seed, trial),
        levels=tuple(dataclasses.replace(lv, rate=lv.rate / serve) if lv.rate else lv
                     for lv in plan.workload.levels))
    marks: dict[tuple[int, str], tuple[float, Mark | None]] = {}
    client = PageClient(sc.url, headers=bearer(sc.api_key))

    async def on_level(index: int, when: str) -> None:
        marks[(index, when)] = (time.monotonic(), await sweep.mark(client, sc.engine.mark_figures))
        lv = plan.workload.levels[index]
        what = f"concurrency {lv.concurrency}" if lv.concurrency else f"{lv.rate:g} req/s"
        if when == "start":
            say(f"  {name}: level {index + 1}/{len(spec.levels)} ({what}, {lv.requests} "
                "requests)")
        else:
            took = marks[(index, "end")][0] - marks.get((index, "start"), marks[(index, when)])[0]
            say(f"  {name}: level {index + 1}/{len(spec.levels)} done in {took:.1f} s")

    gpu_before = session.store.last_ok.get(SourceName.GPU)  # the energy counters as it starts
    try:
        # The driver in a process of its own: the session's polls in this one cannot delay
        # its clock (a first token read a few milliseconds late is a few more of TTFT).
        result = await bench_driver.drive(sc.url, spec, api_key=sc.api_key, on_level=on_level)
    except bench_driver.DriverError as exc:
        say(f"  {name}: {exc}")
        return RunResult(scenario=name, placement=sc.placement, source="bench", trial=trial,
                         gpus=plan.gpus, engine=sc.engine.display,
                         notes=(f"not measured: {exc}",)), []
    finally:
        await client.aclose()
    store = session.store
    levels = _live_levels(plan, result, marks, store, serve)
    bound = store.facts_for(name)  # the session's facts of this run: its modelled start-up
    planned = bound.planned_ready_s if bound is not None else None
    gpus = facts.gpu_facts(store)
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
    if plan.quick:  # every comparison of it says so, wherever its report is read
        notes.append(QUICK_NOTE)
    return RunResult(
        scenario=name, placement=sc.placement, source="bench", trial=trial,
        engine=sc.engine.display, gpus=plan.gpus or (len(gpus) or None),
        weights_gb=weights, kv_tokens=kv_tokens,
        host_delta_gib=now.host_delta_gib,  # the server's share (the host ledger's)
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
            energy.mean_power_w(gpu_before, store.last_ok.get(SourceName.GPU),
                                facts.serving_gpus(store)),
            None if result.output_tok_s is None else result.output_tok_s * serve),
        request_per_s=None if result.request_per_s is None else result.request_per_s * serve,
        goodput_rps=_run_goodput(levels, plan.slos), slo_attainment=_run_attainment(levels,
                                                                                  plan.slos),
        completed=len(result.records), failed=result.failed,
        duration_s=result.duration_s / serve, notes=tuple(notes)), levels


FRESH_WAIT_S = 5.0  # the most a run waits for its sources' first readings after ready


async def _fresh_readings(session: Session, since: float) -> None:
    """Wait until every source has a reading taken after ``since`` (the run's ready moment:
    its memory figures and energy counters as it starts serving), FRESH_WAIT_S at most."""
    deadline = since + FRESH_WAIT_S
    while time.monotonic() < deadline:
        latest = session.store.latest
        if latest and all(r.at > since for r in latest.values()):
            return
        await asyncio.sleep(0.05)


def _live_levels(plan: Plan, result: DriverResult,
                 marks: dict[tuple[int, str], tuple[float, Mark | None]],
                 store: Any, serve: float) -> list[LevelStats]:
    """One row per level the driver ran, in node time."""
    series = store.line(SourceName.SERVER, SeriesName.TOKEN_USAGE)
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
             f"Scenarios from `{plan.scenarios_file.name}`, {plan.trials} round(s) at most "
             f"(each scenario once a round, in alternating order), baseline `{plan.baseline}`."
             + (" A --quick run: two rounds, a few requests a level, shorter answers "
                + (f"(the live levels' {plan.live_output_len} tokens; the modelled levels "
                   "keep the plan's)" if plan.live_output_len else "")
                + ", the simulated node served faster (figures in node time); a first "
                "look, not a measurement to quote." if plan.quick else ""),
             f"Workload: {levels}; input {wl.input_len} and output {wl.output_len} tokens "
             f"(range ratio {wl.range_ratio:g}), seed {wl.seed}, {wl.warmup_requests} warm-up "
             f"request(s) excluded, streaming {wl.endpoint}.",
             "Measured: TTFT, TPOT (bench_serving's definitions) and output throughput by the "
             "client; weights and KV capacity from each server's own figures (SGLang's "
             "/metrics; vLLM's cache_config_info, and its log for weights); host memory as the "
             "server's share (its processes' private memory and their shared memory counted "
             "once), other tenants apart; time to ready from "
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
