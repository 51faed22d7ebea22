"""A repaint that draws only the widgets whose cells it writes, and only on those rows.

Textual repaints a screen's changes through one crop, the box around every changed region,
and draws every widget that box overlaps, each one whole: its lines come from its cache, but
each goes through the widget's styles and line filters again before most are thrown away
(only the changed regions are written). Under load a frame of the dashboard changes a few
lines of the KV and latency panels and, every other second, one of each trend chart: the box
around them held most of the screen, and every widget in it was drawn each second (and each
widget drawn costs about 0.1 ms, its styles and filters, whatever its rows). Here a widget is
drawn only on the rows where it would write a cell: under a changed region, and not covered
there by a widget in front of it (the screen and the containers behind the panels, under
every change, are drawn for none). What is written to the terminal is the same, cut from the
same strips.

It replaces a private part of Textual (the screen's compositor), pinned by the project's
Textual range; where that part is not as expected, a screen keeps Textual's own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from textual.geometry import Region
from textual.screen import Screen

from engram_top.app.mixin import AppMixin
from engram_top.app.settled_screen import SettledScreen

try:
    from textual._compositor import ChopsUpdate, Compositor
except ImportError:  # another Textual: its own repaint
    Compositor = None  # type: ignore[assignment,misc]  # a missing private module: the screens keep Textual's


if Compositor is not None:
    class RowsCompositor(Compositor):
        """Textual's compositor, drawing for a partial update only the widgets whose cells
        are written, each over those rows alone."""

        def __init__(self) -> None:
            super().__init__()
            self._changed: list[Region] | None = None  # this partial update's regions

        def render_partial_update(self) -> ChopsUpdate | None:
            self._changed = list(self._dirty_regions)
            try:
                return super().render_partial_update()
            finally:
                self._changed = None

        def _render_chops(self, crop: Region, is_rendered_line: Callable[[int], bool]
                          ) -> Sequence[Mapping[int, Any]]:
            """Textual's chops (each line's pieces between its cuts, a widget's edges),
            filled front to back as Textual fills them, the first widget at a cut winning:
            a widget is drawn only on the rows where a cut it spans is written (it lies
            under a changed span) and no widget in front of it has filled it yet."""
            changed = self._changed
            if changed is None:  # a full repaint: everything, as Textual does
                return super()._render_chops(crop, is_rendered_line)
            cuts = self.cuts
            chops: list[dict[int, Any]] = [dict.fromkeys(line[:-1]) for line in cuts]
            spans: dict[int, list[tuple[int, int]]] = {}
            for y, x1, x2 in self._regions_to_spans(changed):
                spans.setdefault(y, []).append((x1, x2))
            for widget, (region, clip) in self.visible_widgets.items():
                shown = region.intersection(clip)
                if not any(r.overlaps(shown) for r in changed):
                    continue
                left, right = shown.column_span
                rows = [y for y in shown.line_range if y in spans and is_rendered_line(y)
                        and _open(chops[y], cuts[y], left, right, spans[y])]
                for top, height in _runs(rows):
                    # Drawn over those rows, as Textual draws a widget scrolled half out of
                    # view: its cache keeps the rest, and their pending repaints.
                    strips = widget.render_lines(
                        Region(left - region.x, top - region.y, shown.width, height))
                    for y, strip in zip(range(top, top + height), strips, strict=False):
                        line = chops[y]
                        at = [cut for cut in cuts[y] if left <= cut <= right]
                        for cut, piece in zip(at, strip.divide([c - left for c in at[1:]]),
                                              strict=False):
                            if line.get(cut) is None:
                                line[cut] = piece
            return chops


def _open(line: dict[int, Any], cuts: list[int], left: int, right: int,
          spans: list[tuple[int, int]]) -> bool:
    """Whether a piece of this line between the widget's edges is still empty and under
    a changed span: what the widget would write there."""
    for cut, end in zip(cuts, cuts[1:], strict=False):
        if left <= cut < right and line.get(cut) is None \
                and any(cut < x2 and x1 < end for x1, x2 in spans):
            return True
    return False


# Rows a widget is drawn over as one run though nothing of them is written: a drawing
# costs about 0.1 ms whatever its rows, a row taken from the widget's cache far less, and
# what is drawn of those rows is thrown away as Textual throws it away (only the changed
# spans are written).
RUN_GAP = 3


def _runs(rows: list[int]) -> list[tuple[int, int]]:
    """Sorted rows as runs, neighbours and rows up to RUN_GAP apart together: (first, how
    many)."""
    runs: list[tuple[int, int]] = []
    for y in rows:
        if runs and runs[-1][0] + runs[-1][1] + RUN_GAP >= y:
            runs[-1] = (runs[-1][0], y + 1 - runs[-1][0])
        else:
            runs.append((y, 1))
    return runs


def repaint_rows(screen: Screen[Any]) -> Screen[Any]:
    """The screen, repainting as RowsCompositor does where this Textual allows it."""
    if Compositor is not None and type(getattr(screen, "_compositor", None)) is Compositor:
        screen._compositor = RowsCompositor()
    return screen


class RepaintsRows(AppMixin):
    """For an App: its default screen (the dashboard, the fleet table) repaints as
    RowsCompositor does, and is laid out only when something changed (SettledScreen)."""

    def get_default_screen(self) -> Screen[Any]:
        return repaint_rows(SettledScreen(id="_default"))
