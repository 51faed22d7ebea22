"""The server log pane: the watched run's latest log lines, styled by what they say, our own
polls left out, new lines appended as the run's bounded log grows."""

from __future__ import annotations

import re

from rich.text import Text
from textual.widgets import RichLog

from collectors import visible
from engram_top import model
from engram_top.app.safe import safe
from engram_top.model import RunFacts

_STYLES = {"error": "bold red", "warning": "yellow", "ready": "bold green"}


class ServerLog(RichLog):
    """A RichLog that follows one run's log lines (a new run starts it afresh)."""

    # The run's deque of lines being shown, and the last log entry written to the pane (a
    # RichLog's own __init__ as it is: these start as nothing).
    _source: object = None
    _last: object = None

    def show(self, run: RunFacts | None) -> None:
        lines = run.log_lines if run is not None else None
        if lines is not self._source:
            self._source, self._last = lines, None
            self.clear()
            if run is not None and run.log_path:
                self.write(safe(Text(f"── {run.scenario}: {run.log_path}", style="dim")))
        if not lines:
            return
        # What came after the last entry written, found by identity from the end: the
        # supervisor appends to this bounded deque on its own schedule, so no counter kept
        # beside it (RunFacts.lines_seen lags it) can say where the new lines start.
        recent = list(lines)
        start = 0
        for i in range(len(recent) - 1, -1, -1):
            if recent[i] is self._last:
                start = i + 1
                break
        if start == len(recent):
            return
        self._last = recent[-1]
        for _, line in recent[start:]:
            if run is not None and model.is_own_poll(line, run.own_polls):
                continue  # our own /health and /metrics polls: noise here, kept in the file
            style = _STYLES.get(model.classify_log_line(line) or "", "")
            # The server's own bytes: an ESC or a C1 in them is shown, never sent on (made
            # visible before it is a Text, which would drop BEL, BS, VT, FF and CR unseen).
            self.write(log_line(visible(line, "\t"), style))


# SGLang's prefix, "[2026-11-29 11:03:58 TP0] " (ranks: TP, DP, PP, EP, ...): 26 columns of a
# narrow pane before the message starts. The pane shows the time and ranks; the file keeps it.
LOG_PREFIX = re.compile(r"^\[\d{4}-\d{2}-\d{2} (\d{2}:\d{2}:\d{2})((?: [A-Z]{2}\d+)*)\] ")
# vLLM's, "(EngineCore pid=3561) INFO 12-02 12:24:53 [core.py:133] ": 58 columns. The pane
# keeps the time, the process (its first word) and a level that is not INFO.
VLLM_PREFIX = re.compile(r"^\((\w+)(?: rank=\d+)? pid=\d+\) (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                         r"\d\d-\d\d (\d\d:\d\d:\d\d)(?:\.\d+)? \[[\w./-]+:\d+\] ")


def log_line(line: str, style: str = "") -> Text:
    """A server log line for the log pane: a short, dim time and rank, then the message."""
    m = LOG_PREFIX.match(line)
    if m is not None:
        text = Text(f"{m.group(1)}{m.group(2)} ", style="dim")
    elif (v := VLLM_PREFIX.match(line)) is not None:
        level = "" if v.group(2) == "INFO" else f" {v.group(2)}"
        text = Text(f"{v.group(3)} {v.group(1)}{level} ", style="dim")
        m = v
    else:
        return Text(line, style=style)
    text.append(line[m.end():], style=style)
    return text
