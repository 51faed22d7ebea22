"""A repaint that draws only the widgets a change touches, and only the rows it spans.

Textual repaints a screen's changes through one crop, the box around every changed region,
and draws every widget that box overlaps, each one whole: its lines come from its cache, but
each goes through the widget's styles and line filters again before most are thrown away
(only the changed regions are written). On the dashboard the header, a panel's figure, the
trend strip and the events line change in the same frame under load, so every widget of the
screen was drawn each second: a quarter of a repaint, measured. Here a widget is drawn only
where a changed region overlaps it, over the rows those regions span; what is written to the
terminal is the same, cut from the same strips.

It replaces a private part of Textual (the screen's compositor), pinned by the project's
Textual range; where that part is not as expected, a screen keeps Textual's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual.geometry import Region
from textual.screen import Screen

from engram_top.app.mixin import AppMixin

try:
    from textual._compositor import ChopsUpdate, Compositor
except ImportError:  # another Textual: its own repaint
    Compositor = None  # type: ignore[assignment,misc]  # a missing private module: the screens keep Textual's


if Compositor is not None:
    class RowsCompositor(Compositor):
        """Textual's compositor, drawing for a partial update only the widgets under a
        changed region, each over the rows of the regions that overlap it."""

        def __init__(self) -> None:
            super().__init__()
            self._changed: list[Region] | None = None  # this partial update's regions

        def render_partial_update(self) -> ChopsUpdate | None:
            self._changed = list(self._dirty_regions)
            try:
                return super().render_partial_update()
            finally:
                self._changed = None

        def _get_renders(self, crop: Region | None = None
                         ) -> Iterable[tuple[Region, Region, list[Any]]]:
            changed = self._changed
            if crop is None or changed is None:  # a full repaint: everything, as Textual does
                yield from super()._get_renders(crop)
                return
            for widget, (region, clip) in self.visible_widgets.items():
                shown = region.intersection(clip)
                hits = [r for r in changed if r.overlaps(shown)]
                if not hits:
                    continue  # nothing written over it: its lines would be thrown away
                top = min(r.y for r in hits)
                rows = shown.intersection(
                    Region(shown.x, top, shown.width, max(r.bottom for r in hits) - top))
                if rows.width and rows.height:
                    # Clipped to those rows, as Textual clips a widget scrolled half out of
                    # view: its cache keeps the rest, and their pending repaints.
                    yield region, rows, widget.render_lines(Region(
                        rows.x - region.x, rows.y - region.y, rows.width, rows.height))


def repaint_rows(screen: Screen[Any]) -> Screen[Any]:
    """The screen, repainting as RowsCompositor does where this Textual allows it."""
    if Compositor is not None and type(getattr(screen, "_compositor", None)) is Compositor:
        screen._compositor = RowsCompositor()
    return screen


class RepaintsRows(AppMixin):
    """For an App: its default screen (the dashboard, the fleet table) repaints as
    RowsCompositor does."""

    def get_default_screen(self) -> Screen[Any]:
        return repaint_rows(super().get_default_screen())
