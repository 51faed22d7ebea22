"""Line charts as Rich Text, drawn with braille dots (2x4 per cell), for the history screen.

Pure functions: no Textual, no store. A chart is a title line with a legend, the plot with
labelled y ticks (top, middle, bottom), and an x axis in seconds before ``now``. Time runs
left to right over a fixed window; a pause in the data longer than the line's ``gap_s`` is
left blank rather than bridged, so a source that stopped answering reads as missing data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.text import Text

from collectors import GB, KB, MB

Point = tuple[float, float]

# Braille dot bits by (sub-column, dot row from the top of the cell).
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
_BRAILLE = 0x2800
NO_DATA = "no data in this window"
PALETTE = ("cyan", "magenta", "yellow", "green", "bright_blue", "red", "white", "orange1")


@dataclass(frozen=True)
class Line:
    label: str
    points: Sequence[Point]  # (monotonic time, value), oldest first
    colour: str = "cyan"
    # Two points further apart than this are not joined. None: 3x the median spacing.
    gap_s: float | None = None


def tick(value: float) -> str:
    """A y tick label: three significant digits, thousands grouped."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 x 10^k at or above value (1 when there is nothing)."""
    if not value > 0 or math.isinf(value):
        return 1.0
    base = 10.0 ** math.floor(math.log10(value))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if m * base >= value * (1 - 1e-9):
            return m * base
    return 10.0 * base


def rate_unit(bytes_per_s: float) -> tuple[float, str]:
    """Divisor and label for a byte rate. Decimal units: PCIe bandwidth is quoted in GB/s,
    as the dashboard's HBM panel shows PCIe receive."""
    for divisor, unit in ((GB, "GB/s"), (MB, "MB/s"), (KB, "kB/s")):
        if bytes_per_s >= divisor:
            return divisor, unit
    return 1.0, "B/s"


def ago(seconds: float, window: float) -> str:
    """An x label, in the unit the window reads best in: -300s, -15m, -2h."""
    if window >= 7200:
        return f"-{seconds / 3600:g}h"
    if window >= 600:
        return f"-{seconds / 60:g}m"
    return f"-{seconds:g}s"


def split_gaps(points: Sequence[Point], gap_s: float | None) -> list[list[Point]]:
    """Runs of points whose neighbours are at most gap_s apart."""
    if not points:
        return []
    if gap_s is None:
        steps = sorted(b[0] - a[0] for a, b in zip(points, points[1:], strict=False))
        gap_s = 3 * steps[len(steps) // 2] if steps else math.inf
    runs: list[list[Point]] = [[points[0]]]
    for prev, point in zip(points, points[1:], strict=False):
        if point[0] - prev[0] > gap_s:
            runs.append([])
        runs[-1].append(point)
    return runs


def _visible(points: Sequence[Point], start: float, now: float) -> list[float]:
    return [v for t, v in points if start <= t <= now]


def chart(lines: Sequence[Line], *, width: int, height: int, t_window: float, now: float,
          y_min: float = 0.0, y_max: float | None = None,
          fmt: Callable[[float], str] = tick, title: str = "") -> Text:
    """Draw lines over the last t_window seconds before now into width x height cells.

    y_max None: an axis from y_min to a nice maximum of what is visible. Values outside
    the axis are drawn at its edge. Too small a box gives the title alone.
    """
    out = Text("\n").join(chart_lines(lines, width=width, height=height, t_window=t_window,
                                       now=now, y_min=y_min, y_max=y_max, fmt=fmt,
                                       title=title))
    out.no_wrap, out.overflow = True, "crop"
    return out


def chart_lines(lines: Sequence[Line], *, width: int, height: int, t_window: float,
                now: float, y_min: float = 0.0, y_max: float | None = None,
                fmt: Callable[[float], str] = tick, title: str = "") -> list[Text]:
    """chart()'s lines, each a Text of its own: what a screen that draws a chart line by
    line takes (rather than cutting the whole chart into lines again)."""
    start = now - t_window
    visible = [_visible(line.points, start, now) for line in lines]
    seen = [v for values in visible for v in values]
    if y_max is None:
        y_max = nice_max(max(seen, default=0.0) - y_min) + y_min
    if y_max <= y_min:
        y_max = y_min + 1.0
    rows = height - 2
    dots_y = rows * 4
    span = y_max - y_min
    # Each labelled row holds the dot its value is drawn at: the top and bottom rows hold
    # y_max and y_min, and the middle label goes on the row where the half-way value lands.
    mid_row = rows - 1 - _round(0.5 * (dots_y - 1)) // 4
    labels = {0: fmt(y_max), rows - 1: fmt(y_min)}
    if rows >= 3:
        labels[mid_row] = fmt(y_min + span / 2)
    label_w = max(len(s) for s in labels.values())
    cols = width - label_w - 1
    head = Text(no_wrap=True, overflow="crop")
    head.append_text(_title_line(lines, [values[-1] if values else None for values in visible],
                                 title, width, fmt))
    if rows < 1 or cols < 2 or t_window <= 0:
        return [head]

    dots_x = cols * 2
    top = dots_y - 1
    floor = math.floor
    cells = [[0] * cols for _ in range(rows)]
    colours: list[list[str]] = [[""] * cols for _ in range(rows)]
    kx, ky = dots_x - 1, dots_y - 1

    def dot_row(y: float) -> int:
        """The dot row a height is drawn at, from the bottom (clamped to the axis)."""
        return floor((top if y > top else 0.0 if y < 0.0 else y) + 0.5)

    for line in lines:
        # A line that is not flat marks each dot column's span of rows as bits of one int
        # (bit b: dot row b from the bottom), and the cells are filled from them after,
        # rather than a dot at a time (the trend strip redraws every 2 s).
        columns = [0] * dots_x
        for run in split_gaps(line.points, line.gap_s):
            if run[-1][0] > now:  # (points come oldest first)
                run = [p for p in run if p[0] <= now]
                if not run:
                    continue
            # An idle node's lines, the common case: every point in one dot row (a flat
            # line, or one whose jitter is less than a dot). Joined, they would fill that
            # row from the first column to the last, as _draw_flat does without the joins.
            # A height's dot row never falls as the height rises: the lowest and highest
            # values tell, before any point is moved into dots.
            values = [v for _, v in run]
            row = dot_row((min(values) - y_min) / span * ky)
            if dot_row((max(values) - y_min) / span * ky) == row:
                x0, x1 = ((run[0][0] - start) / t_window * kx,
                          (run[-1][0] - start) / t_window * kx)
                if x1 >= 0:  # else wholly before the window
                    _draw_flat(0 if x0 < 0 else _round(x0), _round(x1), row,
                               cells, colours, line.colour)
            else:
                _draw_run([((t - start) / t_window * kx, (v - y_min) / span * ky)
                           for t, v in run], columns, top)
        if any(columns):
            _fill(columns, rows, cells, colours, line.colour)

    chars = [[chr(_BRAILLE + bits) if bits else " " for bits in row] for row in cells]
    if not seen and cols >= len(NO_DATA):
        c0 = (cols - len(NO_DATA)) // 2
        chars[mid_row][c0:c0 + len(NO_DATA)] = NO_DATA
    out = [head]
    for r in range(rows):
        shown = Text(no_wrap=True, overflow="crop")
        out.append(shown)
        shown.append(labels.get(r, "").rjust(label_w), style="dim")
        shown.append("┤" if r in labels else "│", style="dim")
        c = 0
        while c < cols:  # one span per run of cells of one colour
            end = c + 1
            while end < cols and colours[r][end] == colours[r][c]:
                end += 1
            shown.append("".join(chars[r][c:end]),
                         style=colours[r][c] or ("dim" if not seen else ""))
            c = end
    axis = Text(no_wrap=True, overflow="crop")
    axis.append(" " * (label_w + 1) + _x_axis(cols, t_window), style="dim")
    out.append(axis)
    return out


def _round(value: float) -> int:
    return math.floor(value + 0.5)


def _draw_run(pts: list[tuple[float, float]], columns: list[int], top: int) -> None:
    """Join consecutive points of one run (in dot coordinates; a lone point is one dot) into
    ``columns``: each dot column's rows as the bits of one int (bit b: dot row b from the
    bottom). A row beyond the axis (0 to ``top``) is drawn at its edge: a value a billion
    times the axis costs no billion dots.

    Each column covers the line's heights from half a column before to half after, so a
    steep rise reads as a line, not two dots. The marking is written out here rather than
    called: a line that moves every second (PCIe traffic, latency under load) marks two
    spans a dot column, two hundred a chart line, and a call each was half its drawing."""
    floor = math.floor
    last = len(columns) - 1
    cols = _columns(pts)
    for x, _, lo, hi, _ in cols:
        if 0 <= x <= last:
            low, high = floor(lo + 0.5), floor(hi + 0.5)
            low = 0 if low < 0 else top if low > top else low
            high = 0 if high < 0 else top if high > top else high
            columns[x] |= (2 << high) - (1 << low)
    for (a, _, _, _, y0), (b, y1, _, _, _) in zip(cols, cols[1:], strict=False):
        if y0 == y1:  # flat: one dot a column
            y = floor(y0 + 0.5)
            bit = 1 << (0 if y < 0 else top if y > top else y)
            for x in range(max(a, 0), min(b, last) + 1):
                columns[x] |= bit
            continue
        slope = (y1 - y0) / (b - a)
        for x in range(max(a, 0), min(b, last) + 1):
            ya = y0 + slope * ((x - 0.5 if x > a else a) - a)
            yb = y0 + slope * ((x + 0.5 if x < b else b) - a)
            if ya > yb:
                ya, yb = yb, ya
            low, high = floor(ya + 0.5), floor(yb + 0.5)
            low = 0 if low < 0 else top if low > top else low
            high = 0 if high < 0 else top if high > top else high
            columns[x] |= (2 << high) - (1 << low)


def _draw_flat(first: int, last: int, y: int, cells: list[list[int]],
               colours: list[list[str]], colour: str) -> None:
    """What _draw_run draws for a run whose points are all drawn in one dot row (y, from the
    bottom), without the joins: a dot a column from its first column in the window (the
    left edge when it began before) to its last, straight into the cells."""
    rows = len(cells)
    row, dot = rows - 1 - y // 4, 3 - y % 4
    left, right = _DOTS[0][dot], _DOTS[1][dot]
    cell, shade = cells[row], colours[row]
    for x in range(max(first, 0), min(last, 2 * len(cell) - 1) + 1):
        cell[x >> 1] |= right if x & 1 else left
        shade[x >> 1] = colour


def _columns(pts: list[tuple[float, float]]) -> list[tuple[int, float, float, float, float]]:
    """The run per dot column: (x, first y, lowest, highest, last y). However many points
    a column holds, drawing costs one column, so a long window stays cheap to redraw."""
    floor = math.floor
    out: list[tuple[int, float, float, float, float]] = []
    prev: tuple[float, float] | None = None
    for x, y in pts:
        if x < 0:
            prev = (x, y)
            continue  # before the window
        if prev is not None and prev[0] < 0:  # enter at the left edge, at the line's height
            px, py = prev
            edge = py + (y - py) * (0 - px) / (x - px)
            out.append((0, edge, edge, edge, edge))
        prev = (x, y)
        xi = floor(x + 0.5)
        if out and out[-1][0] == xi:
            _, first, low, high, _ = out[-1]
            out[-1] = (xi, first, y if y < low else low, y if y > high else high, y)
        else:
            out.append((xi, y, y, y, y))
    return out


# The braille bits of a cell's four dot rows (bit j: j rows from its bottom), by sub-column.
_CELL_BITS = tuple(tuple(sum(_DOTS[side][3 - j] for j in range(4) if nibble >> j & 1)
                         for nibble in range(16)) for side in (0, 1))


def _fill(columns: list[int], rows: int, cells: list[list[int]], colours: list[list[str]],
          colour: str) -> None:
    """One line's dot columns into the chart's cells: four dot rows a cell, two columns."""
    for x, bits in enumerate(columns):
        if not bits:
            continue
        col, side = x >> 1, _CELL_BITS[x & 1]
        lowest = ((bits & -bits).bit_length() - 1) >> 2
        for k in range(lowest, (bits.bit_length() - 1 >> 2) + 1):
            nibble = bits >> (4 * k) & 15
            if nibble:
                row = rows - 1 - k
                cells[row][col] |= side[nibble]
                colours[row][col] = colour


def _title_line(lines: Sequence[Line], latest: Sequence[float | None], title: str, width: int,
                fmt: Callable[[float], str]) -> Text:
    """The title, then each line's colour key, label and latest value while they fit; then
    without the values; then with short labels ("GPU3" as "3"); then as many keys as fit
    and how many more there are. No styled run starts with a blank: a viewer that drops a
    run's leading blank (some SVG renderers do) cannot glue a label to its value."""
    def parts(with_values: bool, short: bool, upto: int | None = None) -> list[tuple[str, str]]:
        out = [(f"{title}  " if title else "", "")]
        shown = lines if upto is None else lines[:upto]
        for line, last in zip(shown, latest, strict=False):  # last: its latest value in view
            label = line.label.removeprefix("GPU") if short else line.label
            out.append(("■ ", line.colour))
            if with_values and last is not None:
                out += ((f"{label} ", ""), (f"{fmt(last)}  ", "bold"))
            else:
                out.append((f"{label}  ", ""))
        if upto is not None and upto < len(lines):
            out.append((f"+{len(lines) - upto}", "dim"))
        return out

    def fits(candidate: list[tuple[str, str]]) -> bool:
        # Measured on the plain string: only the legend that fits is made a Text (the trend
        # strip's charts are narrow, and most of their candidates do not fit).
        return cell_len("".join(part for part, _ in candidate).rstrip()) <= width

    def legend(candidate: list[tuple[str, str]]) -> Text:
        text = Text(style="bold")
        for part, style in candidate:
            text.append(part, style=style)
        text.rstrip()
        return text

    for with_values, short in ((True, False), (False, False), (False, True)):
        candidate = parts(with_values, short)
        if fits(candidate):
            return legend(candidate)
    for upto in range(len(lines) - 1, -1, -1):
        candidate = parts(False, True, upto)
        if fits(candidate):
            return legend(candidate)
    text = legend(candidate)
    text.truncate(width, overflow="ellipsis")
    return text


def _x_axis(cols: int, window: float) -> str:
    """Seconds ago under the plot: left edge, middle and now, as space allows."""
    left, mid, right = ago(window, window), ago(window / 2, window), "now"
    if cols < len(left) + len(right) + 1:
        return right.rjust(cols)[:cols]
    axis = [" "] * cols
    axis[: len(left)] = left
    axis[cols - len(right):] = right
    m0 = cols // 2 - len(mid) // 2
    if m0 > len(left) and m0 + len(mid) < cols - len(right):
        axis[m0: m0 + len(mid)] = mid
    return "".join(axis)
