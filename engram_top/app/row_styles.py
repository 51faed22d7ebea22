"""A widget's changed lines styled by its frame, kept, rather than worked out again.

Textual styles each line a widget draws (its borders, padding and background) from the
widget's styles, one line at a time: a border colour blended over the background, a box
character looked up, the padding made, for every line (about 0.15 ms a line here). Under
load the dashboard repaints a few changed lines of the KV and latency panels each second,
and each went through all of it. A content line of a widget is the same frame around new
content: what goes left of it (a border, padding) and right of it. Here the frame is taken
once from Textual's own drawing of a line of known content, and kept while what it was
made from is unchanged; a changed line is its frame around its new content.

Where Textual would do more to a content line than frame it (text opacity, a tint, a hatch,
an outline, a widget's opacity), or its drawing does not hold the known content as given,
every line is drawn by Textual. It extends a private part of Textual (the styles cache),
pinned by the project's Textual range; without it, widgets keep Textual's own.
"""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.terminal_theme import DEFAULT_TERMINAL_THEME
from textual.strip import Strip
from textual.widget import Widget

try:
    from textual._styles_cache import StylesCache
except ImportError:  # another Textual: its own
    StylesCache = None  # type: ignore[assignment,misc]  # a missing private module: widgets keep Textual's

# (what goes left of the content, what goes right, the content's background style)
Frame = tuple[list[Segment], list[Segment], RichStyle]


if StylesCache is not None:
    class RowStyles(StylesCache):
        """Textual's styles cache, drawing a content line as its kept frame around it."""

        def __init__(self) -> None:
            super().__init__()
            self._frame_key: tuple[object, ...] | None = None
            self._frame: Frame | None = None

        def clear(self) -> None:
            super().clear()
            self._frame_key = self._frame = None

        def render(self, styles: Any, size: Any, base_background: Any, background: Any,
                   render_content_line: Any, filters: Any, border_title: Any,
                   border_subtitle: Any, content_size: Any = None, padding: Any = None,
                   crop: Any = None, opacity: float = 1.0,
                   ansi_theme: Any = DEFAULT_TERMINAL_THEME,
                   native_ansi: bool = False) -> list[Strip]:
            content_size = size if content_size is None else content_size
            padding = styles.padding if padding is None else padding
            key = (size, content_size, padding, base_background, background, opacity,
                   styles.border, styles.outline, styles.text_opacity, styles.tint,
                   styles.has_rule("hatch") and styles.hatch, ansi_theme, native_ansi)
            if key != self._frame_key:
                self._frame_key = key
                self._frame = self._take_frame(styles, size, content_size, padding,
                                               base_background, background, opacity,
                                               ansi_theme, native_ansi)
            return super().render(styles, size, base_background, background,
                                  render_content_line, filters, border_title,
                                  border_subtitle, content_size=content_size,
                                  padding=padding, crop=crop, opacity=opacity,
                                  ansi_theme=ansi_theme, native_ansi=native_ansi)

        def render_line(self, styles: Any, y: int, size: Any, content_size: Any,
                        padding: Any, base_background: Any, background: Any,
                        render_content_line: Any, border_title: Any, border_subtitle: Any,
                        opacity: float, ansi_theme: Any, native_ansi: bool) -> Strip:
            frame, gutter = self._frame, styles.gutter
            if frame is not None and gutter.top <= y < size.height - gutter.bottom:
                left, right, inner = frame
                width, height = content_size
                row = y - gutter.top
                line = render_content_line(row) if row < height else Strip.blank(width, inner)
                line = line.adjust_cell_length(width, inner)
                return Strip([*left, *line, *right], size.width)
            return super().render_line(styles, y, size, content_size, padding,
                                       base_background, background, render_content_line,
                                       border_title, border_subtitle, opacity, ansi_theme,
                                       native_ansi)

        def _take_frame(self, styles: Any, size: Any, content_size: Any, padding: Any,
                        base_background: Any, background: Any, opacity: float,
                        ansi_theme: Any, native_ansi: bool) -> Frame | None:
            """Textual's drawing of a content line of known content, cut around it; None
            where Textual does more to a content line than frame it."""
            gutter = styles.gutter
            width, height = content_size
            if (opacity != 1.0 or styles.text_opacity != 1.0 or styles.tint.a
                    or (styles.has_rule("hatch") and styles.hatch != "none")
                    or any(edge for edge, _ in styles.outline)
                    or width <= 0 or height <= 0
                    or not gutter.top < size.height - gutter.bottom):
                return None
            known = Segment("\0" * width)
            drawn = super().render_line(styles, gutter.top, size, content_size, padding,
                                        base_background, background,
                                        lambda _y: Strip([known], width), None, None, opacity,
                                        ansi_theme, native_ansi)
            segments = list(drawn)
            at = [i for i, segment in enumerate(segments) if segment is known]
            if len(at) != 1:
                return None
            inner = self.get_inner_outer(base_background, background)[0].rich_style
            return segments[:at[0]], segments[at[0] + 1:], inner


def row_styles(widget: Widget) -> None:
    """Have ``widget`` draw its changed lines with RowStyles (where Textual has the part)."""
    if StylesCache is not None and type(widget._styles_cache) is StylesCache:
        widget._styles_cache = RowStyles()
