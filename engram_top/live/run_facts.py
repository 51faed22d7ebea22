"""What the live session tells the store of a run: a launched run's facts, the supervisor's
news of it as it happens, the server's reading while its port is not open yet, and the model
and Engram placement its engine reads from what the server said."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from collectors.readings import Reading, Status
from collectors.source import SourceName
from collectors.startup_facts import StartupFacts
from engram_top.model.fingerprint import fingerprint
from engram_top.model.hicache import hicache_facts, typed_args
from engram_top.model.store import RunFacts, RunStore, StoreTopic
from engram_top.seed.reference import Reference
from scenarios.engines.base import Engine, ServerCollector
from scenarios.runstate import RunState
from scenarios.scenario_file import Scenario
from scenarios.server_run import Run

# How the start-up phases read in a sentence ("waiting for the server's port (loading
# weights)").
PHASE_WORDS = {"launching": "launching", "distributed_init": "starting its processes",
               "weights": "loading weights", "kv_pool": "allocating the KV pool",
               "graphs": "capturing CUDA graphs"}


def launched(run: Run, ref: Reference, node: str) -> RunFacts:
    """The store's facts of a run that was just launched on ``node``."""
    sc = run.scenario
    engine = sc.engine
    time_scale = engine.clock(sc)[0]
    estimate = run.estimate_s
    planned = None
    if engine.follows_reference and sc.placement in ref.placements:
        planned = ref.placements[sc.placement].ready_s  # the model it runs
        estimate = estimate if estimate is not None else planned * time_scale
    facts = RunFacts(scenario=sc.name, placement=sc.placement or "?", node=node,
                     time_scale=time_scale, own_polls=engine.own_polls,
                     launched_wall=run.launched_wall, launched_at=run.launched_at,
                     state=run.state, pid=run.pid, log_path=str(run.log_path), url=sc.url,
                     expected_ready_s=estimate, baseline_host_used=run.baseline_host_used,
                     baseline_gpu_used=dict(run.baseline_gpu), title=sc.title,
                     planned_ready_s=planned, engine=engine.speaks,
                     engine_name=engine.display, words=dict(engine.words),
                     model=sc.model_path or (ref.model if engine.follows_reference
                                             else None))
    facts.log_lines = run.lines
    return facts


def until_port(run: Run, collector: ServerCollector) -> Callable[[], Awaitable[Reading[Any]]]:
    """The server's poll, which, while its log says it has not reached its HTTP phase,
    says what it waits for rather than knock on a port nothing listens on yet (and show
    "connection refused" through every normal start-up). That reading is named as the
    engine's collector names its own ("vllm http://..."), so it is the same source's."""
    engine = run.scenario.engine
    http_phases = engine.readiness.http_phases

    async def poll() -> Reading[Any]:
        if run.state == RunState.STARTING and not run.http_up \
                and run.phase not in http_phases:
            phase = PHASE_WORDS.get(run.phase, run.phase.replace("_", " "))
            return Reading(f"{engine.reading_source} {run.scenario.url}", Status.STARTING,
                           message=f"waiting for the server's port ({phase})")
        return await collector.poll()
    return poll


def sync(store: RunStore, run: Run, seen: dict[str, tuple[float, int, int | None]]) -> None:
    """The supervisor's view of a run into the store's facts. ``seen``: by scenario, the
    (launch, parser, its version) whose start-up facts the store holds."""
    facts = store.facts_for(run.scenario.name)
    if facts is None or facts.launched_at != run.launched_at:
        return
    before = (facts.state, facts.phase, facts.lines_seen)
    facts.state, facts.phase = run.state, run.phase
    facts.ready_at, facts.ended_at = run.ready_at, run.ended_at
    facts.exit_code, facts.failure = run.exit_code, run.failure
    if facts.degraded != run.degraded:
        facts.degraded = run.degraded
        store.bump(StoreTopic.RUN)
    if run.lines_seen != facts.lines_seen:
        facts.lines_seen = run.lines_seen
        # The facts are taken again only when a line told the parser something (the
        # dashboard's own polls in the access log do not).
        told = (run.launched_at, id(run.parser), getattr(run.parser, "version", None))
        if told[2] is None or seen.get(run.scenario.name) != told:
            seen[run.scenario.name] = told
            parsed = run.parser.facts()
            facts.phase_durations = parsed.phase_durations()
            facts.startup = parsed
        else:  # the log's clock moves on all the same (a stale rate shows)
            facts.startup = dataclasses.replace(
                facts.startup, last_line_at=getattr(run.parser, "last_line_at", None))
    if (facts.state, facts.phase, facts.lines_seen) != before:
        store.bump(StoreTopic.RUN)


def logged_args(startup: StartupFacts) -> dict[str, Any]:
    """The server args its log printed: every key it gave, the typed reading over the raw
    text where there is one."""
    parsed = startup.server_args
    if parsed is None:
        return {}
    return {**parsed.raw, **typed_args(parsed)}


def simulated_env(simulated: Mapping[str, object] | None) -> dict[str, str]:
    """The Engram switches a simulated server says it runs with (/server_info's own
    "simulated" block): started by hand, its process environment has none of them."""
    env = simulated.get("env") if simulated is not None else None
    if not isinstance(env, dict):
        return {}
    return {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}


def read_engram(store: RunStore, facts: RunFacts, engine: Engine, sc: Scenario | None,
                env: dict[str, str]) -> None:
    """The watched run's model, Engram placement and prefetch verdict, from what its
    engine can tell: the scenario (None: a server someone else started), the server's
    environment and args, its log, its GPU."""
    server = store.data(SourceName.SERVER)
    if not env and server is not None:
        env = simulated_env(server.simulated)
    args = {**(server.server_args if server is not None else {}),
            **logged_args(facts.startup)}
    gpus = store.data(SourceName.GPU)
    gpu_name = gpus.devices[0].name if gpus is not None and gpus.devices else None
    setting = engine.engram(sc, env=env, args=args, startup=facts.startup,
                            gpu_name=gpu_name)
    changed = False
    if setting != facts.engram:
        facts.engram, changed = setting, True
    if not facts.owned and facts.placement == "?" and setting is not None \
            and setting.placement is not None:
        facts.placement, changed = setting.placement, True
    model = facts.model or args.get("model_path") or (
        server.model_path if server is not None else None)
    if model != facts.model:
        facts.model, changed = model, True
    if changed:
        store.bump(StoreTopic.RUN)


def take_fingerprint(store: RunStore, facts: RunFacts, engine: Engine, sc: Scenario | None,
                     env: dict[str, str], thp: str) -> None:
    """The run's fingerprint (engram_top.model.fingerprint) from what the server, its log,
    its scenario and the node say now; the facts change only where it did."""
    server = store.data(SourceName.SERVER)
    if not env and server is not None:
        env = simulated_env(server.simulated)
    switches = {k: v for k, v in {**(sc.launch_env() if sc is not None else {}), **env}.items()
                if k.startswith(engine.env_prefixes)}  # no prefixes: none
    args = {**(server.server_args if server is not None else {}),
            **(facts.startup.server_args.raw if facts.startup.server_args else {})}
    parallel = dict(facts.startup.parallel)
    # A size the log only bounds from below (its highest rank tag) is said so; where the
    # server states its TP size, the stated one stands.
    at_least = {k for k in parallel if f"parallel.{k}" in facts.startup.derived}
    if server is not None and server.tp_size is not None \
            and ("tp_size" not in parallel or "tp_size" in at_least):
        parallel["tp_size"] = server.tp_size
        at_least.discard("tp_size")
    setting = facts.engram
    engram = "" if setting is None else ", ".join(str(v) for v in (
        setting.placement, setting.layout, None if setting.pinned is None else
        ("pinned" if setting.pinned else "not pinned"), setting.verdict) if v)
    hicache = hicache_facts(store)
    found = fingerprint(
        engine=facts.engine_name or facts.engine, model=facts.model,
        placement=facts.placement, parallel=parallel, parallel_at_least=tuple(at_least),
        raw_args=args, switches=switches,
        engram=engram, hicache_host_bytes=None if hicache is None or hicache.pool_bytes is None
        else int(hicache.pool_bytes), server=server, gpu=store.data(SourceName.GPU),
        host=store.data(SourceName.HOST), thp=thp)
    if found != facts.fingerprint:
        facts.fingerprint = found
        store.bump(StoreTopic.RUN)
