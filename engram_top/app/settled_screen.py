"""The apps' first screen, laid out again only when something changed.

Textual lays its first screen out for the first frame, then twice more for the same size:
the app's own Resize at its start and the terminal driver's each reach the screen after that
frame, and a Resize lays the whole screen out whatever its size (3-9 ms of a core each for
the dashboard, with its repaint). Then the notification rack, hidden by its stylesheet, is
hidden once more by an inline rule (no toast yet), and that change is a third layout (4-5 ms
and a repaint). A screen of this class takes a Resize of the size it is laid out at as
nothing to do, and has its rack's inline rule from its mount: after the first frame's layout
comes only the one its widgets' new sizes ask for, until something moves.

Both follow Textual's private parts (the screen's resize and its compositor's size, the
rack's type), pinned by the project's Textual range.
"""

from __future__ import annotations

from typing import Any

from textual.geometry import Size
from textual.screen import Screen

try:
    from textual.widgets._toast import ToastRack
except ImportError:  # another Textual: its rack as it is
    ToastRack = None  # type: ignore[assignment,misc]  # a missing private module


class SettledScreen(Screen[Any]):
    """A Screen with no layout pass for a Resize that resizes nothing."""

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
