"""The header line: the node, the scenario, its state (as the screen says it: Shown) and how
far its start-up is, or how long it took."""

from __future__ import annotations

from enum import StrEnum

from rich.text import Text

from collectors import seconds, visible
from engram_top.app.panels.drawing import bar
from engram_top.model import (
    SERVING,
    STARTING_UP,
    UNASKED_END,
    RunFacts,
    RunState,
    RunStore,
    SourceName,
)

PHASE_LABELS = {"launching": "launching", "distributed_init": "distributed init",
                "weights": "loading weights", "kv_pool": "allocating KV pool",
                "graphs": "capturing CUDA graphs", "http": "starting HTTP",
                "warmup": "warming up", "ready": "ready", "failed": "failed",
                "stopping": "stopping", "stopped": "stopped"}
# The same phases in the scenario list's state cell of 9 ("▸ KV pool"); the header says
# each in full (PHASE_LABELS).
PHASE_SHORT = {"launching": "launch", "distributed_init": "init", "weights": "weights",
               "kv_pool": "KV pool", "graphs": "graphs", "http": "HTTP", "warmup": "warm-up"}
STATE_STYLES: dict[str, str] = {  # by RunState, and Shown's as the header's bold red
    RunState.READY: "bold green", RunState.STARTING: "bold yellow",
    RunState.LAUNCHING: "bold yellow", RunState.STOPPING: "bold yellow",
    RunState.STOPPED: "bold", RunState.EXITED: "bold red", RunState.FAILED: "bold red"}


class Shown(StrEnum):
    """The states the screen says beyond a run's own (RunState): what the screen sees of a
    server the supervisor still calls ready or attached."""

    DEGRADED = "degraded"  # a TP rank died; the server still answers
    NOT_ANSWERING = "not answering"  # its polls fail (the header's words)
    NO_ANSWER = "no answer"  # the same, in the scenario list's narrower cell


def run_state(store: RunStore, run: RunFacts, silent: Shown = Shown.NOT_ANSWERING) -> str:
    """A run's state as the screen says it. A server we watch but did not start has no
    exit for the supervisor to see: a failed poll is how it is known gone (a killed
    attached server must not read ATTACHED), said as ``silent``."""
    down = store.latest.get(SourceName.SERVER) if run is store.run else None
    if run.state in SERVING and down is not None and down.status.value == "error":
        return str(silent)
    if run.state == RunState.READY and run.degraded:
        return str(Shown.DEGRADED)
    return str(run.state)


def header(store: RunStore, now: float, width: int | None = None,
           lead: tuple[Text, Text] | None = None) -> Text:
    """The header line: the node, the scenario, its state and how far its start-up is (or
    how long it took). Given the line's ``width``, what matters least goes first when it
    does not fit: the node-time note, the node, the program's name, then the bar narrows;
    the scenario and its state always stay. ``lead`` (a replay's position, then its file's
    name, which goes before the bar does) comes first."""
    run = store.run
    if run is None:
        return Text.assemble(*(lead or ()), ("engram-top · preparing the node…", "bold"))
    state = run_state(store, run)
    parts: list[tuple[str, Text]] = []  # (name, text), in screen order
    if lead is not None:
        parts.append(("lead", lead[0]))
        parts.append(("lead file", lead[1]))
        parts.append(("lead end", Text("  ")))
    parts.append(("program", Text("engram-top · ", style="bold")))
    # Visible here, so that the widths the line is fitted by are the ones shown.
    parts.append(("node", Text(f"{visible(run.node)} · ")))
    parts.append(("scenario", Text.assemble((f"{visible(run.scenario)} ", "bold cyan"), "· ")))
    # Each part ends with its own blank and none starts with one: a viewer that drops a
    # leading blank of a styled run (some SVG renderers do) cannot glue two words.
    parts.append(("state", Text(f"{state.upper()} ", style=STATE_STYLES.get(state, "bold red"))))
    if run.state in STARTING_UP:
        elapsed = now - run.launched_at
        expected = run.expected_ready_s
        frac = min(0.99, elapsed / expected) if expected else 0.0
        progress = f"{PHASE_LABELS.get(run.phase, run.phase)} · {seconds(elapsed)}"
        if expected:
            progress += f" of ~{seconds(expected)}"
        parts.append(("bar", Text.assemble(bar([(frac, "yellow")], 1.0, 20), " ")))
        parts.append(("progress", Text(progress + " ")))
    elif run.ready_s is not None and state in (*SERVING, Shown.DEGRADED, Shown.NOT_ANSWERING):
        parts.append(("ready", Text(f"in {seconds(run.ready_s)} ")))
        if run.time_scale != 1:
            parts.append(("node time", Text(f"(×{run.time_scale:g}: "
                                            f"{run.node_seconds(run.ready_s):.0f} s node time) ",
                                            style="dim")))
    elif run.ready_s is not None:  # stopping, stopped, exited: not a countdown
        parts.append(("ready", Text(f"· it had been ready in {seconds(run.ready_s)} ",
                                    style="dim")))
    if run.exit_code is not None and run.state in UNASKED_END:
        parts.append(("exit", Text(f"exit code {run.exit_code}", style="red")))
    # Why, once classified: the first thing on-call reads; not once an attached server's
    # supervisor restarted it and it answers again (the death stays in the recording).
    if run.death is not None and state not in (*SERVING, Shown.DEGRADED):
        parts.append(("death", Text(f" · {visible(run.death.title)}", style="bold red")))
    for drop in ("node time", "node", "program", "lead file", "bar"):
        if width is None or sum(t.cell_len for _, t in parts) <= width:
            break
        parts = [(name, t) for name, t in parts if name != drop]
    text = Text(no_wrap=True, overflow="ellipsis")
    for _, t in parts:
        text.append_text(t)
    return text
