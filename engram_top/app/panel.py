"""A bordered panel of the dashboard, drawn by one of panels.py's functions from a RunStore,
redrawn only when its sources' versions move and then only if its lines changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Group
from rich.text import Text
from textual.widgets import Static

from engram_top.store import RunStore


class Panel(Static):
    """A bordered panel redrawn from the store when one of its sources has a new version."""

    def __init__(self, title: str, render_fn: Callable[[RunStore], Any],
                 sources: tuple[str, ...], *, id: str) -> None:
        super().__init__(classes="panel", id=id)
        self.border_title = title
        self.render_fn = render_fn
        self.sources = sources
        self._seen: tuple[int, ...] | None = None
        self._shown_lines: tuple[object, ...] | None = None

    def refresh_from(self, store: RunStore, force: bool = False) -> None:
        version = store.version(*self.sources)
        if version == self._seen and not force:
            return
        self._seen = version
        # The lines it has: a short panel keeps its most important rows (panels.fit).
        size = self.content_size
        content = self.render_fn(store, rows=size.height or None, cols=size.width or None)
        shown = same_as_shown(content)
        if shown is not None and shown == self._shown_lines and not force:
            return  # a new reading with the same figures: nothing to redraw
        self._shown_lines = shown
        # Its size is the grid's, never its content's: no layout pass for a new value.
        self.update(content, layout=False)

    def on_resize(self) -> None:
        # Its height changed: the next refresh lays its rows out again.
        self._seen = self._shown_lines = None


def text_key(text: Text) -> tuple[object, ...]:
    """What a line shows: its characters, styles and how it fits (Text's own == leaves out
    the base style and the overflow)."""
    return (text.plain, tuple(text.spans), str(text.style), text.no_wrap, text.overflow,
            text.justify)


def same_as_shown(content: object) -> tuple[object, ...] | None:
    """A panel's lines as comparable keys, or None when it holds something that is not a
    line of text (then it is always redrawn)."""
    lines = content.renderables if isinstance(content, Group) else [content]
    if not all(isinstance(line, Text) for line in lines):
        return None
    return tuple(text_key(line) for line in lines)  # type: ignore[arg-type]
