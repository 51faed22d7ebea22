"""The apps' first screen, laid out again only when something changed.

Textual lays its first screen out for the first frame, then twice more for the same size:
the app's own Resize at its start and the terminal driver's each reach the screen after that
frame, and a Resize lays the whole screen out whatever its size (3-9 ms of a core each for
the dashboard, with its repaint). Then the notification rack, hidden by its stylesheet, is
hidden once more by an inline rule (no toast yet), and that change is a third layout (4-5 ms
and a repaint). A screen of this class takes a Resize of the size it is laid out at as
nothing to do, and has its rack's inline rule from its mount.

And a whole layout pass is the last one for what it met. Textual lays the screen out once
more after any pass that sized a widget anew (the first frame's sizes every one): each
widget's new size and scrollable size ask for a layout and a repaint of their own, though
the pass laid them out at those sizes and painted them (9-10 ms of a core for the dashboard,
and a 6 ms repaint, in the first 50 ms). Here the requests a widget makes during the pass
are taken as met, and so are the layouts asked for before it, unless a scrollbar came or
went (the content's room changed: then Textual's next pass stands). A widget that had a
repaint or a layout pending before the pass keeps it.

Nor is the screen painted whole twice over for its first frame: the screen's first
ScreenResume lays it out and paints it whole (the first frame), or comes just after that
frame, and then asks for a whole repaint of its own (5-12 ms of a core for the dashboard).
At that first resume a screen painted whole at the app's size needs only what changed
since, which asked for its own repaint. A later resume (a dialog closed over it) repaints
it whole, as Textual does.

All of it follows Textual's private parts (the screen's resize, layout pass and layout
message, its compositor's size, a widget's refresh flags, the rack's type), pinned by the
project's Textual range.
"""

from __future__ import annotations

from typing import Any

from textual import events, messages
from textual.geometry import Region, Size
from textual.screen import Screen
from textual.widget import Widget

try:
    from textual.widgets._toast import ToastRack
except ImportError:  # another Textual: its rack as it is
    ToastRack = None  # type: ignore[assignment,misc]  # a missing private module
try:
    from textual._time import get_time  # what a Message's time is read by
except ImportError:  # another Textual: every pass followed as Textual follows it
    get_time = None  # type: ignore[assignment]  # a missing private module


class SettledScreen(Screen[Any]):
    """A Screen with no layout pass for a Resize that resizes nothing, nor for the sizes its
    own last pass gave."""

    _laid_out_at = float("-inf")  # when the last whole pass that stands began
    _whole_at: Size | None = None  # the size it was last painted whole at, on top since
    _resumed = False  # a ScreenResume has reached it
    _first_resume = False  # within the handling of the first

    def _screen_resized(self, size: Size) -> None:
        # Laid out at this size already: what changed since has asked for its own layout
        # (Widget.refresh(layout=True)) and gets it at the next update.
        if self.is_attached and size == self._compositor.size:
            return
        super()._screen_resized(size)

    def on_mount(self) -> None:
        if ToastRack is None:
            return
        for rack in self.query(ToastRack):
            # What the app sets at its first look at the notifications, set before the
            # first layout rather than after it.
            rack.display = bool(self.app._notifications)

    def _refresh_layout(self, size: Size | None = None, scroll: bool = False) -> None:
        outer = self.outer_size if size is None else size
        if get_time is None or not outer or not self.is_current \
                or (scroll and not self._layout_widgets):  # (a scroll: no layout pass)
            super()._refresh_layout(size, scroll)
            return
        widgets = [*self.walk_children(Widget)]
        # A scrollable widget's scrollbars are no children of it, and their display is set
        # in the pass too.
        widgets += [bar for w in widgets for bar in (w._horizontal_scrollbar,
                                                      w._vertical_scrollbar,
                                                      w._scrollbar_corner) if bar is not None]
        # What each had asked before the pass: a layout, a repaint.
        before = [(w._layout_required, w._repaint_required or bool(w._repaint_regions))
                  for w in widgets]
        bars = [(w.show_horizontal_scrollbar, w.show_vertical_scrollbar) for w in widgets]
        started = get_time()
        super()._refresh_layout(size, scroll)
        if bars != [(w.show_horizontal_scrollbar, w.show_vertical_scrollbar) for w in widgets]:
            return  # a scrollbar came or went: the room inside changed, laid out again
        self._laid_out_at = started
        self._layout_required = False  # asked before it (a pass at a resume leaves it set)
        for widget, (layout, repaint) in zip(widgets, before, strict=True):
            # What it asks now and had not before, the pass's sizes asked: met.
            if not layout:
                widget._layout_required = False
            if not repaint:
                widget._repaint_required = False
                widget._repaint_regions.clear()

    def _compositor_refresh(self) -> None:
        compositor = self._compositor
        # Textual paints the whole screen where its whole region is dirty (render_update).
        whole = self is self.app.screen and not self.app.is_inline \
            and compositor.size.region in compositor._dirty_regions
        asked = self._repaint_required  # a whole repaint, asked before this paint
        super()._compositor_refresh()
        if whole:
            self._whole_at = compositor.size
            if asked:
                self._repaint_required = False  # met by this one

    def on_screen_suspend(self) -> None:
        # Another screen over it: what is on the terminal is not this one's paint any more.
        self._whole_at = None

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        self._first_resume = not self._resumed
        self._resumed = True
        try:
            super()._on_screen_resume(event)
        finally:
            self._first_resume = False
        # Textual's handler has run (above): its dispatch, which calls each class's own
        # handler in turn, is not to call it again.
        event.prevent_default()

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> SettledScreen:
        if self._first_resume and self._whole_at == self.app.size \
                and not regions and repaint and not layout and not recompose:
            # The first resume's whole repaint, of a screen painted whole at this size (by
            # the resume's own layout pass, or for the first frame just before).
            return self
        super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)
        return self

    async def _on_layout(self, message: messages.Layout) -> None:
        if message.time < self._laid_out_at:  # asked before a whole pass that stands
            message.stop()
            message.prevent_default()
            return
        await super()._on_layout(message)
