"""The pieces the panels are drawn with: bars, sparklines, aligned columns, labelled rows,
the rows that fit a short panel, a windowed quantile in words, a ledger's figure, and the
line that says a panel's source is failing."""

from __future__ import annotations

import math
from typing import Any, Literal

from rich.cells import cell_len
from rich.console import Group
from rich.control import strip_control_codes
from rich.text import Span, Text

from collectors import gib, latency, latency_bucket, visible
from engram_top import model
from engram_top.model import STOP_ASKED, LedgerLine, Quantiles, RunStore, SeriesName, SourceName

BAR_WIDTH = 24


SPARK = "▁▂▃▄▅▆▇█"


def bar(parts: list[tuple[float, str]], total: float, width: int = BAR_WIDTH) -> Text:
    """A horizontal stacked bar: each (value, style) part in proportion to total."""
    text = Text()
    used = 0
    for value, style in parts:
        # The share first, clamped: width * 1e308 is inf, and round(inf) raises (the
        # collectors bound a server's figures; a bar never trusts them anyway).
        share = value / total if total > 0 and math.isfinite(total) else 0.0
        share = min(1.0, max(0.0, share)) if math.isfinite(share) else 0.0
        cells = min(round(width * share), width - used)
        text.append("█" * cells, style=style)
        used += cells
    text.append("░" * (width - used), style="grey37")
    return text


def sparkline(values: list[float], width: int = 30) -> Text:
    values = [v for v in values[-width:] if math.isfinite(v)]
    if not values:
        return Text("")
    lo, hi = min(values), max(values)
    span = hi - lo if math.isfinite(hi - lo) and hi > lo else 1.0
    top = len(SPARK) - 1
    shares = [(v - lo) / span for v in values]  # 0..1, or past it where hi - lo overflowed
    return Text("".join(SPARK[int(min(1.0, r) * top) if math.isfinite(r) else top]
                        for r in shares), style="cyan")


def columns(rows: list[list[Text | str]], justify: str = "") -> list[Text]:
    """Cells as aligned lines, one space between columns, each column as wide as its widest
    cell; ``justify`` gives "l" or "r" per column (left when not given). Lines, not a Rich
    Table: equal lines compare equal, so a panel whose figures did not move is not redrawn
    (Panel.refresh_from). Each line is made at once from its cells' text and styles (the
    same Text as appending cell by cell, for two thirds of the cost: a panel draws dozens of
    cells a second)."""
    cells = [[_cell(c) for c in row] for row in rows]
    widths = [max(width for _, width, _ in col) for col in zip(*cells, strict=True)]
    out = []
    for row in cells:
        parts: list[str] = []
        spans: list[Span] = []
        at = 0
        last = len(row) - 1
        for i, ((plain, cell_width, styles), width) in enumerate(zip(row, widths, strict=True)):
            pad = " " * (width - cell_width)
            right = justify[i:i + 1] == "r"
            lead = (" " if i else "") + (pad if right else "")
            trail = "" if right or i == last else pad
            at += len(lead)
            spans.extend(Span(start + at, end + at, style) for start, end, style in styles)
            parts += (lead, plain, trail)
            at += len(plain) + len(trail)
        out.append(Text("".join(parts), no_wrap=True, overflow="ellipsis", spans=spans))
    return out


def _cell(cell: Text | str) -> tuple[str, int, list[Span]]:
    """A cell's characters, width on screen and styles (its own style as a span over it,
    as Text.append_text takes it)."""
    if not isinstance(cell, Text):
        plain = strip_control_codes(cell)
        return plain, cell_len(plain), []
    plain = cell.plain
    whole = [Span(0, len(plain), cell.style)] if cell.style else []
    return plain, cell_len(plain), whole + cell.spans


LABEL_WIDTH = 8  # the longest row label of a panel ("capacity", "requests")


def row(label: str, value: str | Text, width: int = LABEL_WIDTH) -> Text:
    """One ``label value`` line that never wraps: a value too long for the panel ends in
    an ellipsis, and the label keeps its width."""
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{label:<{width}} ", style="bold")
    line.append(value if isinstance(value, Text) else Text(value))
    return line


def first_fitting(room: int | None, variants: tuple[str, ...]) -> str:
    """The most detailed of ``variants`` (most first) that fits ``room`` cells; the last,
    to be cut with an ellipsis, when none does."""
    for text in variants:
        if room is None or len(text) <= room:
            return text
    return variants[-1]


def fit(rows: list[tuple[int, Any]], height: int | None) -> list[Any]:
    """The rows that fit in ``height`` lines, the most important (lowest rank) first, shown
    in their own order; every row when the height is unknown or enough."""
    if not height or height <= 0 or len(rows) <= height:
        return [r for _, r in rows]
    keep = sorted(range(len(rows)), key=lambda i: (rows[i][0], i))[:height]
    return [rows[i][1] for i in sorted(keep)]


def quantile(q: Quantiles | None, which: Literal["p50", "p99"]) -> str:
    """A windowed quantile as it is known: Prometheus's histogram_quantile figure where its
    bucket is narrow enough for it to be a measurement ("57.4 ms"); else the bucket's bounds
    (Quantiles.bucketed: the rule is collectors.windowed's): "<= 100 ms" in the first
    bucket, "100-200 ms" in a wide one, "> 30 s" in the +Inf bucket, above which the
    histogram knows nothing. The history's charts plot the interpolated figure all the same
    (and say so)."""
    if q is None:
        return latency(None)
    b = q.bucketed(which)
    if b.coarse and b.lo is not None:
        return latency_bucket(b.lo, b.hi)
    return latency(b.value)


def unavailable(why: dict[str, str]) -> list[Text]:
    """Figures the server sent as NaN or Inf: shown as such, with the rank that sent them."""
    return [Text(f"{label} {reason}", style="yellow", no_wrap=True, overflow="ellipsis")
            for label, reason in why.items()]


def figure(line: LedgerLine | None, digits: int = 1) -> str:
    """A ledger's line in GiB; "?" where nobody reports it (never 0)."""
    return "?" if line is None or line.bytes is None else gib(line.bytes, digits)


def recent(store: RunStore, metric: SeriesName) -> list[float]:
    """The watched server's recent values of ``metric``."""
    s = store.line(SourceName.SERVER, metric)
    return [] if s is None else s.values(last=60)


def source_line(store: RunStore, kind: str, label: str) -> Text | None:
    """A line saying the source is failing, and for how long its values have been stale;
    for a server that was stopped, that the figures are its last."""
    st = model.source_status(store, kind)
    run = store.run
    if kind == SourceName.SERVER and st.status == "starting" and st.message.startswith("waiting"):
        return Text(st.message, style="dim")  # a start-up before its port opens
    if st.status in ("ok", "starting"):
        return None
    age = st.last_good_age_s
    if kind == SourceName.SERVER and run is not None and run.state in STOP_ASKED:
        return Text("server stopped" + ("" if age is None else
                                        f": the figures below are its last, {age:.0f} s old"),
                    style="dim yellow")
    stale = "no good reading yet" if age is None else f"last good value {age:.0f} s old"
    style = "yellow" if st.status == "unavailable" else "bold red"
    return Text(f"{label}: {visible(st.message)} ({stale})", style=style)


def source_rows(store: RunStore, kind: str, label: str) -> list[Any]:
    """A panel's first rows: its source's failure, if it is failing."""
    warn = source_line(store, kind, label)
    return [warn] if warn else []


def waiting(rows: list[Any], text: str) -> Group:
    return Group(*rows, Text(text, style="dim"))
