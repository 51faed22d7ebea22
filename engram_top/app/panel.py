"""A bordered panel of the dashboard, drawn by a panel's function (engram_top.app.panels)
from a RunStore, redrawn only when its sources' versions move, and then only the lines that
changed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from rich.console import Group
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import RenderResult
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import RichVisual, Visual
from textual.widget import Widget
from textual.widgets import Static

from engram_top.app.row_styles import row_styles
from engram_top.app.safe import safe
from engram_top.model import RunStore

LineKey = tuple[object, ...]


class PanelDrawing(Protocol):
    """A panel's function (engram_top.app.panels): its lines for the room it has (None: any)."""

    def __call__(self, store: RunStore, rows: int | None = None,
                 cols: int | None = None) -> Group: ...


class Panel(Static):
    """A bordered panel redrawn from the store when one of its sources has a new version.

    A panel of lines of text (every panel of the dashboard) is drawn line by line, each
    line as Textual draws it within the whole: a new reading that moves one figure, or a
    trend that grows by a bar, repaints the screen lines that changed and no others."""

    def __init__(self, title: str, render_fn: PanelDrawing,
                 sources: tuple[str, ...], *, id: str,
                 inputs: Callable[[RunStore], object] | None = None) -> None:
        super().__init__(classes="panel", id=id)
        row_styles(self)  # its changed lines framed as the last (engram_top.app.row_styles)
        self.border_title = title
        self.render_fn = render_fn
        self.sources = sources
        # What the drawing reads of its sources, where a source's new version seldom
        # changes it (the HBM panel's GPUs beside a server page that moves every second):
        # drawn again only when that changes.
        self.inputs = inputs
        self._inputs: object = None
        self._seen: tuple[int, ...] | None = None
        self._shown_lines: tuple[LineKey, ...] | None = None
        # What it shows as lines (None: something else, drawn as a Static draws it).
        self._panel_lines: list[Text] | None = None
        self._panel_rows: list[Strip] | None = None  # the lines' screen rows, at _rows_width
        self._rows_width = 0
        self._line_strips: dict[LineKey, list[Strip]] = {}  # each line's rows, by its key

    def refresh_from(self, store: RunStore, force: bool = False) -> None:
        version = store.version(*self.sources)
        if version == self._seen and not force:
            return
        self._seen = version
        # The lines it has: a short panel keeps its most important rows (drawing.fit).
        size = self.content_size
        if self.inputs is not None:
            read = (self.inputs(store), size)
            if read == self._inputs and not force:
                return  # a new reading of its sources, but nothing it draws from moved
            self._inputs = read
        content = self.render_fn(store, rows=size.height or None, cols=size.width or None)
        # Its lines quote servers, labels and files: no control reaches the terminal.
        content = safe(content)
        shown = same_as_shown(content)
        if shown is not None and shown == self._shown_lines and not force:
            return  # a new reading with the same figures: nothing to redraw
        self._shown_lines = shown
        if shown is None or not isinstance(content, Group):
            self._panel_lines = None
            # Its size is the grid's, never its content's: no layout pass for a new value.
            self.update(content, layout=False)
            return
        self._panel_lines = texts(content.renderables)
        before, width = self._panel_rows, self.size.width
        self._panel_rows = None
        if force or before is None or not width or width != self._rows_width:
            self.refresh()
            return
        after = self._rows(width, shown)
        changed = [y for y in range(max(len(before), len(after)))
                   if y >= len(before) or y >= len(after) or before[y] != after[y]]
        if changed:
            self.refresh(*[Region(0, y, width, 1) for y in changed])

    def _rows(self, width: int, keys: tuple[LineKey, ...] | None = None) -> list[Strip]:
        """The screen rows of its lines at this width: a line already drawn at this width is
        not drawn again, and only the lines shown now are kept."""
        if self._panel_rows is not None and self._rows_width == width:
            return self._panel_rows
        lines = self._panel_lines or []
        keys = keys if keys is not None and len(keys) == len(lines) else \
            tuple(text_key(line) for line in lines)
        if width != self._rows_width:
            self._line_strips = {}
        new = {key: line for line, key in zip(lines, keys, strict=True)
               if key not in self._line_strips}
        drawn = {**self._line_strips, **self._draw(new, width)} if new else self._line_strips
        rows = [strip for key in keys for strip in drawn[key]]
        self._line_strips = {key: drawn[key] for key in keys}
        self._panel_rows, self._rows_width = rows, width
        return rows

    def _draw(self, lines: dict[LineKey, Text], width: int) -> dict[LineKey, list[Strip]]:
        """The screen rows of lines not drawn before, as the panel's Group draws them
        (RichVisual, the widget's style): the same cells as drawing the whole. A line that
        is one row as it stands straight from its segments (one_row); the others together,
        as a Group, where each takes one row (what Textual costs is per drawing, not per
        row), else one by one."""
        def draw(what: Text | Group) -> list[Strip]:
            return Visual.to_strips(self, RichVisual(self, what), width, None,
                                    self.visual_style)

        drawn = {key: [row] for key, line in lines.items()
                 if (row := one_row(self, line, width)) is not None}
        rest = {key: line for key, line in lines.items() if key not in drawn}
        # A Text alone may be justified by the widget's text-align, one in a Group not;
        # and a line without its newline would run on into the next.
        if len(rest) > 1 and not self.styles.has_rule("text_align") \
                and all(line.end == "\n" for line in rest.values()):
            strips = draw(Group(*rest.values()))
            if len(strips) == len(rest):  # each at least one row: each exactly one
                return {**drawn, **{key: [strip] for key, strip in zip(rest, strips, strict=True)}}
        return {**drawn, **{key: draw(line) for key, line in rest.items()}}

    def render(self) -> RenderResult:
        if self._panel_lines is None:
            return super().render()
        return Group(*self._panel_lines)

    def render_line(self, y: int) -> Strip:
        if self._panel_lines is None:
            return super().render_line(y)
        width, height = self.size
        rows = self._rows(width)
        if 0 <= y < min(len(rows), height):
            return rows[y]
        return Strip.blank(width, self.visual_style.rich_style)

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> Panel:
        if repaint and not regions:  # all of it: a style or the theme may have changed
            self._panel_rows = None
            self._line_strips = {}
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def notify_style_update(self) -> None:
        self._panel_rows = None
        self._line_strips = {}
        super().notify_style_update()

    def on_resize(self) -> None:
        # Its height changed: the next refresh lays its rows out again.
        self._seen = self._shown_lines = self._inputs = None


def one_row(widget: Widget, line: Text, width: int) -> Strip | None:
    """A line that is one row as it stands (no newline or tab in it, no wider than the row,
    not justified), drawn as a Group of lines draws it, without the wrapping, cutting and
    joining Rich does for any line (a third of the cost): its segments, each over the
    widget's style. None for any other line, and where the widget draws more than that (a
    selection, a link's style), for Textual's own drawing."""
    plain = line.plain
    if ("\n" in plain or "\t" in plain or line.end != "\n"
            or len(plain) > width or line.cell_len > width
            or line.justify not in (None, "default") or widget.text_selection is not None
            or widget.styles.content_align != ("left", "top")):
        return None
    console = widget.app.console
    # Rich's render of a line without spans leaves its style out (its drawing of a line
    # joins the style in as a span first): given here, as that join gives it.
    parts = line.render(console) if line.spans else \
        [Segment(plain, console.get_style(line.style, default=Style.null()))] if plain else []
    over = widget.visual_style.rich_style.__add__
    segments = [Segment(text, over(style)) for text, style, _ in parts]
    if any(segment.style is not None and segment.style.meta for segment in segments):
        return None  # a link or a click: Textual styles those itself
    return Strip(segments, line.cell_len)


def text_key(text: Text) -> tuple[object, ...]:
    """What a line shows: its characters, styles and how it fits (Text's own == leaves out
    the base style and the overflow)."""
    return (text.plain, tuple(text.spans), str(text.style), text.no_wrap, text.overflow,
            text.justify)


def same_as_shown(content: object) -> tuple[LineKey, ...] | None:
    """A panel's lines as comparable keys, or None when it holds something that is not a
    line of text (then it is always redrawn)."""
    lines = content.renderables if isinstance(content, Group) else [content]
    shown = texts(lines)
    if len(shown) != len(lines):
        return None
    return tuple(text_key(line) for line in shown)


def texts(lines: Sequence[object]) -> list[Text]:
    """The lines that are Text (all of a panel's lines: same_as_shown)."""
    return [line for line in lines if isinstance(line, Text)]
