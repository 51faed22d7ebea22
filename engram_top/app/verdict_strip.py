"""The dashboard's verdict strip: one line, shown once two scenarios have figures, saying
who wins each measured axis against the baseline (compare.verdict), or why nobody does yet
("warming up", "? n=1": one run each gives no interval). The compare screen (c) has the
sentences with their intervals and the table behind them."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from collectors import visible
from engram_top.compare import (
    NO_INTERVAL,
    NOT_MEASURED,
    WARMING_UP,
    Finding,
    RunResult,
    Verdict,
    compare_runs,
    compared_scenarios,
    held_findings,
    hold,
    verdict_of,
)
from engram_top.model import RunStore, SourceName, StoreTopic


def strip_verdict(store: RunStore, extra: Sequence[RunResult] = ()) -> Verdict | None:
    """The verdict of the session's comparison (with the runs loaded from files); None
    while fewer than two scenarios have figures (then without comparing: one attached
    server's new reading each second would cost a comparison of one)."""
    if len(compared_scenarios(store.runs, extra)) < 2:
        return None
    c = compare_runs(store.runs, baseline=store.baseline, extra=extra)
    if c is None or len(c.scenarios) < 2:
        return None
    return verdict_of(c, warming=c.warming)


# The axes as the strip names them (compare.verdict's keys), and in fewer letters where the
# line is too narrow for every scenario's axes.
_LONG = {"kv_capacity": "KV", "host_ram": "host RAM", "ttft": "TTFT", "tpot": "TPOT",
         "throughput": "tok/s", "goodput": "goodput"}
_SHORT = {**_LONG, "host_ram": "RAM", "goodput": "good"}
LEGEND = " · ▲ wins ▼ loses ≈ same ? one run … warming up · c: details"
DETAILS = " · c: details"


def strip_text(found: Verdict, width: int | None = None) -> Text:
    """"verdict vs device · host-prefetch: KV ▲ host RAM ? TTFT … · c: details": each
    scenario (with its own baseline where that is not the strip's: a file's column against
    its file's device), each axis it was measured on with its mark (Finding.mark), in
    ``width`` cells (None: no limit) with every shown scenario's axes whole. Too wide, it
    gives up in this order: the legend, "c: details", the axes' long names, then the last
    scenarios ("+2 (c)": the compare screen has them all)."""
    groups = _by_scenario(found)
    tries = [(_LONG, LEGEND), (_LONG, DETAILS), (_SHORT, DETAILS), (_SHORT, "")]
    if width is None:  # room for it all
        return _line(found, groups, *tries[0])
    text = Text()
    for names, tail in tries:
        text = _line(found, groups, names, tail)
        if text.cell_len <= width:
            return text
    for shown in range(len(groups) - 1, 0, -1):
        text = _line(found, groups[:shown], _SHORT, f" · +{len(groups) - shown} (c)")
        if text.cell_len <= width:
            return text
    return text  # even one scenario is too wide (a long name): the line's ellipsis cuts it


def _by_scenario(found: Verdict) -> list[tuple[str, list[Finding]]]:
    """The measured findings scenario by scenario (they come axis by axis), each in the
    axes' order."""
    groups: dict[str, list[Finding]] = {}
    for f in found.findings:
        if f.outcome != NOT_MEASURED:
            groups.setdefault(f.evidence.scenario, []).append(f)
    return list(groups.items())


def _line(found: Verdict, groups: Sequence[tuple[str, Sequence[Finding]]],
          names: dict[str, str], tail: str) -> Text:
    text = Text("verdict", style="bold")
    text.append(f" vs {visible(found.baseline)}")
    for scenario, findings in groups:
        # A file's column is judged against its own file's run of the baseline's placement
        # (never a live run of another workload): said where that is not the strip's.
        against = findings[0].evidence.baseline if findings else found.baseline
        other = "" if against == found.baseline else f" vs {visible(against)}"
        text.append(f" · {visible(scenario)}{other}:", style="bold")
        for f in findings:
            style = "yellow" if f.outcome in (WARMING_UP, NO_INTERVAL) else \
                "green" if f.winner == scenario else "red" if f.winner else "dim"
            text.append(f" {names.get(f.evidence.axis, f.evidence.axis)} {f.mark}", style=style)
    if tail:
        text.append(tail, style="dim")
    return text


class VerdictStrip(Static):
    """The strip's widget: shown (class -shown) once there is a verdict, and the events
    line below it gives up a row for it (the screen's -verdict class), so no panel loses
    one at 100x30."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._seen: tuple[int, ...] | None = None
        self._found: Verdict | None = None
        self._failed = ""  # the last failure said, not said again each refresh

    def refresh_from(self, store: RunStore, extra: Sequence[RunResult]) -> None:
        seen = store.version(StoreTopic.RUN, SourceName.SERVER, StoreTopic.BASELINE)
        if seen == self._seen:  # no new reading, no new run: the same verdict
            return
        self._seen = seen
        try:
            found = strip_verdict(store, extra)
        except Exception as exc:  # a comparison nobody foresaw: said once, the panels stay
            why = f"no verdict: {type(exc).__name__}: {exc}"
            if why != self._failed:
                self._failed = why
                store.event("error", why)
            found = None
        if found is not None and self._found is not None:
            # A win shown stands until the evidence moves out of its interval.
            found = hold(found, held_findings(self._found))
        self.set_class(found is not None, "-shown")
        self.screen.set_class(found is not None, "-verdict")
        self._found = found
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """The verdict's line at the strip's width (a line that does not fit gives up its
        legend, then long names, then scenarios: never an axis cut in half)."""
        if self._found is not None and self.content_size.width > 0:
            self.update(strip_text(self._found, self.content_size.width), layout=False)
