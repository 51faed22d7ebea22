"""Outside text on the screen: what the app hands a widget (a panel's lines, the header, the
log pane, a table's cells, a toast) passes through collectors.safetext.visible, so that a
label, log line or file holding ESC or a C1 control shows it as \\x1b and never acts on the
terminal. Rich and Textual pass those characters through to the terminal as they are.

A Rich Text keeps its styles: each span is moved by what the escapes before it added.

Behind that, SafeOutput checks what each frame writes: a control that reached a widget by a
path not made safe above is dropped there (it takes no cell: the line's layout holds), so
nothing a server or a file says is ever sent to the terminal as a control."""

from __future__ import annotations

import time
from typing import Any

from rich.cells import cell_len
from rich.console import Group
from rich.segment import Segment
from rich.text import Span, Text
from textual.strip import Strip

from collectors import unsafe_in, visible
from engram_top.app.mixin import AppMixin


def safe_text(text: Text, keep: str = "") -> Text:
    """`text` with its controls made visible, its spans and settings kept; the same object
    when there is nothing to escape (the common case: no copy, and a panel that compares
    its lines sees no change)."""
    plain = text.plain
    shown = visible(plain, keep)
    if shown is plain:
        return text
    # Where each character of `plain` begins in `shown`, and where it ends.
    where = [0] * (len(plain) + 1)
    at = 0
    for i, ch in enumerate(plain):
        where[i] = at
        at += len(visible(ch, keep))
    where[len(plain)] = at
    end = len(plain)
    spans = [Span(where[min(s.start, end)], where[min(s.end, end)], s.style)
             for s in text.spans]
    return Text(shown, style=text.style, justify=text.justify, overflow=text.overflow,
                no_wrap=text.no_wrap, end=text.end, tab_size=text.tab_size, spans=spans)


def safe(content: Any, keep: str = "") -> Any:
    """A panel's content, a line or a cell made safe: a Text, a Group of them, or a str;
    anything else is returned as it is (the app's own drawings: bars, charts)."""
    if isinstance(content, Text):
        return safe_text(content, keep)
    if isinstance(content, str):
        return visible(content, keep)
    if isinstance(content, Group):
        parts = content.renderables
        shown = [safe(part, keep) for part in parts]
        if all(a is b for a, b in zip(parts, shown, strict=True)):
            return content
        return Group(*shown, fit=content.fit)
    return content


def cell(value: object) -> Text:
    """A DataTable cell from outside text: made visible, and a Text, which the table draws
    as it is (a str would be read as Rich markup: a name holding "[/]" would break it)."""
    return Text(visible(value), no_wrap=True, end="")


def clean_strip(strip: Strip) -> Strip:
    """A screen line with any control left in it dropped (or, for the few that take a cell,
    such as a lone surrogate, a "?" in its place): the same object when it has none."""
    if strip.text.isprintable():
        return strip
    segments = []
    changed = False
    for segment in strip:
        text = segment.text
        if not text.isprintable() and unsafe_in(text):
            text = "".join("?" * cell_len(ch) if unsafe_in(ch) else ch for ch in text)
            segment = Segment(text, segment.style, segment.control)
            changed = True
        segments.append(segment)
    return Strip(segments, strip.cell_length) if changed else strip


def clean_update(update: Any) -> Any:
    """A frame for the terminal (Textual's compositor update) with its lines cleaned."""
    try:
        from textual._compositor import ChopsUpdate, InlineUpdate, LayoutUpdate
    except ImportError:  # another Textual: the widgets' own text is made safe all the same
        return update
    if isinstance(update, LayoutUpdate):
        update.strips = [[clean_strip(s) for s in line] for line in update.strips]
    elif isinstance(update, ChopsUpdate):
        update.chops = [{x: None if s is None else clean_strip(s) for x, s in chop.items()}
                        for chop in update.chops]
    elif isinstance(update, InlineUpdate):
        update.strips = [clean_strip(s) for s in update.strips]
    return update


class SafeOutput(AppMixin):
    """For an App: its toasts shown as text, never as markup, with their controls made
    visible (they quote names, answers and exceptions); and every frame it writes cleaned
    of any control that reached a widget by another path."""

    # Until when (monotonic) an error's toast stays up: clear_passing_toasts spares it.
    _errors_until = 0.0

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        if severity == "error":
            self._errors_until = time.monotonic() + (
                self.NOTIFICATION_TIMEOUT if timeout is None else timeout)
        super().notify(visible(message, "\n"), title=visible(title),
                       severity=severity, timeout=timeout, markup=markup)

    def clear_passing_toasts(self) -> None:
        """The toasts off the screen, unless an error's is up (Textual clears all or none):
        for a screen a presenter projects, which a warning raised a moment before it opened
        would cover for its seconds."""
        if time.monotonic() >= self._errors_until:
            self.clear_notifications()

    def _display(self, screen: Any, renderable: Any) -> None:
        if not self.is_headless:  # headless: nothing is written
            renderable = clean_update(renderable)
        super()._display(screen, renderable)
