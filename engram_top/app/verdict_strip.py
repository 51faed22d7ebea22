"""The dashboard's verdict strip: one line, shown once two scenarios have figures, saying
who wins each measured axis against the baseline (compare.verdict), or why nobody does yet
("warming up", "? n=1": one run each gives no interval). The compare screen (c) has the
sentences with their intervals and the table behind them."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from collectors.safetext import visible
from engram_top.compare.run_result import RunResult
from engram_top.compare.runs import comparison
from engram_top.compare.verdict import NO_INTERVAL, NOT_MEASURED, WARMING_UP, Verdict, verdict
from engram_top.model.store import RunStore


def strip_verdict(store: RunStore, extra: Sequence[RunResult] = ()) -> Verdict | None:
    """The verdict of the session's comparison (with the runs loaded from files); None
    while fewer than two scenarios have figures."""
    c = comparison(store.runs, extra=extra)
    if c is None or len(c.scenarios) < 2:
        return None
    return verdict(c, warming=c.warming)


# The axes in the strip's few letters (compare.verdict's keys).
_SHORT = {"kv_capacity": "KV", "host_ram": "host RAM", "ttft": "TTFT", "tpot": "TPOT",
          "throughput": "tok/s", "goodput": "goodput"}


def strip_text(found: Verdict) -> Text:
    """"verdict vs device · host-prefetch: KV ▲ host RAM ? TTFT … · c: details": each
    scenario, each axis it was measured on with its mark (Finding.mark)."""
    text = Text("verdict", style="bold")
    text.append(f" vs {visible(found.baseline)}")
    scenario = None
    order = list(dict.fromkeys(f.evidence.scenario for f in found.findings))
    # Scenario by scenario (the findings come axis by axis), each in the axes' order.
    for f in sorted(found.findings, key=lambda f: order.index(f.evidence.scenario)):
        if f.outcome == NOT_MEASURED:
            continue
        if f.evidence.scenario != scenario:
            scenario = f.evidence.scenario
            text.append(f" · {visible(scenario)}:", style="bold")
        style = "yellow" if f.outcome in (WARMING_UP, NO_INTERVAL) else \
            "green" if f.winner == f.evidence.scenario else "red" if f.winner else "dim"
        text.append(f" {_SHORT.get(f.evidence.axis, f.evidence.axis)} {f.mark}", style=style)
    text.append(" · ▲ wins ▼ loses ≈ same ? one run … warming up · c: details", style="dim")
    return text


class VerdictStrip(Static):
    """The strip's widget: shown (class -shown) once there is a verdict, and the events
    line below it gives up a row for it (the screen's -verdict class), so no panel loses
    one at 100x30."""

    def __init__(self, **kw: str) -> None:
        super().__init__(**kw)
        self._seen: tuple[int, ...] | None = None

    def refresh_from(self, store: RunStore, extra: Sequence[RunResult]) -> None:
        seen = store.version("run", "server")
        if seen == self._seen:  # no new reading, no new run: the same verdict
            return
        self._seen = seen
        found = strip_verdict(store, extra)
        self.set_class(found is not None, "-shown")
        self.screen.set_class(found is not None, "-verdict")
        if found is not None:
            self.update(strip_text(found))
