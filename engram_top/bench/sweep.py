"""The bench's load levels, one row each, and the load sweep.

Every level of a bench is its own row (slo.LevelStats): the load, throughput, latency
percentiles, goodput and attainment, queue time, retractions and KV usage. A plan's [sweep]
raises the load through its `loads`: those up to `live_up_to` are driven over HTTP against
the real (or simulated) server; above that, where this machine cannot drive the load, a
simulated node's levels come from the simulator's deterministic model (sim.model, the
same scheduler the simulated server runs, in virtual time), marked `modelled` in every table
and plot. The model also runs at the live loads, so the report shows how far it is from what
was measured there.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from collectors import page_kind, promtext
from collectors.pages import PageClient, PageError
from engram_top.compare import slo
from engram_top.compare.slo import LevelStats, Slo
from engram_top.seed import reference
from engram_top.sim import memory, model
from scenarios.bounds import bounded_float, bounded_int
from scenarios.engines.base import Mark

KINDS = ("rate", "concurrency")


@dataclass(frozen=True)
class SweepSpec:
    kind: str  # "rate" (requests/s, node time, Poisson arrivals) or "concurrency"
    loads: tuple[float, ...]  # raised in this order
    live_up_to: float  # loads above this are modelled
    requests: int  # per live level
    modelled_requests: int  # per modelled level
    seed: int = 1


def parse(where: str, table: Any, problems: list[str]) -> SweepSpec | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        problems.append(f"{where}: sweep: should be a table [sweep]")
        return None
    known = {"kind", "loads", "live_up_to", "requests", "modelled_requests"}
    for key in sorted(set(table) - known):
        problems.append(f"{where}: sweep.{key}: unknown key")
    kind = table.get("kind", "rate")
    loads = table.get("loads")
    ok = True
    if kind not in KINDS:
        problems.append(f"{where}: sweep.kind: one of {', '.join(KINDS)}, got {kind!r}")
        ok = False
    if not isinstance(loads, list) or not loads or len(loads) > MAX_LOADS or not all(
            LOAD.problem(v) is None for v in loads) or loads != sorted(loads):
        problems.append(f"{where}: sweep.loads: a rising list of up to {MAX_LOADS} numbers, "
                        f"each {LOAD.describe()}")
        ok = False
    elif kind == "concurrency" and not all(float(v).is_integer() for v in loads):
        problems.append(f"{where}: sweep.loads: whole numbers for kind = \"concurrency\"")
        ok = False
    live = table.get("live_up_to", 0)
    if (problem := LIVE_UP_TO.problem(live)) is not None:
        problems.append(f"{where}: sweep.live_up_to: {problem}")
        ok = False
    counts = {}
    for key, default, bounds in (("requests", 32, REQUESTS),
                                 ("modelled_requests", 400, MODELLED_REQUESTS)):
        v = table.get(key, default)
        if (problem := bounds.problem(v)) is not None:
            problems.append(f"{where}: sweep.{key}: {problem}")
            ok = False
        counts[key] = v
    if not ok or not isinstance(loads, list):  # a list when ok: narrowed for the types
        return None
    return SweepSpec(kind, tuple(float(v) for v in loads), float(live),
                     counts["requests"], counts["modelled_requests"])


# A load is requests per second or streams in flight; above the live loads, the model runs
# them in virtual time, so its requests bound its cost (a hundred thousand: seconds).
MAX_LOADS = 64
LOAD = bounded_float(0.001, 100_000)
LIVE_UP_TO = bounded_float(0, 100_000)
REQUESTS = bounded_int(1, 1_000_000)
MODELLED_REQUESTS = bounded_int(1, 100_000)


def live_loads(spec: SweepSpec) -> tuple[float, ...]:
    return tuple(x for x in spec.loads if x <= spec.live_up_to)


# --------------------------------------------------------------------------- live levels


async def mark(client: PageClient,
               figures: Callable[[dict[str, promtext.Family]], Mark]) -> Mark | None:
    """The server's own counters now, as its engine reads them from /metrics (``figures``:
    the engine's mark_figures); None when the page cannot be had (the level's row then has
    no queue time or retraction count, and says nothing false)."""
    try:
        page = await client.get("/metrics", deadline_s=5.0, limit_bytes=16 * 1024 * 1024)
        # A line it cannot read costs that line's figure only (lenient, as the poll is);
        # a page with no line it can read is no mark (ValueError).
        return figures(page_kind.read(page.text, promtext.Skipped()))
    except (PageError, TimeoutError, OSError, ValueError):
        return None


def server_deltas(start: Mark | None, end: Mark | None,
                  serve_scale: float) -> dict[str, Any]:
    """A level's mean queue time (node seconds) and retractions, from its two marks."""
    out: dict[str, Any] = {}
    if start is None or end is None:
        return out
    sum0, sum1, count0, count1 = (start.queue_sum_s, end.queue_sum_s, start.queue_count,
                                  end.queue_count)
    if sum0 is not None and sum1 is not None and count0 is not None and count1 is not None:
        n = count1 - count0
        if n > 0:
            out["queue_mean_s"] = (sum1 - sum0) / n / serve_scale
    if start.retracted is not None and end.retracted is not None:
        out["retractions"] = round(end.retracted - start.retracted)
    return out


def kv_usage(points: Sequence[tuple[float, float]], start: float,
             end: float) -> dict[str, Any]:
    """The KV pool's usage over a level, from the session's series (monotonic times)."""
    inside = [v for t, v in points if start <= t <= end]
    if not inside:
        return {}
    return {"kv_usage_max": max(inside), "kv_usage_mean": sum(inside) / len(inside)}


# --------------------------------------------------------------------------- the model


def modelled_level(placement: str, load: float, kind: str, lengths: list[tuple[int, int]],
                   slos: Sequence[Slo], seed: int) -> LevelStats:
    """One level of ``placement`` on the simulated node, in the model's virtual time."""
    ref = reference.default()
    service = ref.placements[placement].service
    capacity = memory.plan(ref, placement).kv_tokens
    if kind == "rate":
        run = model.simulate_open_level(service, capacity, load, lengths,
                                        random.Random(seed * 7919 + round(load * 1000)))
    else:
        run = model.simulate_level(service, capacity, int(load), lengths)
    times = [{"ttft": r.ttft, "tpot": r.tpot if r.output_len > 1 else None, "e2e": r.e2e}
             for r in run.requests]
    queue = [r.queue for r in run.requests]
    return slo.level_stats(
        times, 0, run.duration, slos, load=load, kind=kind, modelled=True,
        output_tokens=run.output_tokens,
        queue_mean_s=sum(queue) / len(queue) if queue else None,
        retractions=run.retractions, kv_usage_max=run.kv_usage_max,
        kv_usage_mean=run.kv_usage_mean,
        notes=("modelled: the simulator's scheduler in virtual time",))


def lengths(input_len: int, output_len: int, range_ratio: float, count: int,
            seed: int) -> list[tuple[int, int]]:
    """The level's request lengths, drawn as bench_serving's random dataset draws them."""
    rng = random.Random(seed)

    def draw(full: int) -> int:
        return rng.randint(max(1, int(full * range_ratio)), full)
    return [(draw(input_len), draw(output_len)) for _ in range(count)]


# --------------------------------------------------------------------------- the summary


def summary(levels: dict[str, list[LevelStats]], baseline: str,
            slos: Sequence[Slo]) -> dict[str, Any]:
    """Each scenario's highest load within the SLOs, and where each other scenario's
    goodput overtakes the baseline's for good (the crossover)."""
    out: dict[str, Any] = {
        "slo": [s.label for s in slos],
        "highest_within_slo": {name: slo.highest_within(lvs) if slos else None
                               for name, lvs in levels.items()},
        "crossover": {}}
    base = levels.get(baseline, [])
    for name, lvs in levels.items():
        if name != baseline and base:
            out["crossover"][name] = {"over": baseline, **slo.crossover(base, lvs)}
    return out


def crossover_sentence(name: str, c: dict[str, Any], unit: str) -> str:
    over = c["over"]
    if c["at"] is None:
        return f"{name}'s goodput does not overtake {over}'s within the sweep."
    how = " (in the modelled range)" if c.get("modelled") else ""
    if c["where"] == "below":
        text = f"{name}'s goodput is above {over}'s from the lowest load swept " \
               f"({c['at']:g} {unit}){how}"
    else:
        lo, hi = c["between"]
        text = (f"{name}'s goodput overtakes {over}'s above {c['at']:.3g} {unit} (between "
                f"the levels at {lo:g} and {hi:g}){how}")
    if c.get("until") is None:
        return text + ", and stays ahead to the highest load swept."
    lo, hi = c["until_between"]
    if c.get("until_how") == "level":
        return text + (f"; the two are level again (not told apart) above {c['until']:.3g} "
                       f"{unit} (between {lo:g} and {hi:g}).")
    return text + (f"; it falls behind again above {c['until']:.3g} {unit} (between {lo:g} "
                   f"and {hi:g}), where {name} breaks down too.")
