"""The demo load beside a live run: its shape, its lengths cut to fit the model, its driver
(a process of its own) and its counters as the store shows them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from collectors.engine_http import WINDOW_S
from engram_top.compare.slo import Slo
from engram_top.compare.slo import bounds as slo_bounds
from engram_top.model.store import RunStore
from scenarios.load_window import LoadWindow
from scenarios.scenario_file import Scenario

if TYPE_CHECKING:
    from scenarios.load_process import LoadProcess


@dataclass(frozen=True)
class LoadSpec:
    concurrency: int = 8
    input_len: int = 512
    output_len: int = 128
    range_ratio: float = 0.5
    seed: int = 1


def fit_context(input_len: int, output_len: int, context: int | None) -> tuple[int, int]:
    """The demo load's lengths, cut to fit a model whose context is shorter than a prompt
    and its output (a small model refuses every such request): the output keeps up to
    a quarter of the context, the prompt the rest."""
    if context is None or input_len + output_len <= context:
        return input_len, output_len
    output_len = max(1, min(output_len, context // 4))
    return max(1, context - output_len), output_len


def context_len(store: RunStore) -> int | None:
    """The watched model's context length, as its start-up log gave it."""
    run = store.run
    value = run.startup.context_len if run is not None else None
    return value if value is not None and value > 1 else None


def driver(sc: Scenario, spec: LoadSpec, context: int | None,
           slos: Sequence[Slo]) -> tuple[LoadProcess, str]:
    """The load's driver for ``sc``, not yet started, and what to say once it is."""
    # A process of its own: what the dashboard costs is then the dashboard's alone.
    from scenarios.load_process import LoadProcess
    # A simulated node serves `serve` times faster: the bounds are in node time.
    _, serve = sc.engine.clock(sc)
    input_len, output_len = fit_context(spec.input_len, spec.output_len, context)
    # A simulated server takes a prompt's length as a number: 64K-token prompts by the
    # hundred need not travel as words.
    load = LoadProcess(sc.url, concurrency=spec.concurrency, input_len=input_len,
                       output_len=output_len, range_ratio=spec.range_ratio, seed=spec.seed,
                       api_key=sc.api_key, bounds=slo_bounds(slos, serve),
                       count_prompt=sc.engine.simulated_node,
                       # the server's latency window: the load's figures cover the same span
                       window_s=WINDOW_S)
    fitted = "" if (input_len, output_len) == (spec.input_len, spec.output_len) else (
        f", prompts up to {input_len} and outputs up to {output_len} tokens to fit the "
        f"model's context of {context}")
    lengths = "" if fitted or (input_len, output_len) == (LoadSpec.input_len,
                                                          LoadSpec.output_len) else (
        f", prompts up to {input_len} and outputs up to {output_len} tokens")
    return load, f"load started: {spec.concurrency} streams, closed loop{fitted}{lengths}"


def counters(load: LoadProcess, slos: Sequence[Slo], node_s: float) -> dict[str, Any]:
    """The driver's counters as the store keeps them; ``node_s``: node seconds the load has
    run (goodput's denominator)."""
    s = load.stats
    return {"concurrency": load.concurrency, "sent": s.sent, "completed": s.completed,
            "failed": s.failed, "output_tokens": s.output_tokens, "last_error": s.last_error,
            "good": s.good, "slo": [x.label for x in slos], "node_s": node_s}


def load_window(load: LoadProcess, serve: float) -> LoadWindow | None:
    """The load's last window in the node's time (``serve``: the node serves that many
    times as long as it takes here), as the store keeps it."""
    w = load.stats.window
    return None if w is None else w.in_node_time(serve)
