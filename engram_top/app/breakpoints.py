"""The size classes the dashboard's stylesheet lays out by (-wide, -tall, ...), set before
its first layout. Textual sets them at the first Resize, after the first frame, and then
styles the whole screen and lays it out again for them: at every start, in the minute a
user first looks at the dashboard."""

from __future__ import annotations

from typing import Any

from textual.app import App


def breakpoints(cells: int, points: list[tuple[int, str]]) -> dict[str, bool]:
    """Each breakpoint class, True for the one this many cells is at (Textual's rule: the
    largest breakpoint at or under it)."""
    at = max(((b, name) for b, name in points if cells >= b), default=(0, ""))[1]
    return {name: name == at for _, name in points}


def set_size_classes(app: App[Any]) -> None:
    """The app's screen given the classes of the app's size, as its first Resize would."""
    app.screen.update_classes(
        breakpoints(app.size.width, app.HORIZONTAL_BREAKPOINTS or [])
        | breakpoints(app.size.height, app.VERTICAL_BREAKPOINTS or []), animate=False)
